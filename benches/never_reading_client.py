#!/usr/bin/env python3
"""A client that pipelines requests and never reads its socket: the broker's RSS must stay flat.

    python3 benches/never_reading_client.py [--binary PATH] [--mb N] [--kind KIND]

Starts the `dwellmq` binary (default target/release/dwellmq, else target/debug/dwellmq) with
`--listen 127.0.0.1:0 --in-memory --http off`, opens a raw AMQP connection and, without ever
reading, sends up to N MB (default 600) of one kind of request:

  declare  passive `queue.declare` of an existing queue with a 255-character name (each answered
           with a `declare-ok` of the same size)
  return   mandatory publishes of 4 KiB to a routing key that reaches no queue (each answered with
           a `basic.return` carrying the body)
  deliver  a no-ack consumer on a queue another connection fills with N MB of 4 KiB messages
           (deliveries to a client that does not read)

It prints the broker's RSS (VmRSS from /proc) as it goes. A broker that bounds a connection's
output stops reading the client once its buffer is full: sending then stalls (the script reports
how much the broker accepted) and RSS stays flat. The `deliver` case holds the messages in the
queue, so its RSS grows with what is queued, not with what is buffered for the consumer.
Needs only the Python standard library. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FRAME_END = b"\xce"


def shortstr(s: bytes) -> bytes:
    return bytes([len(s)]) + s


def longstr(s: bytes) -> bytes:
    return struct.pack(">I", len(s)) + s


def frame(kind: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + FRAME_END


def method(channel: int, class_id: int, method_id: int, args: bytes) -> bytes:
    return frame(1, channel, struct.pack(">HH", class_id, method_id) + args)


def content(channel: int, body: bytes) -> bytes:
    header = struct.pack(">HHQH", 60, 0, len(body), 0)
    return frame(2, channel, header) + frame(3, channel, body)


def read_frame(sock: socket.socket, buf: bytearray) -> tuple[int, int, bytes]:
    while True:
        if len(buf) >= 7:
            kind, channel, size = struct.unpack(">BHI", buf[:7])
            if len(buf) >= 8 + size:
                payload = bytes(buf[7 : 7 + size])
                del buf[: 8 + size]
                return kind, channel, payload
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk


def open_connection(port: int) -> socket.socket:
    """Handshake as guest/guest, heartbeats off, channel 1 open."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    read_frame(sock, buf)  # connection.start
    start_ok = (
        struct.pack(">I", 0)  # empty client-properties table
        + shortstr(b"PLAIN")
        + longstr(b"\x00guest\x00guest")
        + shortstr(b"en_US")
    )
    sock.sendall(method(0, 10, 11, start_ok))
    read_frame(sock, buf)  # connection.tune
    sock.sendall(method(0, 10, 31, struct.pack(">HIH", 2047, 131072, 0)))
    sock.sendall(method(0, 10, 40, shortstr(b"/") + shortstr(b"") + b"\x00"))
    read_frame(sock, buf)  # open-ok
    sock.sendall(method(1, 20, 10, shortstr(b"")))
    read_frame(sock, buf)  # channel.open-ok
    return sock


def declare(sock: socket.socket, name: bytes, passive: bool) -> bytes:
    flags = 0x01 if passive else 0x00
    return method(1, 50, 10, struct.pack(">H", 0) + shortstr(name) + bytes([flags]) + struct.pack(">I", 0))


def publish(routing_key: bytes, body: bytes, mandatory: bool) -> bytes:
    args = struct.pack(">H", 0) + shortstr(b"") + shortstr(routing_key) + bytes([1 if mandatory else 0])
    return method(1, 60, 40, args) + content(1, body)


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def start_broker(binary: Path) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [str(binary), "--listen", "127.0.0.1:0", "--in-memory", "--http", "off", "--log-level", "warn"],
        stdout=subprocess.PIPE,
        text=True,
    )
    url = proc.stdout.readline().strip()  # amqp://127.0.0.1:PORT
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    return proc, port


def send_unread(sock: socket.socket, chunk: bytes, total_mb: int, pid: int) -> None:
    """Sends `chunk` repeatedly without reading until `total_mb` MB went out or the broker
    stopped taking them for 3 s; prints RSS along the way."""
    sock.settimeout(3.0)
    sent = 0
    next_report = 0
    started = time.monotonic()
    print(f"{'sent MB':>8} {'broker RSS MB':>14}")
    while sent < total_mb << 20:
        try:
            sock.sendall(chunk)
        except socket.timeout:
            print(f"{sent / 2**20:8.1f} {rss_kb(pid) / 1024:14.1f}  the broker stopped reading")
            break
        sent += len(chunk)
        if sent >= next_report:
            print(f"{sent / 2**20:8.1f} {rss_kb(pid) / 1024:14.1f}")
            next_report += 50 << 20
    print(f"sent {sent / 2**20:.1f} MB in {time.monotonic() - started:.1f}s")
    for _ in range(3):
        time.sleep(1)
        print(f"{'':8} {rss_kb(pid) / 1024:14.1f}  (a second later, still not reading)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", type=Path)
    parser.add_argument("--mb", type=int, default=600)
    parser.add_argument("--kind", choices=["declare", "return", "deliver"], default="declare")
    args = parser.parse_args()
    binary = args.binary
    if binary is None:
        release = REPO / "target/release/dwellmq"
        binary = release if release.exists() else REPO / "target/debug/dwellmq"
    proc, port = start_broker(binary)
    try:
        print(f"broker {binary} pid {proc.pid}, RSS at start {rss_kb(proc.pid) / 1024:.1f} MB")
        name = b"q" * 255
        setup = open_connection(port)
        setup.sendall(declare(setup, name, passive=False))
        read_frame(setup, bytearray())
        body = b"x" * 4096
        if args.kind == "declare":
            chunk = declare(setup, name, passive=True) * 1000
        elif args.kind == "return":
            chunk = publish(b"nowhere", body, mandatory=True) * 64
        else:
            batch = publish(name, body, mandatory=False) * 64
            for _ in range((args.mb << 20) // len(batch)):
                setup.sendall(batch)
            print(f"queued {args.mb} MB, broker RSS {rss_kb(proc.pid) / 1024:.1f} MB")
            consumer = open_connection(port)
            consume = struct.pack(">H", 0) + shortstr(name) + shortstr(b"c") + b"\x02" + struct.pack(">I", 0)
            consumer.sendall(method(1, 60, 20, consume))  # basic.consume, no-ack
            for _ in range(5):
                time.sleep(1)
                print(f"consumer not reading: broker RSS {rss_kb(proc.pid) / 1024:.1f} MB")
            return 0
        client = open_connection(port)
        send_unread(client, chunk, args.mb, proc.pid)
        return 0
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    sys.exit(main())
