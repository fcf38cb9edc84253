"""The `dwellmq_options` fixture shapes the brokers the fixtures start."""


def test_the_fixture_and_the_start_time_apply(dwellmq):
    clock = dwellmq.clock()
    assert clock["now"] == "2030-01-01T00:00:00.000Z"
    assert dwellmq.queue("orders")["ready"] == 0
    dwellmq.advance_to("2030-01-02T00:00:00Z")
    assert dwellmq.now_ms == clock["now_ms"] + 86_400_000
