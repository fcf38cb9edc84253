"""pika 1.3.2 interop tests against the dwellmq binary.

Every test asserts what RabbitMQ 3.x (plus rabbitmq_delayed_message_exchange) does, so the suite
can also be pointed at a real RabbitMQ with DWELLMQ_URL. Queue and exchange names are unique per
test. There are no sleeps: waits for asynchronous deliveries pump pika's IO loop until the event
arrives or a generous deadline passes.
"""

from __future__ import annotations

import datetime
import decimal

import pika
import pika.exceptions
import pytest
from pika.spec import Basic, BasicProperties

from conftest import wait_until

DELIVERY_TIMEOUT = 10.0


def queue_depth(conn: pika.BlockingConnection, queue: str) -> int:
    """Ready messages in `queue`, read with a passive declare on a throwaway channel."""
    ch = conn.channel()
    try:
        return ch.queue_declare(queue, passive=True).method.message_count
    finally:
        ch.close()


def consume(conn, ch, queue, count, *, auto_ack=False, timeout=DELIVERY_TIMEOUT):
    """basic_consume until `count` messages arrived; returns [(method, properties, body)]."""
    got = []
    tag = ch.basic_consume(
        queue, lambda _ch, method, props, body: got.append((method, props, body)), auto_ack=auto_ack
    )
    assert wait_until(conn, lambda: len(got) >= count, timeout), (
        f"expected {count} deliveries from {queue!r} within {timeout}s, got {len(got)}"
    )
    return tag, got


def rabbit_reply_text(text: str) -> str:
    """RabbitMQ's reply texts are shortstrs: over 255 bytes it keeps 252 and appends '...'."""
    raw = text.encode()
    return text if len(raw) <= 255 else (raw[:252] + b"...").decode(errors="replace")


def assert_channel_closed(excinfo, code: int, text: str):
    err = excinfo.value
    assert isinstance(err, pika.exceptions.ChannelClosedByBroker)
    assert (err.reply_code, err.reply_text) == (code, rabbit_reply_text(text))


# --- exchanges, bindings, confirms and the full set of properties -----------------------------

# Every field type pika 1.3.2 can encode (it has no encoder for floats) and RabbitMQ accepts.
NESTED_HEADERS = {
    "string": "héllo wörld",
    "int": 42,
    "negative": -7,
    "long": 2**40,
    "bool": True,
    "false": False,
    "decimal": decimal.Decimal("3.14"),
    "void": None,
    "bytes": b"\x00\x01\xfe\xff",
    "when": datetime.datetime(2024, 2, 29, 12, 30, 45),
    "table": {
        "inner": "value",
        "depth": {"level": 3, "list": [1, "two", {"three": 3}]},
    },
    "array": [1, "two", -3, True, None, {"k": "v"}, [10, [20, 30]]],
}


EXCHANGE_CASES = {
    # type: (binding key, binding arguments, publish routing key)
    "direct": ("invoice.created", None, "invoice.created"),
    "topic": ("orders.*.created.#", None, "orders.eu.created.by.web"),
    "fanout": ("", None, "any-key-at-all"),
    "headers": ("", {"x-match": "all", "kind": "invoice", "region": "eu"}, "ignored"),
}


@pytest.mark.parametrize("exchange_type", sorted(EXCHANGE_CASES))
def test_publish_confirm_consume_roundtrip(conn, channel, name, exchange_type):
    binding_key, binding_args, routing_key = EXCHANGE_CASES[exchange_type]
    exchange, queue = name("ex"), name("q")

    ok = channel.exchange_declare(exchange, exchange_type=exchange_type, auto_delete=False)
    assert isinstance(ok.method, pika.spec.Exchange.DeclareOk)
    declared = channel.queue_declare(queue)
    assert declared.method.queue == queue
    assert declared.method.message_count == 0
    assert declared.method.consumer_count == 0
    channel.queue_bind(queue, exchange, routing_key=binding_key, arguments=binding_args)

    headers = dict(NESTED_HEADERS, kind="invoice", region="eu")
    properties = BasicProperties(
        content_type="application/json",
        content_encoding="utf-8",
        headers=headers,
        delivery_mode=2,
        priority=7,
        correlation_id="corr-123",
        reply_to="replies-for-interop",
        expiration="60000",
        message_id="msg-456",
        timestamp=1_700_000_000,
        type="invoice.created",
        user_id="guest",
        app_id="interop-tests",
    )
    body = '{"total": 12.5, "currency": "€"}'.encode()
    channel.confirm_delivery()
    # With confirms on, basic_publish returns only once the broker acked (raises otherwise).
    channel.basic_publish(exchange, routing_key, body, properties, mandatory=True)

    tag, got = consume(conn, channel, queue, 1)
    method, props, received = got[0]
    assert isinstance(method, Basic.Deliver)
    assert method.consumer_tag == tag
    assert method.exchange == exchange
    assert method.routing_key == routing_key
    assert method.redelivered is False
    assert received == body

    assert props.content_type == "application/json"
    assert props.content_encoding == "utf-8"
    assert props.delivery_mode == 2
    assert props.priority == 7
    assert props.correlation_id == "corr-123"
    assert props.reply_to == "replies-for-interop"
    assert props.expiration == "60000"
    assert props.message_id == "msg-456"
    assert props.timestamp == 1_700_000_000
    assert props.type == "invoice.created"
    assert props.user_id == "guest"
    assert props.app_id == "interop-tests"
    assert props.cluster_id is None
    assert props.headers == headers

    channel.basic_ack(method.delivery_tag)
    channel.basic_cancel(tag)
    assert queue_depth(conn, queue) == 0


