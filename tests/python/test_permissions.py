"""RabbitMQ's permissions through pika: refusals close the channel with RabbitMQ's exact text.

Each test starts a broker of its own from a config file with users and [[permissions]], so
the shared broker's users stay as they are.
"""

from __future__ import annotations

import urllib.parse

import pika
import pytest

CONFIG = r"""
[[users]]
name = "guest"
password = "guest"
loopback_only = true
tags = ["administrator"]
[[users]]
name = "alice"
password = "alice-pw"
[[users]]
name = "svc"
password = "svc-pw"
[[permissions]]
user = "alice"
vhost = "/"
configure = "^alice-"
write = "^alice-|^amq\\.default$"
read = "^alice-"
[[permissions]]
user = "svc"
vhost = "staging"
configure = ".*"
write = ".*"
read = ".*"
"""


def as_user(url: str, user: str, password: str, vhost: str = "/") -> pika.URLParameters:
    parts = urllib.parse.urlsplit(url)
    netloc = f"{user}:{password}@{parts.hostname}:{parts.port}"
    path = "/" + urllib.parse.quote(vhost, safe="")
    return pika.URLParameters(urllib.parse.urlunsplit(parts._replace(netloc=netloc, path=path)))


@pytest.fixture
def brokers(own_broker):
    """A broker with `shared` (queue) and `shared-x` (exchange) declared by guest; yields a
    function opening a connection as a user."""
    url = own_broker("vhosts = [\"/\", \"staging\"]\n" + CONFIG)
    setup = pika.BlockingConnection(as_user(url, "guest", "guest"))
    ch = setup.channel()
    ch.queue_declare("shared")
    ch.queue_declare("alice-q")
    ch.exchange_declare("shared-x", "direct")
    setup.close()
    opened: list[pika.BlockingConnection] = []

    def connect(user: str, password: str, vhost: str = "/") -> pika.BlockingConnection:
        conn = pika.BlockingConnection(as_user(url, user, password, vhost))
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        if conn.is_open:
            conn.close()


def test_a_publish_without_write_permission_closes_the_channel(brokers):
    ch = brokers("alice", "alice-pw").channel()
    ch.confirm_delivery()
    ch.basic_publish("", "alice-q", b"allowed: amq.default")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.basic_publish("shared-x", "k", b"refused")
    assert refused.value.reply_code == 403
    assert refused.value.reply_text == (
        "ACCESS_REFUSED - access to exchange 'shared-x' in vhost '/' refused for user 'alice'"
    )


def test_a_consume_without_read_permission_closes_the_channel(brokers):
    conn = brokers("alice", "alice-pw")
    ch = conn.channel()
    ch.basic_consume("alice-q", lambda *args: None, auto_ack=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.basic_consume("shared", lambda *args: None, auto_ack=True)
    assert refused.value.reply_code == 403
    assert refused.value.reply_text == (
        "ACCESS_REFUSED - access to queue 'shared' in vhost '/' refused for user 'alice'"
    )
    # A passive declare needs no permission.
    assert conn.channel().queue_declare("shared", passive=True).method.queue == "shared"


def test_a_declare_without_configure_permission_closes_the_channel(brokers):
    ch = brokers("alice", "alice-pw").channel()
    ch.queue_declare("alice-new")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.queue_declare("bob-q")
    assert (refused.value.reply_code, refused.value.reply_text) == (
        403,
        "ACCESS_REFUSED - access to queue 'bob-q' in vhost '/' refused for user 'alice'",
    )


def test_a_vhost_without_permissions_refuses_connection_open(brokers):
    brokers("svc", "svc-pw", "staging").channel()
    # pika reports a close during the handshake as a probable access denial, quoting it.
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError) as refused:
        brokers("svc", "svc-pw", "/")
    assert "(530) \"NOT_ALLOWED - access to vhost '/' refused for user 'svc'\"" in str(
        refused.value
    )
