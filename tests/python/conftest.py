"""pytest fixtures for the pika interop tests.

A session fixture builds the `dwellmq` binary (unless told otherwise), starts it on an ephemeral
port with `--listen 127.0.0.1:0 --in-memory`, reads the AMQP URL from its first stdout line and
stops it at the end of the session. So `python3 -m pytest tests/python` works by hand and
`tests/python/run_interop.py` (what CI runs) only has to call pytest.

Environment:
  DWELLMQ_URL        run against an already running broker at this URL (nothing is built/started);
                     pointing it at a real RabbitMQ with the delayed-message plugin is the way to
                     check that the tests themselves assert RabbitMQ's behaviour
  DWELLMQ_BIN        use this broker binary instead of building one
  CARGO_TARGET_DIR   where cargo builds (default: <repo>/target), as cargo itself honours it
  DWELLMQ_TEST_TIMEOUT  seconds a single test may take before it is aborted (default 60)
  CI                 when true (.ci/run sets it), a test that would be skipped fails instead
"""

from __future__ import annotations

import atexit
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import pika
import pytest

REPO = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def target_dir() -> Path:
    configured = os.environ.get("CARGO_TARGET_DIR")
    if configured:
        path = Path(configured)
        return path if path.is_absolute() else REPO / path
    return REPO / "target"


def build_broker() -> Path:
    """Builds the broker with cargo (a no-op when up to date) and returns the binary's path."""
    print("conftest: cargo build --bin dwellmq", flush=True)
    subprocess.run(["cargo", "build", "--bin", "dwellmq"], cwd=REPO, check=True)
    binary = target_dir() / "debug" / "dwellmq"
    if not binary.is_file():
        raise RuntimeError(f"cargo build succeeded but {binary} does not exist")
    return binary


def broker_binary() -> Path:
    configured = os.environ.get("DWELLMQ_BIN")
    if configured:
        return Path(configured)
    return build_broker()