def test_empty_body_and_no_properties_roundtrip(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"")
    _, got = consume(conn, channel, queue, 1, auto_ack=True)
    _, props, body = got[0]
    assert body == b""
    assert props.headers is None
    assert props.content_type is None
    assert props.delivery_mode is None


def test_large_body_spanning_many_frames(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    body = bytes(range(256)) * 4096  # 1 MiB, far above frame_max
    channel.basic_publish("", queue, body)
    method, _, received = channel.basic_get(queue, auto_ack=True)
    assert method is not None
    assert received == body


# --- acknowledgements -------------------------------------------------------------------------


def test_nack_with_requeue_redelivers_with_redelivered_flag(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"try again")

    deliveries = []

    def on_message(ch, method, props, body):
        deliveries.append((method, body))
        if len(deliveries) == 1:
            ch.basic_nack(method.delivery_tag, requeue=True)
        else:
            ch.basic_ack(method.delivery_tag)

    channel.basic_consume(queue, on_message)
    assert wait_until(conn, lambda: len(deliveries) >= 2, DELIVERY_TIMEOUT)
    (first, first_body), (second, second_body) = deliveries[:2]
    assert first.redelivered is False
    assert second.redelivered is True
    assert first_body == second_body == b"try again"
    assert second.delivery_tag != first.delivery_tag
    assert queue_depth(conn, queue) == 0


def test_nack_without_requeue_drops_the_message(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"poison")
    channel.basic_publish("", queue, b"fine")

    tag, got = consume(conn, channel, queue, 2)
    assert [body for _, _, body in got] == [b"poison", b"fine"]
    # Cancel first: a wrongly requeued message must land in the queue (where the checks below
    # see it), not go straight back to a still active consumer as a new unacked delivery.
    channel.basic_cancel(tag)
    channel.basic_nack(got[0][0].delivery_tag, requeue=False)
    channel.basic_ack(got[1][0].delivery_tag)

    assert queue_depth(conn, queue) == 0
    assert channel.basic_get(queue) == (None, None, None)
    assert len(got) == 2, "nothing was redelivered"
    # Nor is the nacked message still held unacked: closing the channel requeues nothing.
    channel.close()
    assert queue_depth(conn, queue) == 0


def test_reject_requeue_and_multiple_ack(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", queue, f"m{i}".encode())

    first = channel.basic_get(queue)
    assert first[2] == b"m0"
    channel.basic_reject(first[0].delivery_tag, requeue=True)
    again = channel.basic_get(queue)
    assert (again[0].redelivered, again[2]) == (True, b"m0")
    second = channel.basic_get(queue)
    third = channel.basic_get(queue)
    assert [second[2], third[2]] == [b"m1", b"m2"]
    channel.basic_ack(third[0].delivery_tag, multiple=True)
    assert queue_depth(conn, queue) == 0
    channel.close()
    # Nothing was left unacked, so closing the channel requeues nothing.
    assert queue_depth(conn, queue) == 0


def test_unacked_messages_are_requeued_when_the_channel_closes(conn, connect, name):
    queue = name("q")
    ch = conn.channel()
    ch.queue_declare(queue)
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"in flight")
    method, _, _ = ch.basic_get(queue)
    assert method.redelivered is False
    assert queue_depth(conn, queue) == 0
    ch.close()
    assert queue_depth(conn, queue) == 1
    method, _, body = conn.channel().basic_get(queue, auto_ack=True)
    assert (method.redelivered, body) == (True, b"in flight")


# --- basic.get ---------------------------------------------------------------------------------


def test_basic_get_message_count_and_empty(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    assert channel.basic_get(queue) == (None, None, None)

    channel.confirm_delivery()
    for i in range(3):
        channel.basic_publish("", queue, f"m{i}".encode(), BasicProperties(message_id=str(i)))
    assert channel.queue_declare(queue, passive=True).method.message_count == 3

    for i in range(3):
        method, props, body = channel.basic_get(queue, auto_ack=(i != 1))
        assert isinstance(method, Basic.GetOk)
        assert body == f"m{i}".encode()
        assert props.message_id == str(i)
        assert method.message_count == 2 - i  # messages left after this one
        assert method.exchange == ""
        assert method.routing_key == queue
        assert method.redelivered is False
        if i == 1:
            channel.basic_ack(method.delivery_tag)

    assert channel.basic_get(queue) == (None, None, None)
    assert channel.queue_declare(queue, passive=True).method.message_count == 0


def test_purge_and_delete_report_counts(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    for _ in range(4):
        channel.basic_publish("", queue, b"x")
    assert channel.queue_purge(queue).method.message_count == 4
    channel.basic_publish("", queue, b"y")
    assert channel.queue_delete(queue).method.message_count == 1
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue, passive=True)
    assert_channel_closed(excinfo, 404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")


# --- channel errors and recovery --------------------------------------------------------------


def test_passive_declare_of_missing_queue_closes_only_the_channel(conn, channel, name):
    queue = name("missing")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue, passive=True)
    assert_channel_closed(excinfo, 404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")
    assert channel.is_closed
    assert conn.is_open

    fresh = conn.channel()
    assert fresh.channel_number != 0
    other = name("other")
    assert fresh.queue_declare(other).method.queue == other
    fresh.confirm_delivery()
    fresh.basic_publish("", other, b"still works")
    assert fresh.basic_get(other, auto_ack=True)[2] == b"still works"


def test_overlong_reply_text_is_truncated_like_rabbitmq(conn, channel):
    queue = "missing-" + "x" * 240
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.queue_declare(queue, passive=True)
    full = f"NOT_FOUND - no queue '{queue}' in vhost '/'"
    assert len(full) > 255
    assert_channel_closed(excinfo, 404, full)
    assert conn.is_open


def test_passive_declare_of_missing_exchange_is_404(conn, channel, name):
    exchange = name("missing-ex")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.exchange_declare(exchange, passive=True)
    assert_channel_closed(excinfo, 404, f"NOT_FOUND - no exchange '{exchange}' in vhost '/'")
    assert conn.is_open
    assert conn.channel().exchange_declare(exchange, exchange_type="fanout")


def test_redeclare_with_different_type_is_406(conn, channel, name):
    exchange = name("ex")
    channel.exchange_declare(exchange, exchange_type="direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.exchange_declare(exchange, exchange_type="fanout")
    assert_channel_closed(
        excinfo,
        406,
        f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{exchange}' in vhost '/': "
        "received 'fanout' but current is 'direct'",
    )
    assert conn.is_open


def test_delivery_tag_and_property_errors(conn, name):
    queue = name("q")
    ch = conn.channel()
    ch.queue_declare(queue)
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"x")
    method, _, _ = ch.basic_get(queue)
    ch.basic_ack(method.delivery_tag)
    ch.basic_ack(method.delivery_tag)  # acked twice: the tag is unknown now
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.queue_declare(queue, passive=True)  # a round trip to observe the async close
    assert_channel_closed(
        excinfo, 406, f"PRECONDITION_FAILED - unknown delivery tag {method.delivery_tag}"
    )

    ch = conn.channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.basic_publish("", queue, b"x", BasicProperties(expiration="soon"))
    assert_channel_closed(
        excinfo, 406, "PRECONDITION_FAILED - invalid expiration 'soon': no_integer"
    )
    assert conn.is_open


def test_queue_delete_if_unused_refuses_a_queue_with_consumers(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.basic_consume(queue, lambda *a: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        conn.channel().queue_delete(queue, if_unused=True)
    assert_channel_closed(
        excinfo, 406, f"PRECONDITION_FAILED - queue '{queue}' in vhost '/' in use"
    )


def test_queue_delete_if_empty_refuses_a_queue_with_messages(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"x")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        conn.channel().queue_delete(queue, if_empty=True)
    assert_channel_closed(
        excinfo, 406, f"PRECONDITION_FAILED - queue '{queue}' in vhost '/' not empty"
    )


def test_deleting_a_system_exchange_is_refused(conn, channel):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.exchange_delete("amq.direct")
    assert_channel_closed(
        excinfo,
        403,
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed",
    )


def test_deleting_the_default_exchange_is_refused(conn, channel):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.exchange_delete("")
    assert_channel_closed(
        excinfo, 403, "ACCESS_REFUSED - operation not permitted on the default exchange"
    )


def test_publish_with_a_foreign_user_id_is_refused(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.basic_publish("", queue, b"x", BasicProperties(user_id="mallory"))
    assert_channel_closed(
        excinfo,
        406,
        "PRECONDITION_FAILED - user_id property set to 'mallory' "
        "but authenticated user was 'guest'",
    )


def test_wrong_password_is_refused(params):
    params.credentials = pika.PlainCredentials("guest", "wrong")
    params.connection_attempts = 1
    with pytest.raises(pika.exceptions.AMQPConnectionError) as excinfo:
        pika.BlockingConnection(params)
    assert isinstance(excinfo.value, pika.exceptions.ProbableAuthenticationError)
    assert "403" in str(excinfo.value)
    assert "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN" in str(
        excinfo.value
    )


def test_unknown_vhost_is_refused(params):
    params.virtual_host = "no-such-vhost"
    params.connection_attempts = 1
    with pytest.raises(pika.exceptions.AMQPConnectionError) as excinfo:
        pika.BlockingConnection(params)
    assert isinstance(excinfo.value, pika.exceptions.ProbableAccessDeniedError)
    assert "530" in str(excinfo.value)
    assert "NOT_ALLOWED - vhost no-such-vhost not found" in str(excinfo.value)


# --- mandatory returns ------------------------------------------------------------------------


def test_mandatory_unroutable_publish_under_confirms_raises_unroutable(conn, channel, name):
    routing_key = name("nobody")
    channel.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as excinfo:
        channel.basic_publish(
            "amq.direct", routing_key, b"lost?", BasicProperties(message_id="m1"), mandatory=True
        )
    returned = excinfo.value.messages
    assert len(returned) == 1
    assert returned[0].method.reply_code == 312
    assert returned[0].method.reply_text == "NO_ROUTE"
    assert returned[0].method.exchange == "amq.direct"
    assert returned[0].method.routing_key == routing_key
    assert returned[0].properties.message_id == "m1"
    assert returned[0].body == b"lost?"

    # The channel stays usable; a non-mandatory unroutable publish is silently dropped and acked.
    assert channel.is_open
    channel.basic_publish("amq.direct", routing_key, b"dropped")
    queue = name("q")
    channel.queue_declare(queue)
    channel.basic_publish("", queue, b"ok", mandatory=True)
    assert queue_depth(conn, queue) == 1


# --- more routing: exchange-to-exchange bindings and alternate exchanges ---------------------


def test_exchange_to_exchange_binding(conn, channel, name):
    source, destination, queue = name("src"), name("dst"), name("q")
    channel.exchange_declare(source, exchange_type="topic")
    channel.exchange_declare(destination, exchange_type="direct")
    channel.queue_declare(queue)
    channel.queue_bind(queue, destination, routing_key="a.b")
    channel.exchange_bind(destination, source, routing_key="a.*")
    channel.confirm_delivery()
    channel.basic_publish(source, "a.b", b"through two exchanges", mandatory=True)
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish(source, "a.c", b"matches the e2e binding only", mandatory=True)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (method.exchange, method.routing_key, body) == (source, "a.b", b"through two exchanges")
    assert channel.basic_get(queue) == (None, None, None)

    channel.exchange_unbind(destination, source, routing_key="a.*")
    with pytest.raises(pika.exceptions.UnroutableError):
        channel.basic_publish(source, "a.b", b"unbound", mandatory=True)


def test_alternate_exchange_takes_unroutable_messages(conn, channel, name):
    alternate, exchange, queue = name("ae"), name("ex"), name("q")
    channel.exchange_declare(alternate, exchange_type="fanout")
    channel.queue_declare(queue)
    channel.queue_bind(queue, alternate)
    channel.exchange_declare(
        exchange, exchange_type="direct", arguments={"alternate-exchange": alternate}
    )
    channel.confirm_delivery()
    # Routed by the alternate exchange, so a mandatory publish is not returned.
    channel.basic_publish(exchange, "nobody", b"caught", mandatory=True)
    method, _, body = channel.basic_get(queue, auto_ack=True)
    assert (method.exchange, method.routing_key, body) == (exchange, "nobody", b"caught")


# --- consumers --------------------------------------------------------------------------------


def test_exclusive_consumer_refuses_a_second_consumer(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.basic_consume(queue, lambda *a: None, exclusive=True)
    other = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        other.basic_consume(queue, lambda *a: None)
    assert_channel_closed(
        excinfo, 403, f"ACCESS_REFUSED - queue '{queue}' in vhost '/' in exclusive use"
    )
    assert conn.is_open
    assert channel.is_open


def test_consumer_is_cancelled_by_the_broker_when_its_queue_is_deleted(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    cancelled = []
    channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method))
    tag = channel.basic_consume(queue, lambda *a: None)
    assert channel.consumer_tags == [tag]
    assert conn.channel().queue_delete(queue).method.message_count == 0
    assert wait_until(conn, lambda: cancelled, DELIVERY_TIMEOUT), "no basic.cancel from broker"
    assert isinstance(cancelled[0], Basic.Cancel)
    assert cancelled[0].consumer_tag == tag
    assert channel.is_open


def test_consumer_count_and_cancel(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    tags = [channel.basic_consume(queue, lambda *a: None) for _ in range(2)]
    assert len(set(tags)) == 2 and all(t.startswith("ctag") for t in tags)
    assert channel.queue_declare(queue, passive=True).method.consumer_count == 2
    channel.basic_cancel(tags[0])
    assert channel.queue_declare(queue, passive=True).method.consumer_count == 1


def test_round_robin_between_two_consumers(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    got = {}
    for who in ("one", "two"):
        got[who] = []
        channel.basic_consume(
            queue, lambda _c, m, _p, body, who=who: got[who].append(body), auto_ack=True
        )
    channel.confirm_delivery()
    for i in range(4):
        channel.basic_publish("", queue, str(i).encode())
    assert wait_until(conn, lambda: sum(map(len, got.values())) >= 4, DELIVERY_TIMEOUT)
    assert sorted(got["one"] + got["two"]) == [b"0", b"1", b"2", b"3"]
    assert len(got["one"]) == len(got["two"]) == 2


def test_priority_queue_delivers_higher_priority_first(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue, arguments={"x-max-priority": 10})
    channel.confirm_delivery()
    for body, priority in [(b"low", 1), (b"none", None), (b"high", 9), (b"mid", 5)]:
        channel.basic_publish("", queue, body, BasicProperties(priority=priority))
    bodies = [channel.basic_get(queue, auto_ack=True)[2] for _ in range(4)]
    assert bodies == [b"high", b"mid", b"low", b"none"]


def test_direct_reply_to_rpc_roundtrip(conn, connect, name):
    server_queue = name("rpc")
    server_conn = connect()
    server = server_conn.channel()
    server.queue_declare(server_queue)

    client = conn.channel()
    replies = []
    client.basic_consume(
        "amq.rabbitmq.reply-to",
        lambda _c, _m, props, body: replies.append((props, body)),
        auto_ack=True,
    )
    client.basic_publish(
        "",
        server_queue,
        b"ping",
        BasicProperties(reply_to="amq.rabbitmq.reply-to", correlation_id="c1"),
    )
    request = [None]

    def receive():
        request[0] = server.basic_get(server_queue, auto_ack=True)
        return request[0][0] is not None

    assert wait_until(server_conn, receive, DELIVERY_TIMEOUT)
    _, props, body = request[0]
    assert body == b"ping"
    assert props.reply_to.startswith("amq.rabbitmq.reply-to.")
    server.basic_publish("", props.reply_to, b"pong", BasicProperties(correlation_id="c1"))
    assert wait_until(conn, lambda: replies, DELIVERY_TIMEOUT)
    assert replies[0][1] == b"pong"
    assert replies[0][0].correlation_id == "c1"


# --- delayed-message exchange -----------------------------------------------------------------


def publish_two_delayed_and_consume(conn, channel, name):
    """Publishes a (300 ms) then b (100 ms) to a delayed direct exchange; returns the deliveries."""
    exchange, queue = name("delayed"), name("q")
    channel.exchange_declare(
        exchange, exchange_type="x-delayed-message", arguments={"x-delayed-type": "direct"}
    )
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, routing_key="due")
    # No confirm mode: both publishes leave in one burst, so their due times are 200 ms apart
    # whatever the broker's confirm round trip costs (waiting for a's confirm before sending b
    # could push b's due time past a's on a slow machine).
    channel.basic_publish(exchange, "due", b"a", BasicProperties(headers={"x-delay": 300}))
    channel.basic_publish(exchange, "due", b"b", BasicProperties(headers={"x-delay": 100}))

    _, got = consume(conn, channel, queue, 2, auto_ack=True, timeout=15.0)
    assert [body for _, _, body in got] == [b"b", b"a"]
    assert all(method.exchange == exchange for method, _, _ in got)
    assert all(method.routing_key == "due" for method, _, _ in got)
    return got


def test_delayed_exchange_releases_in_due_order(conn, channel, name):
    publish_two_delayed_and_consume(conn, channel, name)


def test_delayed_exchange_releases_messages_beyond_the_wheel_horizon(conn, channel, name):
    # Delays over a second wait outside the timer wheel first and move in before they are due:
    # the real timer thread's path, which the Rust tests drive only with the manual clock.
    exchange, queue = name("delayed"), name("q")
    channel.exchange_declare(
        exchange, exchange_type="x-delayed-message", arguments={"x-delayed-type": "topic"}
    )
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange, routing_key="later.#")
    # One burst without confirms: the due times stay 400 ms and more apart, whatever a
    # confirm round trip between the publishes would have cost.
    for body, delay in [(b"far", 1600), (b"near", 1200), (b"soon", 50)]:
        channel.basic_publish(
            exchange, "later.x", body, BasicProperties(headers={"x-delay": delay})
        )
    _, got = consume(conn, channel, queue, 3, auto_ack=True, timeout=15.0)
    assert [body for _, _, body in got] == [b"soon", b"near", b"far"]


def test_delayed_exchange_delivers_negated_x_delay_header(conn, channel, name):
    got = publish_two_delayed_and_consume(conn, channel, name)
    # -delay goes out as a signed 32-bit integer (tag 'I') while it fits, as the 3.x plugin
    # writes it. (pika 1.3 reads a 64-bit 'l' as unsigned: -100 would arrive as 2**64 - 100.)
    assert [props.headers.get("x-delay") for _, props, _ in got] == [-100, -300]


def test_delayed_exchange_through_an_exchange_binding(conn, channel, name):
    front, delayed, queue = name("front"), name("delayed"), name("q")
    channel.exchange_declare(front, exchange_type="direct")
    channel.exchange_declare(
        delayed, exchange_type="x-delayed-message", arguments={"x-delayed-type": "direct"}
    )
    channel.exchange_bind(delayed, front, routing_key="due")
    channel.queue_declare(queue)
    channel.queue_bind(queue, delayed, routing_key="due")
    channel.confirm_delivery()
    channel.basic_publish(front, "due", b"later", BasicProperties(headers={"x-delay": 300}))
    channel.basic_publish(front, "due", b"now", BasicProperties(headers={"x-delay": 0}))
    _, got = consume(conn, channel, queue, 2, auto_ack=True, timeout=15.0)
    assert [body for _, _, body in got] == [b"now", b"later"]
    assert got[1][1].headers == {"x-delay": -300}


def test_delayed_exchange_without_delay_routes_immediately(conn, channel, name):
    exchange, queue = name("delayed"), name("q")
    channel.exchange_declare(
        exchange, exchange_type="x-delayed-message", arguments={"x-delayed-type": "fanout"}
    )
    channel.queue_declare(queue)
    channel.queue_bind(queue, exchange)
    channel.confirm_delivery()
    channel.basic_publish(exchange, "k", b"now", BasicProperties(headers={"other": "h"}))
    _, got = consume(conn, channel, queue, 1, auto_ack=True)
    assert got[0][2] == b"now"
    assert got[0][1].headers == {"other": "h"}


def test_delayed_exchange_requires_delayed_type(conn, channel, name):
    exchange = name("delayed")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.exchange_declare(exchange, exchange_type="x-delayed-message")
    err = excinfo.value
    assert err.reply_code == 406
    assert err.reply_text.startswith("PRECONDITION_FAILED - ")
    assert "x-delayed-type" in err.reply_text
    assert conn.is_open


# --- prefetch ---------------------------------------------------------------------------------


def test_qos_prefetch_one_delivers_one_message_until_ack(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"first")
    channel.basic_publish("", queue, b"second")
    channel.basic_qos(prefetch_count=1)

    tag, got = consume(conn, channel, queue, 1)
    # The second message is still ready in the queue: the broker is holding it back.
    assert queue_depth(conn, queue) == 1
    conn.process_data_events(time_limit=0.2)
    assert [body for _, _, body in got] == [b"first"]

    channel.basic_ack(got[0][0].delivery_tag)
    assert wait_until(conn, lambda: len(got) >= 2, DELIVERY_TIMEOUT)
    assert [body for _, _, body in got] == [b"first", b"second"]
    assert queue_depth(conn, queue) == 0
    channel.basic_ack(got[1][0].delivery_tag)
    channel.basic_cancel(tag)


# --- exclusive queues -------------------------------------------------------------------------


def test_exclusive_queue_is_locked_to_its_connection(connect, name):
    owner = connect()
    other = connect()
    queue = f"excl-{name.suffix}"  # short: RabbitMQ's text for it stays within 255 bytes
    owner_ch = owner.channel()
    owner_ch.queue_declare(queue, exclusive=True)
    locked = (
        f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{queue}' in "
        "vhost '/'. It could be originally declared on another connection or the exclusive "
        "property value does not match that of the original declaration."
    )

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        other.channel().queue_declare(queue)
    assert_channel_closed(excinfo, 405, locked)
    assert other.is_open

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        other.channel().basic_consume(queue, lambda *a: None)
    assert excinfo.value.reply_code == 405

    # The owner can use it from any of its channels.
    second = owner.channel()
    second.queue_declare(queue, passive=True)
    second.confirm_delivery()
    second.basic_publish("", queue, b"mine")
    assert owner_ch.basic_get(queue, auto_ack=True)[2] == b"mine"

    # Closing the owning connection deletes the queue.
    owner.close()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        other.channel().queue_declare(queue, passive=True)
    assert_channel_closed(excinfo, 404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")


def test_server_named_queue(conn, channel):
    declared = channel.queue_declare("", exclusive=True)
    assert declared.method.queue.startswith("amq.gen-")
    channel.confirm_delivery()
    channel.basic_publish("", declared.method.queue, b"to a generated name")
    assert channel.basic_get(declared.method.queue, auto_ack=True)[2] == b"to a generated name"


# --- transactions -----------------------------------------------------------------------------


def test_tx_commit_publishes_and_rollback_discards(conn, channel, name):
    queue = name("q")
    channel.queue_declare(queue)
    channel.tx_select()

    channel.basic_publish("", queue, b"committed")
    assert queue_depth(conn, queue) == 0
    channel.tx_commit()
    assert queue_depth(conn, queue) == 1

    channel.basic_publish("", queue, b"rolled back")
    channel.tx_rollback()
    assert queue_depth(conn, queue) == 1

    # The channel stays transactional after commit/rollback.
    channel.basic_publish("", queue, b"second commit")
    channel.tx_commit()
    bodies = [channel.basic_get(queue, auto_ack=True)[2] for _ in range(2)]
    assert bodies == [b"committed", b"second commit"]
    assert channel.basic_get(queue) == (None, None, None)


def test_tx_acks_are_applied_on_commit_and_discarded_on_rollback(conn, channel, name):
    queue = name("q")
    setup = conn.channel()
    setup.queue_declare(queue)
    setup.confirm_delivery()
    setup.basic_publish("", queue, b"work")

    channel.tx_select()
    method, _, body = channel.basic_get(queue)
    assert body == b"work"
    channel.basic_ack(method.delivery_tag)
    channel.tx_rollback()
    # RabbitMQ: the rolled-back ack is forgotten and the message stays unacked (not requeued).
    assert queue_depth(conn, queue) == 0

    channel.basic_ack(method.delivery_tag)
    channel.tx_commit()
    channel.close()
    # Had the ack not been applied, closing the channel would have requeued the message.
    assert queue_depth(conn, queue) == 0


def test_tx_commit_without_select_is_406(conn, channel):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        channel.tx_commit()
    assert_channel_closed(excinfo, 406, "PRECONDITION_FAILED - channel is not transactional")
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        ch.tx_rollback()
    assert_channel_closed(excinfo, 406, "PRECONDITION_FAILED - channel is not transactional")
    assert conn.is_open


def test_tx_and_confirm_modes_exclude_each_other(conn):
    tx = conn.channel()
    tx.tx_select()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        tx.confirm_delivery()
    assert_channel_closed(
        excinfo, 406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode"
    )

    confirm = conn.channel()
    confirm.confirm_delivery()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as excinfo:
        confirm.tx_select()
    assert_channel_closed(
        excinfo, 406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode"
    )
    assert conn.is_open


# --- connection-level capabilities ------------------------------------------------------------


def test_server_capabilities_are_advertised(conn):
    caps = conn._impl.server_capabilities
    assert caps.get("connection.blocked") is True
    assert conn.publisher_confirms_supported
    assert conn.basic_nack_supported
    assert conn.consumer_cancel_notify_supported
    assert conn.exchange_exchange_bindings_supported


def test_the_memory_watermark_blocks_a_publisher_until_memory_is_freed(own_broker, name):
    # A broker of its own: blocking the shared one would stall every other test's publishers.
    # The watermark counts bodies plus a per-message overhead (well under 3 KiB).
    params = pika.URLParameters(own_broker("[limits]\nmemory_high_watermark = 10000\n"))
    publisher = pika.BlockingConnection(params)
    events = []
    publisher.add_on_connection_blocked_callback(lambda _c, frame: events.append(frame.method))
    publisher.add_on_connection_unblocked_callback(lambda _c, frame: events.append(frame.method))
    queue = name("held")
    ch = publisher.channel()
    ch.queue_declare(queue)
    ch.confirm_delivery()
    ch.basic_publish("", queue, b"x" * 6000)
    assert events == [], "below the watermark nothing is blocked"
    ch.basic_publish("", queue, b"y" * 6000)  # 12,000 body bytes held: above 10,000
    assert wait_until(publisher, lambda: events, DELIVERY_TIMEOUT), "no connection.blocked"
    assert isinstance(events[0], pika.spec.Connection.Blocked)
    assert events[0].reason == "low on memory"

    # A connection that never published is not blocked (as in RabbitMQ): it frees the memory.
    operator = pika.BlockingConnection(params)
    try:
        assert operator.channel().queue_purge(queue).method.message_count == 2
        assert wait_until(publisher, lambda: len(events) >= 2, DELIVERY_TIMEOUT), (
            "no connection.unblocked"
        )
        assert isinstance(events[1], pika.spec.Connection.Unblocked)
        ch.basic_publish("", queue, b"after")  # confirmed: the broker reads again
        assert operator.channel().queue_declare(queue, passive=True).method.message_count == 1
    finally:
        operator.close()
        publisher.close()


def test_heartbeats_flow_both_ways(params, connect):
    params.heartbeat = 1  # the client asks for 1 s; the broker's tune proposes a larger one
    conn = connect()
    assert conn._impl.params.heartbeat == 1
    checker = conn._impl._heartbeat_checker
    assert checker is not None
    # RabbitMQ sends a heartbeat every half interval on an idle connection; wait for a few.
    assert wait_until(conn, lambda: checker._heartbeat_frames_received >= 2, 6.0), (
        "no heartbeat frames from the broker"
    )
    assert conn.is_open
    assert conn.channel().is_open


def test_server_properties(conn):
    props = conn._impl.server_properties
    assert props["product"]
    assert props["version"]
    assert isinstance(props["capabilities"], dict)


# --- what clients' own test suites expect (RabbitMQ 3.10) -------------------------------------


def test_cc_and_bcc_headers_add_routing_keys(conn, channel, name):
    exchange = name("x")
    queues = {key: name(key) for key in ("one", "two", "three", "four")}
    channel.exchange_declare(exchange, exchange_type="direct")
    for key, queue in queues.items():
        channel.queue_declare(queue)
        channel.queue_bind(queue, exchange, routing_key=key)
    channel.confirm_delivery()
    for _ in range(10):
        channel.basic_publish(
            exchange,
            "one",
            b"m",
            BasicProperties(headers={"CC": ["two", "three"], "BCC": ["four"]}),
        )
    assert {key: queue_depth(conn, q) for key, q in queues.items()} == {
        "one": 10,
        "two": 10,
        "three": 10,
        "four": 10,
    }
    _, got = consume(conn, channel, queues["four"], 1, auto_ack=True)
    assert got[0][1].headers == {"CC": ["two", "three"]}


def test_channel_numbers_above_channel_max_are_accepted(params, connect):
    # RabbitMQ 3.10 limits how many channels are open, not the numbers a client picks.
    params.channel_max = 3  # the `connect` fixture opens connections with these params
    conn = connect()
    for number in (10, 2000, 65535):
        ch = conn.channel(channel_number=number)
        assert ch.is_open
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as excinfo:
        conn.channel(channel_number=4)
    assert (excinfo.value.reply_code, excinfo.value.reply_text) == (
        530,
        "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)",
    )


def test_channel_flow_active_false_closes_the_connection_with_540(conn):
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as excinfo:
        ch.flow(False)
    assert (excinfo.value.reply_code, excinfo.value.reply_text) == (
        540,
        "NOT_IMPLEMENTED - active=false",
    )
