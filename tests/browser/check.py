#!/usr/bin/env python3
"""Loads the page at `/` of the real `dwellmq` binary in headless Chromium (what CI runs): the
timeline shows the held messages, cancelling one from the page removes it (checked through
AMQP with pika), and a screenshot is written to target/page.png.

    python3 tests/browser/check.py

Needs `chromium` (Debian package) and `pip install pika==1.3.2`. Chromium is driven over its
DevTools protocol on a pipe (`--remote-debugging-pipe`), so nothing beyond the standard
library and pika is needed. Exits non-zero on the first failed check.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pika

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 30.0  # seconds for any one wait: a hang guard, not a timing assertion


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


def broker_binary() -> Path:
    """$DWELLMQ_BIN when set (CI passes the one debug build every step shares), else a debug
    build made here."""
    configured = os.environ.get("DWELLMQ_BIN")
    if configured:
        return Path(configured)
    print("check: cargo build --bin dwellmq", flush=True)
    subprocess.run(["cargo", "build", "--quiet", "--bin", "dwellmq"], cwd=REPO, check=True)
    return target_dir() / "debug" / "dwellmq"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expect(condition: bool, what: str, detail: object = "") -> None:
    if not condition:
        raise SystemExit(f"check failed: {what}\n{detail}")
    print(f"ok: {what}", flush=True)


def wait_for(what: str, probe):
    deadline = time.monotonic() + TIMEOUT
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"check failed: timed out waiting for {what}")
        time.sleep(0.1)


class Chromium:
    """Headless Chromium, driven over the DevTools protocol on fds 3 (in) and 4 (out)."""

    def __init__(self, binary: str):
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        self._profile = tempfile.mkdtemp(prefix="dwellmq-chromium-")

        def wire_fds():
            # Fresh copies first, so that placing them at 3 and 4 cannot clobber each other;
            # dup2 makes them inheritable, and nothing else is (close_fds=False keeps them).
            into, out = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(into, 3)
            os.dup2(out, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={self._profile}",
             "--window-size=1100,1400", "about:blank"],
            close_fds=False, preexec_fn=wire_fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._buffer = b""
        self.session = None

    def send(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise SystemExit(f"DevTools {method} failed: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            # Bounded: a Chromium that stops answering fails the check instead of hanging it.
            ready, _, _ = select.select([self._from_chrome], [], [], TIMEOUT)
            if not ready:
                raise SystemExit(f"chromium sent nothing for {TIMEOUT}s on the DevTools pipe")
            chunk = os.read(self._from_chrome, 65536)
            if not chunk:
                raise SystemExit("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str, authorization: str) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.send("Target.attachToTarget",
                             {"targetId": target["targetId"], "flatten": True}, session=False)
        self.session = attached["sessionId"]
        self.send("Network.enable")
        # Basic auth on every request of the page, as a browser sends it once logged in.
        self.send("Network.setExtraHTTPHeaders", {"headers": {"Authorization": authorization}})
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})

    def eval(self, expression: str):
        result = self.send("Runtime.evaluate",
                           {"expression": expression, "returnByValue": True, "awaitPromise": True})
        return result.get("result", {}).get("value")

    def screenshot(self, path: Path) -> None:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        shutil.rmtree(self._profile, ignore_errors=True)


def api(port: int, path: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def scenario(amqp_url: str, http_port: int, chromium: str) -> None:
    params = pika.URLParameters(amqp_url.rstrip("/") + "/%2f")
    connection = pika.BlockingConnection(params)
    ch = connection.channel()
    # Confirms: each publish has been handled by the time basic_publish returns.
    ch.confirm_delivery()
    ch.exchange_declare("later", "x-delayed-message", arguments={"x-delayed-type": "direct"})
    ch.queue_declare("jobs")
    ch.queue_bind("jobs", "later", "job")
    # Two due soon ("first" before "second"), and one far ahead. The broker runs on a manual
    # clock, so nothing falls due while Chromium starts, however slow it is; the check moves
    # the clock past "second" at the end.
    for body, delay in (("first", 10_000), ("second", 10_500), ("far", 3_000_000)):
        ch.basic_publish("later", "job", body.encode(),
                         pika.BasicProperties(headers={"x-delay": delay}))
    held = api(http_port, "/api/delayed/%2F/later")
    expect(held["messages_delayed"] == 3, "three messages held", held)
    # A message waiting for its TTL, one waiting for a delayed retry, one discarded.
    ch.queue_declare("ttl", arguments={"x-message-ttl": 60_000})
    ch.basic_publish("", "ttl", b"expires")
    ch.queue_declare("retry", durable=True, arguments={
        "x-queue-type": "quorum", "x-delayed-retry-type": "failed",
        "x-delayed-retry-min": 30_000, "x-delayed-retry-max": 120_000})
    ch.basic_publish("", "retry", b"job")
    method, _, _ = ch.basic_get("retry")
    ch.basic_reject(method.delivery_tag, requeue=True)
    ch.queue_declare("lossy")
    ch.basic_publish("", "lossy", b"dropped")
    method, _, _ = ch.basic_get("lossy")
    ch.basic_reject(method.delivery_tag, requeue=False)
    retry = api(http_port, "/api/queues/%2F/retry")
    expect(retry["messages_delayed"] == 1, "a message waits for a delayed retry", retry)
    first_id = held["items"][0]["id"]

    browser = Chromium(chromium)
    try:
        token = base64.b64encode(b"guest:guest").decode()
        browser.open(f"http://127.0.0.1:{http_port}/", f"Basic {token}")
        wait_for("the page to load", lambda: browser.eval("document.body.dataset.loaded") == "true")
        bars = browser.eval(
            "[...document.querySelectorAll('.timeline div')].map(d => +d.dataset.count)")
        expect(sum(bars) == 3 and bars[0] == 2, "the timeline shows the held messages", bars)
        buttons = browser.eval("document.querySelectorAll('button.cancel').length")
        expect(buttons == 3, "each held message has a cancel button", buttons)
        rows = browser.eval(
            "Object.fromEntries([...document.querySelectorAll('#queues tbody tr')]"
            ".map(r => [r.cells[1].textContent, [...r.cells].map(c => c.textContent)]))")
        expect(rows["retry"][8] == "1" and rows["retry"][9] != "",
               "the page shows the message waiting for a retry, with its due time", rows)
        expect(rows["ttl"][10] == "1" and rows["ttl"][11] != "",
               "the page shows the message waiting for its TTL, with its expiry", rows)
        deaths = browser.eval(
            "Object.fromEntries([...document.querySelectorAll('#deaths tbody tr')]"
            ".map(r => [r.cells[0].textContent, [r.cells[1].textContent, r.cells[2].textContent]]))")
        expect(deaths.get("rejected") == ["0", "1"], "the page counts deaths by reason", deaths)
        lateness = browser.eval("document.querySelectorAll('#lateness div').length")
        expect(lateness > 1, "the page draws the release-lateness histogram", lateness)
        shot = target_dir() / "page.png"
        browser.screenshot(shot)
        print(f"screenshot: {shot}", flush=True)
        clicked = browser.eval(
            f"(() => {{ const b = document.querySelector('button.cancel[data-id=\"{first_id}\"]');"
            " if (!b) return false; b.click(); return true; })()")
        expect(clicked is True, "the page cancels a message", first_id)
        wait_for("the page to show two messages",
                 lambda: browser.eval("document.querySelectorAll('button.cancel').length") == 2)
        expect(api(http_port, "/api/delayed/%2F/later")["messages_delayed"] == 2,
               "the broker holds two messages")
    finally:
        browser.close()

    # "first" was due before "second": had it not been cancelled, it would arrive first.
    # The advance returns once everything due is routed.
    moved = api(http_port, "/test/clock/advance", {"ms": 11_000})
    expect(moved.get("released") == 1, "moving the clock releases one message", moved)
    method, _, body = ch.basic_get("jobs", auto_ack=True)
    received = body.decode() if method is not None else None
    expect(received == "second", "through AMQP: the cancelled message never arrives", received)
    connection.close()


def main() -> int:
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which(
        "chromium-browser")
    if not chromium:
        print("check: chromium is missing (apt-get install chromium)", file=sys.stderr)
        return 2
    binary = broker_binary()
    port = free_port()
    broker = subprocess.Popen(
        [str(binary), "--listen", "127.0.0.1:0", "--in-memory", "--http", f"127.0.0.1:{port}",
         "--manual-clock"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        url = broker.stdout.readline().strip() if broker.stdout else ""
        expect(url.startswith("amqp://"), "the broker started", url)
        scenario(url, port, chromium)
    finally:
        broker.terminate()
        broker.wait(timeout=30)
    print("check: the page works in Chromium", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
