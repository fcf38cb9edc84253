#!/usr/bin/env python3
"""Loads the page at `/` of the real `dwellmq` binary in headless Chromium (what CI runs): the
page logs in with its own form (a failed login makes the browser prompt for nothing), the
timeline shows the held messages, durations read in human units, releasing one now from the
page delivers it at once, moving one gives it a new due time, and cancelling one removes it
(checked through AMQP with pika),
and a screenshot is written to target/page.png.
Then the attacks an operator's browser must not carry: a page on another site posts forms and
no-cors fetches to the API while the browser holds the operator's credentials, and a page
whose name is rebound to the broker's address calls the API as `guest`; neither changes
anything.

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
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pika

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 30.0  # seconds for any one wait: a hang guard, not a timing assertion
GUEST = "Basic " + base64.b64encode(b"guest:guest").decode()
# Names Chromium resolves to this machine without DNS: another site, and a site whose name an
# attacker has re-pointed at the broker's address (DNS rebinding).
EVIL = "evil.test"
REBOUND = "rebound.test"


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
             f"--host-resolver-rules=MAP {EVIL} 127.0.0.1, MAP {REBOUND} 127.0.0.1",
             "--window-size=1100,1400", "about:blank"],
            close_fds=False, preexec_fn=wire_fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._buffer = b""
        self.session = None
        #: (session, url, status, headers) of every response the open tabs received.
        self.responses: list = []

    def send(self, method: str, params: dict | None = None, session: bool = True) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("method") == "Network.responseReceived":
                response = reply["params"]["response"]
                headers = {k.lower(): v for k, v in response.get("headers", {}).items()}
                self.responses.append(
                    (reply.get("sessionId"), response["url"], response["status"], headers))
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

    def open(self, url: str, headers: dict | None = None) -> str:
        """Opens a tab at `url` and makes it the one commands go to; `headers` are sent with
        every request the tab makes (as a browser attaches credentials it has cached)."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.send("Target.attachToTarget",
                             {"targetId": target["targetId"], "flatten": True}, session=False)
        self.session = attached["sessionId"]
        self.send("Network.enable")
        if headers:
            self.send("Network.setExtraHTTPHeaders", {"headers": headers})
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})
        return self.session

    def wait_for(self, what: str, expression: str):
        """Polls a JavaScript expression in the current tab until it is truthy."""
        return wait_for(what, lambda: self.eval(expression))

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
    request.add_header("Authorization", GUEST)
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def attack_page(api_origin: str) -> bytes:
    """Another site's page: on load, HTML forms post to the API (text/plain, urlencoded,
    multipart: all a form can send) into hidden frames, and scripts fetch it in no-cors mode
    and, for the record, with CORS (which needs a preflight the API never grants)."""
    publish = f"{api_origin}/api/exchanges/%2F/amq.default/publish"
    # The classic text/plain trick: name and value join as `name=value` into a JSON body.
    field = html_attr('{"routing_key":"jobs","payload":"pwned","payload_encoding":"string",'
                      '"properties":{},"x":"')
    definitions = html_attr('{"queues":[{"name":"pwned","vhost":"/","durable":false,'
                            '"auto_delete":false,"arguments":{}}]}')
    body = json.dumps({"routing_key": "jobs", "payload": "pwned",
                       "payload_encoding": "string", "properties": {}})
    return f"""<!doctype html><html><body>
<iframe name="f1"></iframe><iframe name="f2"></iframe><iframe name="f3"></iframe>
<iframe name="f4"></iframe>
<form target="f1" method="post" enctype="text/plain" action="{publish}">
  <input name="{field}" value='"}}'></form>
<form target="f2" method="post" action="{api_origin}/test/reset">
  <input name="to" value="empty"></form>
<form target="f3" method="post" enctype="multipart/form-data"
  action="{api_origin}/api/definitions"><input name="file" value="{definitions}"></form>
<form target="f4" method="post" action="{api_origin}/test/clock/advance">
  <input name="ms" value="86400000"></form>
<script>
const results = {{}};
const frames = new Promise(done => {{
  let left = 4;
  for (const f of document.querySelectorAll("iframe")) f.onload = () => {{ if (--left === 0) done(); }};
}});
async function attempt(name, url, init) {{
  try {{ results[name] = (await fetch(url, init)).type; }}
  catch (e) {{ results[name] = "refused: " + e.name; }}
}}
window.onload = async () => {{
  for (const form of document.forms) form.submit();
  await Promise.all([
    attempt("no-cors text", "{publish}", {{ method: "POST", mode: "no-cors",
      credentials: "include", body: {json.dumps(body)} }}),
    attempt("no-cors json", "{publish}", {{ method: "POST", mode: "no-cors",
      credentials: "include", headers: {{ "Content-Type": "application/json" }},
      body: {json.dumps(body)} }}),
    attempt("cors put", "{api_origin}/api/queues/%2F/pwned", {{ method: "PUT",
      headers: {{ "Content-Type": "application/json", Authorization: "{GUEST}" }},
      body: "{{}}" }}),
    frames,
  ]);
  document.body.dataset.results = JSON.stringify(results);
}};
</script></body></html>""".encode()


