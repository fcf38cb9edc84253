"""dwellmq as a test double: start the broker binary, move its clock, inspect it, inject faults.

    from dwellmq_testing import Dwellmq

    with Dwellmq.start() as broker:
        ...  # connect any AMQP client to broker.url
        broker.advance(hours=24)
        assert broker.queue("reminders")["ready"] == 1

The pytest plugin (`dwellmq_testing.plugin`, loaded automatically once installed) gives the
`dwellmq` (one broker per test) and `dwellmq_session` (one per run) fixtures.
"""

from __future__ import annotations

import base64
import importlib.metadata
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Iterable, Optional

__all__ = ["Dwellmq", "DwellmqError", "DwellmqTimeout", "bundled_binary", "find_binary"]

#: How long the binary may take to print its URLs.
STARTUP_TIMEOUT = 30.0


class DwellmqError(Exception):
    """The broker refused a request (the message carries its HTTP status and reason)."""

    def __init__(self, status: int, body: Any):
        self.status = status
        self.body = body
        reason = body.get("reason") if isinstance(body, dict) else body
        super().__init__(f"dwellmq answered {status}: {reason}")


class DwellmqTimeout(DwellmqError, AssertionError):
    """A `wait_for` condition did not hold in time; the message says what was seen."""


def bundled_binary() -> Optional[str]:
    """The `dwellmq` executable installed with this package from a wheel that carries it, if
    any: pip puts it in the environment's scripts directory (`bin/`, or `~/.local/bin` with
    `--user`) and lists it in the installed RECORD, which says exactly where."""
    try:
        dist = importlib.metadata.distribution("dwellmq-testing")
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == "dwellmq":
            path = os.path.realpath(dist.locate_file(file))
            if os.access(path, os.X_OK):
                return path
    return None


def find_binary(explicit: Optional[str] = None) -> str:
    """The `dwellmq` binary: `explicit`, else `$DWELLMQ_BIN`, else the one installed with this
    package (a wheel that carries it), else the one on PATH."""
    candidate = (
        explicit or os.environ.get("DWELLMQ_BIN") or bundled_binary() or shutil.which("dwellmq")
    )
    if not candidate:
        raise RuntimeError(
            "cannot find the dwellmq binary: install a dwellmq-testing wheel that carries it, "
            "set DWELLMQ_BIN, pass --dwellmq-bin, or put it on PATH"
        )
    return candidate


