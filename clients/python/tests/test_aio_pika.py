"""The plugin with aio-pika (asyncio), without an asyncio plugin for pytest."""

import asyncio

import aio_pika


def test_delayed_delivery_to_an_async_consumer(dwellmq):
    async def scenario():
        connection = await aio_pika.connect(dwellmq.url)
        async with connection:
            ch = await connection.channel()
            exchange = await ch.declare_exchange(
                "later", "x-delayed-message", arguments={"x-delayed-type": "fanout"})
            queue = await ch.declare_queue("inbox")
            await queue.bind(exchange)
            await exchange.publish(aio_pika.Message(b"hello", headers={"x-delay": 60_000}), "")
            assert dwellmq.held("later")["count"] == 1
            # The HTTP call blocks: run it beside the event loop.
            await asyncio.to_thread(dwellmq.advance, minutes=1)
            async with queue.iterator() as messages:
                async for message in messages:
                    async with message.process():
                        assert message.body == b"hello"
                        break

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_delayed_deliveries_to_a_queue(dwellmq):
    async def scenario():
        connection = await aio_pika.connect(dwellmq.url)
        async with connection:
            ch = await connection.channel()
            await ch.declare_queue("slow")
            dwellmq.delay_deliveries("slow", 5000)
            await ch.default_exchange.publish(aio_pika.Message(b"x"), "slow")
            await asyncio.to_thread(dwellmq.wait_for, "idle")
            assert dwellmq.queue("slow")["held"]["delayed"] == 1
            await asyncio.to_thread(dwellmq.advance, seconds=5)
            assert dwellmq.queue("slow")["ready"] == 1

    asyncio.run(asyncio.wait_for(scenario(), 30))
