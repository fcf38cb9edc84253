#!/usr/bin/env python3
"""Drives the `dwellmq` binary's management API with RabbitMQ's own `rabbitmqadmin` (what CI
runs): declare, list, publish, get, purge, delete, export and import definitions, users and
permissions.

    python3 tests/rabbitmqadmin/check.py

`rabbitmqadmin` is a standalone Python script shipped in Debian's `rabbitmq-server` package. It
is taken from $RABBITMQADMIN, else from PATH, else extracted from that package with
`apt-get download` + `dpkg-deb -x` (no Erlang is installed) into target/rabbitmqadmin/.
Exits non-zero on the first failed check.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))


def find_rabbitmqadmin() -> Path:
    if os.environ.get("RABBITMQADMIN"):
        return Path(os.environ["RABBITMQADMIN"])
    on_path = shutil.which("rabbitmqadmin")
    if on_path:
        return Path(on_path)
    cache = target_dir() / "rabbitmqadmin"
    script = cache / "usr" / "bin" / "rabbitmqadmin"
    if not script.exists():
        cache.mkdir(parents=True, exist_ok=True)
        print("check: fetching rabbitmqadmin from Debian's rabbitmq-server package", flush=True)
        download = subprocess.run(["apt-get", "download", "rabbitmq-server"], cwd=cache)
        if download.returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(["apt-get", "download", "rabbitmq-server"], cwd=cache, check=True)
        deb = next(cache.glob("rabbitmq-server_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(cache)], check=True)
    return script


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


class Check:
    def __init__(self, admin: Path, port: int):
        self.base = [sys.executable, str(admin), "-H", "127.0.0.1", "-P", str(port)]
        self.port = port

    def run(self, *args: str) -> str:
        result = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise SystemExit(
                f"rabbitmqadmin {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )
        return result.stdout

    def json(self, *args: str):
        return json.loads(self.run("-f", "raw_json", *args))

    def api(self, path: str, credentials: str = "guest:guest"):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        token = base64.b64encode(credentials.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)


def expect(condition: bool, what: str, detail: object = "") -> None:
    if not condition:
        raise SystemExit(f"check failed: {what}\n{detail}")
    print(f"ok: {what}", flush=True)


def names(items) -> list[str]:
    return sorted(item["name"] for item in items)


def scenario(c: Check) -> None:
    c.run("declare", "exchange", "name=orders", "type=topic")
    c.run("declare", "exchange", "name=later", "type=x-delayed-message",
          'arguments={"x-delayed-type": "direct"}')
    c.run("declare", "queue", "name=jobs", "durable=true", 'arguments={"x-max-priority": 5}')
    c.run("declare", "binding", "source=orders", "destination=jobs", "routing_key=job.*")
    c.run("declare", "binding", "source=later", "destination=jobs", "routing_key=job.later")
    expect("orders" in names(c.json("list", "exchanges")), "declared exchange is listed")
    queues = c.json("list", "queues")
    expect(names(queues) == ["jobs"], "declared queue is listed", queues)
    bindings = c.json("list", "bindings")
    expect(any(b["source"] == "orders" and b["routing_key"] == "job.*" for b in bindings),
           "declared binding is listed", bindings)

    out = c.run("publish", "exchange=orders", "routing_key=job.a", "payload=hello")
    got = c.json("get", "queue=jobs", "ackmode=ack_requeue_true")
    expect(got[0]["payload"] == "hello" and got[0]["routing_key"] == "job.a",
           "published message comes back with get", (out, got))
    got = c.json("get", "queue=jobs", "ackmode=ack_requeue_false")
    expect(got[0]["redelivered"] is True, "a requeued message is redelivered", got)
    expect(c.json("list", "queues")[0]["messages"] == 0, "ack_requeue_false takes it")

    c.run("publish", "exchange=later", "routing_key=job.later", "payload=soon",
          'properties={"headers": {"x-delay": 600000}}')
    held = c.api("/api/delayed/%2F/later")
    expect(held["messages_delayed"] == 1 and held["items"][0]["routing_key"] == "job.later",
           "a delayed publish is held", held)
    exchange = [x for x in c.json("list", "exchanges") if x["name"] == "later"][0]
    expect(exchange.get("messages_delayed") == 1, "the exchange reports messages_delayed",
           exchange)

    for kind in ("connections", "channels", "consumers"):
        expect(c.json("list", kind) == [], f"list {kind} answers (none open)")
    overview = c.json("show", "overview")
    expect(overview[0]["object_totals"]["queues"] == 1, "show overview", overview)

    c.run("publish", "exchange=orders", "routing_key=job.b", "payload=x")
    c.run("purge", "queue", "name=jobs")
    expect(c.json("list", "queues")[0]["messages"] == 0, "purge empties the queue")

    queue = c.json("list", "queues")[0]
    shape = ("message_bytes", "message_bytes_ready", "message_bytes_unacknowledged",
             "messages_ram", "messages_persistent", "consumer_capacity", "consumer_details",
             "messages_details")
    expect(all(field in queue for field in shape), "a queue has RabbitMQ 3.10's fields", queue)

    users_and_permissions(c)
    vhosts(c)

    with tempfile.TemporaryDirectory() as tmp:
        exported = Path(tmp) / "defs.json"
        c.run("export", str(exported))
        before = json.loads(exported.read_text())
        expect(names(before["queues"]) == ["jobs"], "export holds the queue", before)
        binding = [b for b in c.json("list", "bindings") if b["source"] == "orders"][0]
        c.run("delete", "binding", "source=orders", "destination_type=queue",
              "destination=jobs", f"properties_key={binding['properties_key']}")
        expect(not any(b["source"] == "orders" for b in c.json("list", "bindings")),
               "binding deleted by properties key")
        c.run("delete", "queue", "name=jobs")
        c.run("delete", "exchange", "name=orders")
        c.run("delete", "exchange", "name=later")
        expect(c.json("list", "queues") == [], "queue deleted")
        c.run("import", str(exported))
        again = Path(tmp) / "again.json"
        c.run("export", str(again))
        after = json.loads(again.read_text())
        for key in ("exchanges", "queues", "bindings"):
            expect(after[key] == before[key], f"import restores the {key}", (before[key], after[key]))


def users_and_permissions(c: Check) -> None:
    c.run("declare", "user", "name=alice", "password=s3cret", "tags=management")
    c.run("declare", "permission", "vhost=/", "user=alice", "configure=^alice-", "write=.*",
          "read=.*")
    users = c.json("list", "users")
    alice = [u for u in users if u["name"] == "alice"]
    expect(len(alice) == 1 and alice[0]["tags"] == ["management"]
           and alice[0]["hashing_algorithm"] == "rabbit_password_hashing_sha256",
           "declare user, list users", users)
    permissions = c.json("list", "permissions")
    expect({"user": "alice", "vhost": "/", "configure": "^alice-", "write": ".*", "read": ".*"}
           in permissions, "declare permission, list permissions", permissions)
    whoami = c.api("/api/whoami", "alice:s3cret")
    expect(whoami["name"] == "alice", "the declared user logs in over HTTP", whoami)
    c.run("delete", "permission", "vhost=/", "user=alice")
    c.run("delete", "user", "name=alice")
    expect("alice" not in names(c.json("list", "users")), "delete user")


def vhosts(c: Check) -> None:
    c.run("declare", "vhost", "name=doomed")
    listed = c.json("list", "vhosts")
    expect("doomed" in names(listed), "declare vhost, list vhosts", listed)
    default = [v for v in listed if v["name"] == "/"][0]
    shape = ("message_stats", "messages_details", "recv_oct", "send_oct", "cluster_state")
    expect(all(field in default for field in shape), "a vhost has RabbitMQ 3.10's fields",
           default)
    c.run("delete", "vhost", "name=doomed")
    expect("doomed" not in names(c.json("list", "vhosts")), "delete vhost")


def main() -> int:
    admin = find_rabbitmqadmin()
    binary = broker_binary()
    port = free_port()
    broker = subprocess.Popen(
        [str(binary), "--listen", "127.0.0.1:0", "--in-memory", "--http", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        url = broker.stdout.readline().strip() if broker.stdout else ""
        expect(url.startswith("amqp://"), "the broker started", url)
        scenario(Check(admin, port))
    finally:
        broker.terminate()
        broker.wait(timeout=30)
    print("check: rabbitmqadmin works against dwellmq", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