class Dwellmq:
    """A running dwellmq process, in memory, on free loopback ports."""

    def __init__(self, proc: subprocess.Popen, url: str, http_url: str, log_path: str):
        self.proc = proc
        #: The AMQP URL (`amqp://127.0.0.1:PORT`), vhost `/`.
        self.url = url
        #: The HTTP API's URL (`http://127.0.0.1:PORT`).
        self.http_url = http_url
        self.log_path = log_path
        self._auth = "Basic " + base64.b64encode(b"guest:guest").decode()

    @classmethod
    def start(
        cls,
        binary: Optional[str] = None,
        *,
        manual_clock: Optional[str] = "",
        name_seed: Optional[int] = 1,
        definitions: Optional[str] = None,
        data_dir: Optional[str] = None,
        extra_args: Iterable[str] = (),
    ) -> "Dwellmq":
        """Starts the binary. `manual_clock` is the clock's start (ms since 1970 or RFC 3339;
        "" for now; None for the system clock); `name_seed` makes server-generated names
        reproducible (None: random); `definitions` is a RabbitMQ definitions file to declare
        at start and at every `reset()`; `data_dir` keeps durable state there (for
        `restart()` and `fail_next_writes()`) instead of in memory."""
        command = [
            find_binary(binary),
            "--listen", "127.0.0.1:0",
            "--http", "127.0.0.1:0",
            "--log-level", "warn",
        ]
        command += ["--data-dir", str(data_dir)] if data_dir is not None else ["--in-memory"]
        if manual_clock is not None:
            command += ["--manual-clock=" + manual_clock] if manual_clock else ["--manual-clock"]
        else:
            # The /test endpoints come with a manual clock; on the system clock, ask for them.
            command += ["--test-api"]
        if name_seed is not None:
            command += ["--name-seed", str(name_seed)]
        if definitions is not None:
            command += ["--definitions", str(definitions)]
        command += list(extra_args)
        log = tempfile.NamedTemporaryFile(prefix="dwellmq-", suffix=".log", delete=False)
        proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log
        )
        log.close()
        lines: list = []

        def read_urls() -> None:
            for _ in range(2):
                lines.append(proc.stdout.readline().decode().strip())

        reader = threading.Thread(target=read_urls, daemon=True)
        reader.start()
        reader.join(STARTUP_TIMEOUT)
        if len(lines) < 2 or not lines[0].startswith("amqp://") or not lines[1].startswith("http://"):
            proc.kill()
            proc.wait()
            with open(log.name) as f:
                raise RuntimeError(f"dwellmq did not start ({' '.join(command)}): {lines}\n{f.read()[-3000:]}")
        # Keep reading, so that the broker never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        return cls(proc, lines[0], lines[1], log.name)

    # --- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stops the broker (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass

    def __enter__(self) -> "Dwellmq":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- HTTP --------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, timeout: float = 70.0) -> Any:
        """One call to the HTTP API; returns the decoded JSON (None for an empty answer)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.http_url + path, data=data, method=method)
        req.add_header("Authorization", self._auth)
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                text = response.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                detail = json.loads(raw)
            except ValueError:
                detail = raw.decode(errors="replace")
            cls = DwellmqTimeout if e.code == 408 else DwellmqError
            raise cls(e.code, detail) from None
        return json.loads(text) if text else None

    @staticmethod
    def _path(*parts: str) -> str:
        return "/".join(urllib.parse.quote(p, safe="") for p in parts)

    # --- the clock ---------------------------------------------------------------------------

    def clock(self) -> dict:
        """`{"manual", "now_ms", "now", "next_due_ms"}`."""
        return self.request("GET", "/test/clock")

    @property
    def now_ms(self) -> int:
        """The broker's time, ms since 1970."""
        return self.clock()["now_ms"]

    def advance(self, ms: int = 0, *, seconds: float = 0, minutes: float = 0, hours: float = 0,
                days: float = 0) -> dict:
        """Moves the clock forward; returns once everything due has been routed and written to
        the consumers' sockets. `{"now_ms", "now", "released"}`."""
        total = ms + int(1000 * (seconds + 60 * minutes + 3600 * hours + 86400 * days))
        return self.request("POST", "/test/clock/advance", {"ms": total})

    def advance_to(self, when: Any) -> dict:
        """Moves the clock to `when`: ms since 1970, or an RFC 3339 string."""
        return self.request("POST", "/test/clock/advance", {"to": when})

    # --- inspection --------------------------------------------------------------------------

    def queue(self, name: str, vhost: str = "/", peek: int = 10) -> dict:
        """Counts (ready, unacked, consumers, held by ttl/retrying/delayed), next due times and
        the first `peek` messages (properties, headers with x-death, payload)."""
        return self.request("GET", f"/test/queues/{self._path(vhost, name)}?peek={peek}")

    def held(self, exchange: str, vhost: str = "/", limit: int = 100) -> dict:
        """The messages a delayed exchange holds, in due order: `{"count", "next_due_ms",
        "messages": [{"due_ms", "due", "routing_key", "headers", ...}]}`."""
        return self.request(
            "GET", f"/test/exchanges/{self._path(vhost, exchange)}/held?limit={limit}"
        )

    # --- held messages ---------------------------------------------------------------------

    def move_held(self, exchange: str, id: str, *, due: Any = None,
                  delay_ms: Optional[int] = None, now: bool = False, vhost: str = "/") -> dict:
        """Gives the held message `id` (from `held()`) a new due time: `due` (ms since 1970 or
        an RFC 3339 string), `delay_ms` from now, or `now=True` (released before this returns).
        Its headers and body stay. Returns `{"id", "due_ms", "due"}`: its new id (an id names
        its due time). Raises DwellmqError: 404 if it is not held, 400 for a due time in the
        past or more than ten years away."""
        asked = [("now", True) if now else None,
                 ("delay_ms", delay_ms) if delay_ms is not None else None,
                 ("due", due) if due is not None else None]
        given = [a for a in asked if a is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of due=, delay_ms= and now=True")
        path = f"/api/delayed/{self._path(vhost, exchange)}/messages/{self._path(id)}/move"
        return self.request("POST", path, dict(given))

    def release_now(self, exchange: str, id: str, vhost: str = "/") -> dict:
        """Releases the held message `id` now: routed before this returns, as a clock advance
        would route it. Returns its new id as `move_held` does."""
        return self.move_held(exchange, id, now=True, vhost=vhost)

    def counters(self) -> dict:
        """published, routed, unroutable, returned, confirmed, nacked, redelivered,
        dead_lettered and dropped by reason, expired."""
        return self.request("GET", "/test/counters")

    def wait_for(self, condition: str, queue: Optional[str] = None, count: Optional[int] = None,
                 *, vhost: str = "/", timeout: float = 5.0) -> dict:
        """Waits until `condition` holds: "ready"/"unacked"/"consumers" (with `queue` and
        `count`) or "idle". Raises DwellmqTimeout (an AssertionError) saying what was seen."""
        body: dict = {"condition": condition, "vhost": vhost, "timeout_ms": int(timeout * 1000)}
        if queue is not None:
            body["queue"] = queue
        if count is not None:
            body["count"] = count
        return self.request("POST", "/test/wait", body)

    # --- fixtures ----------------------------------------------------------------------------

    def reset(self, to: str = "fixture") -> dict:
        """Removes every queue, exchange, binding, held message, fault and counter; with
        `to="fixture"` the definitions file is declared again. Connections stay open."""
        return self.request("POST", "/test/reset", {"to": to})

    # --- faults ------------------------------------------------------------------------------

    def close_connection(self, name: Optional[str] = None, code: int = 320,
                         text: str = "closed by a test") -> int:
        """The broker closes the connection(s) named `name` (the client's connection_name, or
        the management API's name; None: all) with `code`. Returns how many."""
        body = {"code": code, "text": text}
        if name is not None:
            body["connection"] = name
        return self.request("POST", "/test/faults/close-connection", body)["closed"]

    def close_channel(self, channel: int, name: Optional[str] = None, code: int = 406,
                      text: str = "closed by a test") -> int:
        """The broker closes channel `channel` of the named connection(s) with `code`."""
        body = {"channel": channel, "code": code, "text": text}
        if name is not None:
            body["connection"] = name
        return self.request("POST", "/test/faults/close-channel", body)["closed"]

    def nack_next_confirms(self, count: int) -> None:
        """The next `count` publisher confirms are basic.nack (the messages are still routed)."""
        self.request("POST", "/test/faults/nack-confirms", {"count": count})

    def delay_deliveries(self, queue: str, ms: int, vhost: str = "/") -> None:
        """Messages routed to `queue` enter it `ms` of broker time later (0 removes the fault)."""
        self.request("PUT", f"/test/faults/delay/{self._path(vhost, queue)}", {"ms": ms})

    def fail_next_writes(self, count: int) -> None:
        """The next `count` message writes to the store fail (their publishers get basic.nack).

        Only meaningful with a data directory (`dwellmq_options` with `--data-dir`)."""
        self.request("POST", "/test/faults/fail-writes", {"count": count})

    def restart(self, attempts: int = 1000) -> None:
        """Restarts the broker on the same data directory, addresses and clock time, and returns
        once the new broker answers. Clients must reconnect."""
        after = self.request("POST", "/test/restart")["restarts_after"]
        for _ in range(attempts):
            try:
                if self.request("GET", "/test/restart", timeout=1.0)["restarts"] >= after:
                    return
            except (OSError, DwellmqError):
                pass  # the listener is down while the broker restarts
            time.sleep(0.01)
        raise DwellmqError(503, "the broker did not come back after a restart")