def html_attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;")


def serve_attack_page(api_origin: str) -> ThreadingHTTPServer:
    """The other site: any path answers the attack page."""
    page = attack_page(api_origin)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def publish_fixture(ch, http_port: int) -> list:
    """Held messages, one waiting for its TTL, one for a delayed retry, one discarded; returns
    the ids of the held messages in due order."""
    ch.exchange_declare("later", "x-delayed-message", arguments={"x-delayed-type": "direct"})
    ch.queue_declare("jobs")
    ch.queue_bind("jobs", "later", "job")
    # Two due soon ("first" before "second"), one later this hour, one tomorrow. The broker
    # runs on a manual clock, so nothing falls due while Chromium starts, however slow it is;
    # the check moves the clock past "second" at the end.
    for body, delay in (("first", 10_000), ("second", 10_500), ("far", 3_000_000),
                        ("tomorrow", 86_246_500)):
        ch.basic_publish("later", "job", body.encode(),
                         pika.BasicProperties(headers={"x-delay": delay}))
    held = api(http_port, "/api/delayed/%2F/later")
    expect(held["messages_delayed"] == 4, "four messages held", held)
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
    return [item["id"] for item in held["items"]]


def log_in(browser: Chromium, user: str, password: str) -> None:
    browser.eval(
        "(() => { const f = document.getElementById('login');"
        f" f.user.value = {json.dumps(user)}; f.password.value = {json.dumps(password)};"
        " f.requestSubmit(); })()")


def check_login(browser: Chromium, http_port: int) -> str:
    """Opens the page, fails a login, then logs in; returns the page's tab."""
    tab = browser.open(f"http://127.0.0.1:{http_port}/")
    browser.wait_for("the login form", "!document.getElementById('login').hidden")
    log_in(browser, "guest", "wrong")
    browser.wait_for("the failed login to show",
                     "document.getElementById('login-error').textContent === 'login failed'")
    refused = [r for r in browser.responses if r[1].endswith("/api/whoami") and r[2] == 401]
    expect(refused and all("www-authenticate" not in r[3] for r in refused),
           "a failed login is a 401 without a challenge: the browser prompts for nothing "
           "and caches nothing", refused)
    log_in(browser, "guest", "guest")
    browser.wait_for("the page to load", "document.body.dataset.loaded === 'true'")
    expect(browser.eval("sessionStorage.length") == 1, "the page keeps the credentials itself")
    return tab


def check_page(browser: Chromium) -> None:
    bars = browser.eval(
        "[...document.querySelectorAll('.timeline div')].map(d => +d.dataset.count)")
    expect(sum(bars) == 3 and bars[0] == 2, "the timeline shows the held messages", bars)
    buttons = browser.eval("document.querySelectorAll('button.cancel').length")
    expect(buttons == 4, "each held message has a cancel button", buttons)
    buttons = browser.eval("document.querySelectorAll('button.release-now').length")
    expect(buttons == 4, "each held message has a release-now button", buttons)
    due = browser.eval(
        "[...document.querySelectorAll('.exchange tbody tr')].map(r => r.cells[1].textContent)")
    expect(due == ["in 10.0 s", "in 10.5 s", "in 50 min", "in 23 h 57 min"],
           "the page says when messages are due in human units", due)
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


def broker_state(http_port: int) -> dict:
    """What an attack would change: messages, queues, held messages, the clock."""
    queues = sorted(q["name"] for q in api(http_port, "/api/queues"))
    return {
        "queues": queues,
        "jobs": api(http_port, "/api/queues/%2F/jobs")["messages"],
        "held": api(http_port, "/api/delayed/%2F/later")["messages_delayed"],
        "now_ms": api(http_port, "/test/clock")["now_ms"],
    }