def with_default_vhost(url: str) -> str:
    """The broker prints `amqp://host:port`; pika wants the vhost in the path (`/%2f` is `/`)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.path in ("", "/"):
        parsed = parsed._replace(path="/%2f")
    return urllib.parse.urlunsplit(parsed)


class BrokerProcess:
    """A running `dwellmq` child process; stderr goes to a log file shown on failure."""

    def __init__(self, binary: Path, extra_args: tuple[str, ...] = ()):
        self.log = tempfile.NamedTemporaryFile(
            prefix="dwellmq-interop-", suffix=".log", delete=False
        )
        atexit.register(Path(self.log.name).unlink, missing_ok=True)
        self.proc = subprocess.Popen(
            [
                str(binary),
                "--listen",
                "127.0.0.1:0",
                "--in-memory",
                "--http",
                "off",
                "--log-level",
                "info",
                *extra_args,
            ],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=dict(os.environ, NO_COLOR="1"),
        )
        self.url = self._read_url()
        # Keep draining stdout so the broker can never block on a full pipe.
        threading.Thread(target=self._drain_stdout, daemon=True).start()

    def _read_url(self) -> str:
        result: list[bytes] = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()))
        reader.daemon = True
        reader.start()
        reader.join(STARTUP_TIMEOUT)
        line = result[0].decode().strip() if result else ""
        if not line.startswith("amqp://"):
            self.stop()
            raise RuntimeError(
                f"dwellmq did not print its AMQP URL within {STARTUP_TIMEOUT:.0f}s "
                f"(first line: {line!r}, exit code: {self.proc.poll()})\n{self.log_tail()}"
            )
        return line

    def _drain_stdout(self) -> None:
        for _ in self.proc.stdout:
            pass

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = Path(self.log.name).read_text(errors="replace")
        except OSError:
            return ""
        text = ANSI_ESCAPE.sub("", text)
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        self.log.close()
        return self.proc.returncode


_broker: BrokerProcess | None = None


@pytest.fixture(scope="session")
def broker_url() -> str:
    """The AMQP URL (with vhost `/`) of the broker under test."""
    global _broker
    external = os.environ.get("DWELLMQ_URL")
    if external:
        yield with_default_vhost(external)
        return
    _broker = BrokerProcess(broker_binary())
    print(f"dwellmq listening on {_broker.url}", file=sys.stderr)
    try:
        yield with_default_vhost(_broker.url)
    finally:
        crashed = not _broker.alive()
        code = _broker.stop()
        if crashed:
            pytest.fail(f"dwellmq exited during the tests with code {code}\n{_broker.log_tail()}")


@pytest.fixture(autouse=True)
def _broker_survives(request):
    """Aborts a test that hangs and fails one after which the broker process is gone."""
    limit = int(os.environ.get("DWELLMQ_TEST_TIMEOUT", "60"))

    def on_alarm(signum, frame):
        raise TimeoutError(f"test took longer than {limit}s (hung waiting for the broker?)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if _broker is not None and not _broker.alive():
        code = _broker.proc.returncode
        pytest.fail(f"dwellmq exited (code {code}) during this test\n{_broker.log_tail()}")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _broker is not None and exitstatus not in (0, pytest.ExitCode.OK):
        terminalreporter.section("dwellmq log (tail)")
        terminalreporter.write_line(_broker.log_tail())


def skip_outside_ci(reason: str) -> None:
    """Skips the test, except under CI (`CI=true`, as .ci/run sets), where a test that cannot
    run fails: what CI reports as passed has run."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI runs every test: unset DWELLMQ_URL)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def own_broker(broker_url):
    """Starts brokers of the test's own from TOML config text (for settings the shared broker
    must not have, like a tiny memory watermark); returns their URLs and stops them afterwards.

    Skipped (and reported so) when DWELLMQ_URL names an external broker: its configuration is
    not ours to change. Under CI that is a failure (`skip_outside_ci`).
    """
    if os.environ.get("DWELLMQ_URL"):
        skip_outside_ci("needs a dwellmq of its own; DWELLMQ_URL points at an external broker")
    started: list[BrokerProcess] = []

    def start(config_toml: str) -> str:
        config = tempfile.NamedTemporaryFile(
            "w", prefix="dwellmq-interop-", suffix=".toml", delete=False
        )
        atexit.register(Path(config.name).unlink, missing_ok=True)
        with config:
            config.write(config_toml)
        started.append(BrokerProcess(broker_binary(), ("--config", config.name)))
        return with_default_vhost(started[-1].url)

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def params(broker_url) -> pika.URLParameters:
    p = pika.URLParameters(broker_url)
    p.connection_attempts = 3
    p.retry_delay = 0.2
    p.blocked_connection_timeout = 30
    return p


@pytest.fixture
def connect(params):
    """Opens BlockingConnections to the broker and closes whatever is still open afterwards."""
    opened: list[pika.BlockingConnection] = []

    def open_connection() -> pika.BlockingConnection:
        conn = pika.BlockingConnection(params)
        opened.append(conn)
        return conn

    yield open_connection
    for conn in opened:
        if conn.is_open:
            try:
                conn.close()
            except Exception:  # a test may leave a connection in any state
                pass


@pytest.fixture
def conn(connect) -> pika.BlockingConnection:
    return connect()


@pytest.fixture
def channel(conn):
    return conn.channel()


@pytest.fixture
def name(request) -> "NameFactory":
    """Unique names for queues and exchanges: name("q") -> "<test>-q-<random>"."""
    return NameFactory(request.node.name)


class NameFactory:
    def __init__(self, test_name: str):
        self.prefix = "".join(c if c.isalnum() else "-" for c in test_name)[:32]
        self.suffix = uuid.uuid4().hex[:8]

    def __call__(self, what: str) -> str:
        return f"py-{self.prefix}-{what}-{self.suffix}"


def wait_until(conn: pika.BlockingConnection, predicate, timeout: float = 10.0) -> bool:
    """Pumps pika's IO until `predicate()` holds or `timeout` seconds pass; returns the result."""
    deadline = time.monotonic() + timeout
    while not predicate():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return predicate()
        conn.process_data_events(time_limit=min(remaining, 0.05))
    return True
