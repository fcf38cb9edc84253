#!/usr/bin/env python3
"""Holds RabbitMQ's ports on 127.0.0.1, as a RabbitMQ on the machine would, so that CI proves
what a newcomer on such a machine runs: no test and no README command may need 5672, 15672,
15692 or 5671 free. A port already taken stays with whoever holds it (that proves the same).

    python3 .ci/hold_ports.py &   # until killed

Connections are accepted and closed at once, as a listener that speaks another protocol
would look to a client that expected dwellmq.
"""

import selectors
import socket
import sys

PORTS = (5672, 15672, 15692, 5671)


def main() -> None:
    selector = selectors.DefaultSelector()
    held = []
    for port in PORTS:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind(("127.0.0.1", port))
        except OSError:
            listener.close()
            continue
        listener.listen(16)
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ)
        held.append(port)
    print(f"hold_ports: holding {held or 'none (all taken already)'}", flush=True)
    while True:
        for key, _ in selector.select():
            try:
                connection, _ = key.fileobj.accept()
                connection.close()
            except OSError:
                pass


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