def check_cross_site_attack(browser: Chromium, http_port: int) -> None:
    before = broker_state(http_port)
    origin = f"http://127.0.0.1:{http_port}"
    server = serve_attack_page(origin)
    try:
        # The worst case: a browser that attaches the operator's basic credentials to every
        # request (as one that was once asked for them would).
        tab = browser.open(f"http://{EVIL}:{server.server_address[1]}/",
                           {"Authorization": GUEST})
        results = json.loads(browser.wait_for("the attack page to finish",
                                              "document.body.dataset.results"))
    finally:
        server.shutdown()
    expect(results.get("cors put", "").startswith("refused"),
           "a cross-site PUT with credentials is stopped at its preflight", results)
    statuses: dict = {}
    for session, url, status, _ in browser.responses:
        if session == tab and url.startswith(origin):
            statuses.setdefault(url[len(origin):], []).append(status)
    publish = "/api/exchanges/%2F/amq.default/publish"
    refused = {publish: [415] * 3, "/test/reset": [415], "/test/clock/advance": [415],
               "/api/definitions": [415]}
    expect({path: statuses.get(path) for path in refused} == refused,
           "every cross-site form post and no-cors fetch reached the API and was refused "
           "with 415", statuses)
    after = broker_state(http_port)
    expect(after == before, "a page from another site changed nothing", (before, after))


def check_rebinding(browser: Chromium, http_port: int) -> None:
    before = broker_state(http_port)
    browser.open(f"http://{REBOUND}:{http_port}/")
    text = browser.wait_for("the rebound page", "document.body && document.body.innerText")
    expect('"forbidden"' in text, "the page is refused under a rebound name", text)
    statuses = browser.eval(
        "Promise.all(["
        f" fetch('/api/overview', {{ headers: {{ Authorization: '{GUEST}' }} }}),"
        f" fetch('/api/queues/%2F/jobs', {{ method: 'DELETE', headers: {{ Authorization: '{GUEST}' }} }}),"
        "].map(p => p.then(r => r.status, e => String(e))))")
    expect(statuses == [403, 403], "a rebound page cannot use guest from loopback", statuses)
    after = broker_state(http_port)
    expect(after == before, "a rebound page changed nothing", (before, after))


def scenario(amqp_url: str, http_port: int, chromium: str) -> None:
    params = pika.URLParameters(amqp_url.rstrip("/") + "/%2f")
    connection = pika.BlockingConnection(params)
    ch = connection.channel()
    # Confirms: each publish has been handled by the time basic_publish returns.
    ch.confirm_delivery()
    first_id, _, far_id, tomorrow_id = publish_fixture(ch, http_port)

    browser = Chromium(chromium)
    try:
        page = check_login(browser, http_port)
        check_page(browser)
        shot = target_dir() / "page.png"
        browser.screenshot(shot)
        print(f"screenshot: {shot}", flush=True)
        check_cross_site_attack(browser, http_port)
        check_rebinding(browser, http_port)
        browser.session = page
        clicked = browser.eval(
            f"(() => {{ const b = document.querySelector('button.cancel[data-id=\"{first_id}\"]');"
            " if (!b) return false; b.click(); return true; })()")
        expect(clicked is True, "the page cancels a message", first_id)
        browser.wait_for("the page to show three messages",
                         "document.querySelectorAll('button.cancel').length === 3")
        expect(api(http_port, "/api/delayed/%2F/later")["messages_delayed"] == 3,
               "the broker holds three messages")
        clicked = browser.eval(
            f"(() => {{ const b = document.querySelector('button.release-now[data-id=\"{far_id}\"]');"
            " if (!b) return false; b.click(); return true; })()")
        expect(clicked is True, "the page releases a message now", far_id)
        browser.wait_for("the page to show two messages",
                         "document.querySelectorAll('button.cancel').length === 2")
        expect(api(http_port, "/api/delayed/%2F/later")["messages_delayed"] == 2,
               "the broker holds two messages")
        # "move…" asks for the new due time (answered here in place of the operator).
        browser.eval("window.prompt = () => '+30 min'")
        clicked = browser.eval(
            f"(() => {{ const b = document.querySelector('button.move[data-id=\"{tomorrow_id}\"]');"
            " if (!b) return false; b.click(); return true; })()")
        expect(clicked is True, "the page moves a message", tomorrow_id)
        browser.wait_for("the page to show the moved message due in 30 min",
                         "[...document.querySelectorAll('.exchange tbody tr')]"
                         ".some(r => r.cells[1].textContent === 'in 30 min')")
        due_in = [m["due_in_ms"] for m in api(http_port, "/api/delayed/%2F/later")["items"]]
        expect(due_in == [10_500, 1_800_000], "the broker holds it 30 minutes from now", due_in)
    finally:
        browser.close()

    # Due in 50 minutes, released from the page: already in the queue (the manual clock serves
    # a move to now before the answer), without the clock moving.
    method, _, body = ch.basic_get("jobs", auto_ack=True)
    received = body.decode() if method is not None else None
    expect(received == "far", "through AMQP: the message released now arrives at once", received)

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
