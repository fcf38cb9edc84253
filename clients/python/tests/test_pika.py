"""The plugin with pika: delayed messages, inspection, waits, reset and faults."""

import json

import pika
import pytest

from dwellmq_testing import Dwellmq, DwellmqError, DwellmqTimeout

DAY_MS = 24 * 3600 * 1000


def channel(broker):
    """A channel in confirm mode: a publish returns once the broker has routed it."""
    connection = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = connection.channel()
    ch.confirm_delivery()
    return connection, ch


def delayed_exchange(ch, name="reminders", queue="due"):
    ch.exchange_declare(name, "x-delayed-message", arguments={"x-delayed-type": "direct"})
    ch.queue_declare(queue)
    ch.queue_bind(queue, name, routing_key="r")


def test_a_day_long_delay_takes_no_time(dwellmq):
    connection, ch = channel(dwellmq)
    delayed_exchange(ch)
    ch.basic_publish("reminders", "r", b"call mum", pika.BasicProperties(headers={"x-delay": DAY_MS}))
    held = dwellmq.held("reminders")
    assert held["count"] == 1
    assert held["next_due_ms"] == dwellmq.now_ms + DAY_MS
    assert dwellmq.advance(hours=23)["released"] == 0
    assert dwellmq.queue("due")["ready"] == 0
    assert dwellmq.advance(hours=1)["released"] == 1
    due = dwellmq.queue("due")
    assert due["ready"] == 1
    assert due["messages"][0]["payload"] == "call mum"
    assert due["messages"][0]["properties"]["headers"]["x-delay"] == -DAY_MS
    method, _, body = ch.basic_get("due", auto_ack=True)
    assert body == b"call mum"
    connection.close()


def test_a_held_message_is_released_now_or_moved_keeping_its_headers(dwellmq):
    connection, ch = channel(dwellmq)
    delayed_exchange(ch)
    for body in (b"reminder", b"retry"):
        ch.basic_publish("reminders", "r", body,
                         pika.BasicProperties(headers={"x-delay": DAY_MS, "who": body.decode()}))
    first, second = [m["id"] for m in dwellmq.held("reminders")["messages"]]
    # Now: in the queue before the call returns, no clock moved.
    moved = dwellmq.release_now("reminders", first)
    assert moved["due_ms"] == dwellmq.now_ms
    method, properties, body = ch.basic_get("due", auto_ack=True)
    assert body == b"reminder"
    assert properties.headers["who"] == "reminder"
    assert properties.headers["x-delay"] == -DAY_MS
    # Later: a week, by delay; the new id names the new due time.
    later = dwellmq.move_held("reminders", second, delay_ms=7 * DAY_MS)
    assert later["id"] != second
    assert dwellmq.held("reminders")["messages"][0]["id"] == later["id"]
    assert dwellmq.advance(days=6)["released"] == 0
    assert dwellmq.advance(days=1)["released"] == 1
    assert dwellmq.queue("due")["messages"][0]["properties"]["headers"]["who"] == "retry"
    # Gone: 404; a time in the past: 400.
    with pytest.raises(DwellmqError) as gone:
        dwellmq.release_now("reminders", second)
    assert gone.value.status == 404
    ch.basic_publish("reminders", "r", b"x", pika.BasicProperties(headers={"x-delay": 1000}))
    held = dwellmq.held("reminders")["messages"][0]["id"]
    with pytest.raises(DwellmqError) as past:
        dwellmq.move_held("reminders", held, due=dwellmq.now_ms - 1)
    assert past.value.status == 400
    connection.close()


