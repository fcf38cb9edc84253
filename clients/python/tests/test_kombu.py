"""The plugin with kombu (Celery's transport)."""

import kombu


def test_kombu_reads_a_delayed_message(dwellmq):
    exchange = kombu.Exchange("timers", type="x-delayed-message",
                              arguments={"x-delayed-type": "direct"})
    queue = kombu.Queue("ticks", exchange, routing_key="tick")
    # Confirmed publishes: publish returns once the broker has the message.
    with kombu.Connection(dwellmq.url, transport_options={"confirm_publish": True}) as connection:
        producer = connection.Producer()
        producer.publish({"n": 1}, exchange=exchange, routing_key="tick", declare=[queue],
                         headers={"x-delay": 3_600_000}, serializer="json")
        assert dwellmq.held("timers")["count"] == 1
        dwellmq.advance(hours=1)
        dwellmq.wait_for("ready", "ticks", 1)
        with connection.SimpleQueue(queue) as simple:
            message = simple.get(timeout=5)
            assert message.payload == {"n": 1}
            message.ack()
