"""pika: TTL, dead-lettering with x-death, length limits and queue expiry.

The Python side cannot move dwellmq's clock yet, so TTLs here are short and every wait is for an
event (a delivery on the dead-letter queue), never a sleep followed by a check. What each test
asserts is what RabbitMQ writes, so the file also runs against a real RabbitMQ (DWELLMQ_URL).
"""

from __future__ import annotations

import datetime

import pika
import pytest

from conftest import wait_until

DELIVERY_TIMEOUT = 10.0


def first_delivery(conn, ch, queue, timeout=DELIVERY_TIMEOUT):
    """Consumes (auto-ack) until one message arrives on `queue`; returns (method, props, body)."""
    got = []
    tag = ch.basic_consume(queue, lambda _c, m, p, b: got.append((m, p, b)), auto_ack=True)
    assert wait_until(conn, lambda: got, timeout), f"nothing arrived on {queue!r}"
    ch.basic_cancel(tag)
    return got[0]


def declare_dead_letter_target(ch, name):
    dlx, dead = name("dlx"), name("dead")
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(dead)
    ch.queue_bind(dead, dlx)
    return dlx, dead


def test_rejected_message_carries_x_death(conn, channel, name):
    dlx, dead = declare_dead_letter_target(channel, name)
    work = name("work")
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": dlx})
    channel.basic_publish("", work, b"job", pika.BasicProperties(headers={"attempt": 1}))
    method, _props, _body = channel.basic_get(work)
    assert method is not None
    channel.basic_reject(method.delivery_tag, requeue=False)

    method, props, body = first_delivery(conn, channel, dead)
    assert body == b"job"
    assert method.exchange == dlx
    assert method.routing_key == work
    (death,) = props.headers["x-death"]
    assert death["count"] == 1
    assert death["reason"] == "rejected"
    assert death["queue"] == work
    assert death["exchange"] == ""
    assert death["routing-keys"] == [work]
    assert isinstance(death["time"], datetime.datetime)
    assert props.headers["x-first-death-reason"] == "rejected"
    assert props.headers["x-last-death-queue"] == work
    assert props.headers["attempt"] == 1


def test_expired_message_records_original_expiration(conn, channel, name):
    dlx, dead = declare_dead_letter_target(channel, name)
    work = name("work")
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": dlx})
    channel.basic_publish("", work, b"soon", pika.BasicProperties(expiration="20"))

    _method, props, body = first_delivery(conn, channel, dead)
    assert body == b"soon"
    (death,) = props.headers["x-death"]
    assert death["reason"] == "expired"
    assert death["original-expiration"] == "20"
    assert props.expiration is None


def test_short_ttl_expires_behind_a_long_one(conn, channel, name):
    """dwellmq expires on time wherever a message is (RabbitMQ only at the head)."""
    dlx, dead = declare_dead_letter_target(channel, name)
    work = name("work")
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": dlx})
    channel.basic_publish("", work, b"long", pika.BasicProperties(expiration="600000"))
    channel.basic_publish("", work, b"short", pika.BasicProperties(expiration="20"))
    _method, _props, body = first_delivery(conn, channel, dead)
    assert body == b"short"


def test_max_length_drop_head_dead_letters_with_maxlen(conn, channel, name):
    dlx, dead = declare_dead_letter_target(channel, name)
    work = name("work")
    channel.queue_declare(work, arguments={"x-dead-letter-exchange": dlx, "x-max-length": 1})
    channel.basic_publish("", work, b"old")
    channel.basic_publish("", work, b"new")
    _method, props, body = first_delivery(conn, channel, dead)
    assert body == b"old"
    assert props.headers["x-death"][0]["reason"] == "maxlen"
    assert channel.queue_declare(work, passive=True).method.message_count == 1


def test_reject_publish_nacks_under_confirms(conn, channel, name):
    work = name("work")
    channel.queue_declare(work, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    channel.confirm_delivery()
    channel.basic_publish("", work, b"fits")
    with pytest.raises(pika.exceptions.NackError):
        channel.basic_publish("", work, b"refused")
    assert channel.queue_declare(work, passive=True).method.message_count == 1


def test_retry_loop_through_a_wait_queue(conn, channel, name):
    work, wait = name("work"), name("wait")
    channel.queue_declare(
        work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": wait}
    )
    channel.queue_declare(
        wait,
        arguments={
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": work,
            "x-message-ttl": 20,
        },
    )
    channel.basic_publish("", work, b"webhook")
    attempts = []

    def on_message(ch, method, props, body):
        deaths = (props.headers or {}).get("x-death", [])
        rejected = [d["count"] for d in deaths if d["reason"] == "rejected"]
        attempts.append(rejected[0] if rejected else 0)
        if len(attempts) < 3:
            ch.basic_reject(method.delivery_tag, requeue=False)
        else:
            ch.basic_ack(method.delivery_tag)

    channel.basic_consume(work, on_message)
    assert wait_until(conn, lambda: len(attempts) >= 3, DELIVERY_TIMEOUT)
    assert attempts == [0, 1, 2]


def test_unused_queue_expires(conn, channel, name):
    temp = name("temp")
    channel.queue_declare(temp, arguments={"x-expires": 50})

    def gone():
        probe = conn.channel()
        try:
            probe.queue_declare(temp, passive=True)
            probe.close()
            return False
        except pika.exceptions.ChannelClosedByBroker as error:
            assert error.reply_code == 404
            return True

    assert wait_until(conn, gone, DELIVERY_TIMEOUT)


def test_invalid_message_ttl_argument_is_406(conn, name):
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as error:
        ch.queue_declare(name("q"), arguments={"x-message-ttl": -1})
    assert error.value.reply_code == 406
    assert "invalid arg 'x-message-ttl'" in error.value.reply_text


def test_quorum_queue_counts_failed_deliveries_and_retries_after_a_delay(conn, channel, name):
    queue = name("orders")
    channel.queue_declare(
        queue,
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-delayed-retry-type": "failed",
            "x-delayed-retry-min": 20,
        },
    )
    channel.basic_publish("", queue, b"order")
    seen = []

    def on_message(ch, method, props, body):
        seen.append((props.headers or {}).get("x-delivery-count"))
        if len(seen) < 3:
            ch.basic_reject(method.delivery_tag, requeue=True)
        else:
            ch.basic_ack(method.delivery_tag)

    channel.basic_consume(queue, on_message)
    assert wait_until(conn, lambda: len(seen) >= 3, DELIVERY_TIMEOUT)
    assert seen == [None, 1, 2]


def test_quorum_delivery_limit_dead_letters_with_reason_delivery_limit(conn, channel, name):
    dlx, dead = declare_dead_letter_target(channel, name)
    queue = name("jobs")
    channel.queue_declare(
        queue,
        durable=True,
        arguments={"x-queue-type": "quorum", "x-delivery-limit": 1, "x-dead-letter-exchange": dlx},
    )
    channel.basic_publish("", queue, b"poison")
    for _ in range(2):
        method, _props, _body = channel.basic_get(queue)
        assert method is not None
        channel.basic_reject(method.delivery_tag, requeue=True)
    _method, props, body = first_delivery(conn, channel, dead)
    assert body == b"poison"
    assert props.headers["x-death"][0]["reason"] == "delivery_limit"