def test_expired_messages_carry_x_death(dwellmq):
    connection, ch = channel(dwellmq)
    ch.queue_declare("dead")
    ch.queue_declare("short", arguments={
        "x-message-ttl": 1000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"})
    ch.basic_publish("", "short", b"x")
    dwellmq.wait_for("ready", "short", 1)
    assert dwellmq.queue("short")["held"]["ttl"] == 1
    dwellmq.advance(seconds=1)
    death = dwellmq.queue("dead")["messages"][0]["properties"]["headers"]["x-death"][0]
    assert (death["queue"], death["reason"]) == ("short", "expired")
    assert dwellmq.counters()["dead_lettered"]["expired"] == 1
    connection.close()


def test_wait_for_says_what_it_saw(dwellmq):
    connection, ch = channel(dwellmq)
    ch.queue_declare("q")
    with pytest.raises(DwellmqTimeout, match="last seen: 0 ready"):
        dwellmq.wait_for("ready", "q", 1, timeout=0.05)
    ch.basic_publish("", "q", b"m")
    dwellmq.wait_for("ready", "q", 1)
    dwellmq.wait_for("idle")
    connection.close()


def test_nacked_confirms_and_a_forced_close(dwellmq):
    params = pika.URLParameters(dwellmq.url)
    params.client_properties = {"connection_name": "publisher"}
    connection = pika.BlockingConnection(params)
    ch = connection.channel()
    ch.queue_declare("q")
    ch.confirm_delivery()
    dwellmq.nack_next_confirms(1)
    with pytest.raises(pika.exceptions.NackError):
        ch.basic_publish("", "q", b"m")
    ch.basic_publish("", "q", b"m")
    assert dwellmq.counters()["nacked"] == 1
    assert dwellmq.close_connection("publisher", 320, "maintenance") == 1
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=5)
        ch.basic_publish("", "q", b"m")
    assert closed.value.reply_code == 320


def test_session_broker_resets_to_empty(dwellmq_session):
    connection, ch = channel(dwellmq_session)
    ch.queue_declare("leftover")
    dwellmq_session.reset()
    with pytest.raises(DwellmqError) as missing:
        dwellmq_session.queue("leftover")
    assert missing.value.status == 404
    connection.close()


@pytest.fixture
def fixture_file(tmp_path):
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps({"queues": [{"name": "orders", "vhost": "/", "durable": True,
                                            "auto_delete": False, "arguments": {}}]}))
    return path


def test_reset_restores_a_definitions_fixture(fixture_file, pytestconfig):
    from dwellmq_testing import Dwellmq

    with Dwellmq.start(pytestconfig.getoption("--dwellmq-bin"), definitions=str(fixture_file)) as broker:
        connection, ch = channel(broker)
        ch.basic_publish("", "orders", b"o")
        broker.wait_for("ready", "orders", 1)
        broker.reset()
        assert broker.queue("orders")["ready"] == 0
        connection.close()


def test_a_channel_closed_by_the_broker(dwellmq):
    params = pika.URLParameters(dwellmq.url)
    params.client_properties = {"connection_name": "consumer"}
    connection = pika.BlockingConnection(params)
    ch = connection.channel()
    ch.queue_declare("jobs")
    assert dwellmq.close_channel(ch.channel_number, "consumer", 406, "injected") == 1
    # pika reads the broker's channel.close while it waits for this answer.
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
        ch.queue_declare("jobs", passive=True)
    assert closed.value.reply_code == 406
    assert "injected" in closed.value.reply_text
    # The connection is still open.
    other = connection.channel()
    other.queue_declare("jobs", passive=True)
    connection.close()


def test_a_failed_write_is_nacked_and_a_restart_keeps_what_was_written(tmp_path):
    with Dwellmq.start(data_dir=str(tmp_path / "data")) as broker:
        connection, ch = channel(broker)
        ch.queue_declare("jobs", durable=True)
        broker.fail_next_writes(1)
        persistent = pika.BasicProperties(delivery_mode=2)
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", "jobs", b"lost", persistent)
        ch.basic_publish("", "jobs", b"kept", persistent)
        connection.close()
        broker.advance(hours=1)
        now = broker.now_ms
        broker.restart()
        assert broker.now_ms == now, "the clock goes on from where it was"
        connection, ch = channel(broker)
        method, _, body = ch.basic_get("jobs", auto_ack=True)
        assert body == b"kept"
        assert ch.basic_get("jobs", auto_ack=True) == (None, None, None)
        connection.close()
