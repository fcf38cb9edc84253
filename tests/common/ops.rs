//! Everyday client operations through lapin, shared by the integration tests: publishing,
//! consuming, reading deliveries, queue depths, argument tables and error extraction.

use std::time::Duration;

use futures_lite::{Stream, StreamExt};
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, Consumer,
    ExchangeKind, PublisherConfirm,
};

use super::{
    amqp_error, bounded, consume_no_ack, declare_queue, eventually, next_body, sync, TestBroker,
};

pub async fn publish(ch: &Channel, exchange: &str, key: &str, body: &str) {
    publish_with(
        ch,
        exchange,
        key,
        body.as_bytes(),
        BasicProperties::default(),
    )
    .await;
}

/// Publishes `bodies` to `queue` through the default exchange, then waits for a round trip so
/// that the broker has routed them.
pub async fn fill(ch: &Channel, queue: &str, bodies: &[&str]) {
    for body in bodies {
        publish(ch, "", queue, body).await;
    }
    sync(ch).await;
}

pub fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert((*k).into(), v.clone());
    }
    t
}

pub fn long_str(s: &str) -> AMQPValue {
    AMQPValue::LongString(s.into())
}

pub async fn consume(ch: &Channel, queue: &str, tag: &str, no_ack: bool) -> Consumer {
    consume_with(ch, queue, tag, no_ack, FieldTable::default())
        .await
        .expect("consume starts")
}

pub async fn consume_with(
    ch: &Channel,
    queue: &str,
    tag: &str,
    no_ack: bool,
    arguments: FieldTable,
) -> lapin::Result<Consumer> {
    let consume = ch.basic_consume(
        queue.into(),
        tag.into(),
        BasicConsumeOptions {
            no_ack,
            ..Default::default()
        },
        arguments,
    );
    bounded("basic.consume", consume).await
}

pub fn ready(t: &TestBroker, queue: &str) -> usize {
    t.broker
        .queue_info("/", queue)
        .unwrap_or_else(|| panic!("queue '{queue}' exists"))
        .messages
}

pub fn body(d: &lapin::message::Delivery) -> String {
    String::from_utf8(d.data.clone()).expect("utf-8 body")
}

/// The next delivery's body, delivery tag and redelivered flag (5 s hang guard).
pub async fn next(
    deliveries: &mut (impl Stream<Item = lapin::Result<lapin::message::Delivery>> + Unpin),
) -> (String, u64, bool) {
    let d = tokio::time::timeout(Duration::from_secs(5), deliveries.next())
        .await
        .expect("a delivery arrives")
        .expect("consumer still open")
        .expect("delivery ok");
    (body(&d), d.delivery_tag, d.redelivered)
}

/// Bodies left in `queue`, in order, taken with `basic.get` (no-ack).
pub async fn drain_with_get(ch: &Channel, queue: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    while let Some(m) = bounded(
        "basic.get",
        ch.basic_get(queue.into(), BasicGetOptions { no_ack: true }),
    )
    .await
    .expect("basic.get")
    {
        out.push((body(&m.delivery), m.delivery.redelivered));
    }
    out
}

/// The AMQP error (channel or connection) an operation ended with.
pub fn channel_error<T: std::fmt::Debug>(result: lapin::Result<T>) -> (u16, String) {
    amqp_error(&result.expect_err("the broker refuses"))
}

/// Waits (bounded) until the client has seen its connection closed by the broker.
pub async fn assert_connection_closed(connection: &lapin::Connection) {
    eventually("the connection is closed", || {
        !connection.status().connected()
    })
    .await;
}

pub async fn declare_with(
    ch: &Channel,
    name: &str,
    options: QueueDeclareOptions,
    arguments: FieldTable,
) -> lapin::Result<lapin::Queue> {
    bounded(
        "queue.declare",
        ch.queue_declare(name.into(), options, arguments),
    )
    .await
}

pub fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..Default::default()
    }
}

/// Publishes `body` with `properties`.
pub async fn publish_with(
    ch: &Channel,
    exchange: &str,
    key: &str,
    body: &[u8],
    properties: BasicProperties,
) {
    // Sending waits only while the connection is blocked or its buffer full: bounded all the
    // same, so that a publisher blocked for good fails the test.
    let publish = ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body,
        properties,
    );
    bounded("basic.publish (sending it)", publish)
        .await
        .expect("publish sent");
}

/// A publish on a confirming channel, awaited to its confirm: `.confirmed().await` in place of
/// `.await.expect("publish sent").await`, with sending and the confirm each bounded by
/// [`super::ANSWER_WAIT`], so that a confirm that never comes fails the test.
pub trait Confirmed {
    fn confirmed(self) -> impl std::future::Future<Output = lapin::Result<Confirmation>> + Send;
}

impl<F> Confirmed for F
where
    F: std::future::Future<Output = lapin::Result<PublisherConfirm>> + Send,
{
    async fn confirmed(self) -> lapin::Result<Confirmation> {
        let confirm = bounded("basic.publish (sending it)", self)
            .await
            .expect("publish sent");
        bounded("the publisher confirm", confirm).await
    }
}

/// Connects lapin to `url` (which names the vhost).
pub async fn connect_url(url: &str) -> lapin::Result<Connection> {
    bounded(
        "a client connection",
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
}

/// Publishes one message to a fresh queue and consumes it back: the connection really works.
/// Returns the channel: dropping lapin's last handle closes it in the background, which can
/// race with an immediate `Connection::close` inside lapin, so callers that close keep it.
pub async fn round_trip(connection: &Connection, queue: &str) -> Channel {
    let ch = bounded("channel.open", connection.create_channel())
        .await
        .expect("channel opens");
    declare_queue(&ch, queue).await;
    publish(&ch, "", queue, "ping").await;
    let mut consumer = consume_no_ack(&ch, queue).await;
    assert_eq!(next_body(&mut consumer).await, "ping");
    ch
}

/// Ready messages in `queue` once everything published on `ch` so far has been routed.
pub async fn depth(t: &TestBroker, ch: &Channel, queue: &str) -> usize {
    sync(ch).await;
    ready(t, queue)
}

/// Declares an `x-delayed-message` exchange routing as `inner` (`x-delayed-type`).
pub async fn declare_delayed(ch: &Channel, name: &str, inner: &str, durable: bool) {
    let mut args = FieldTable::default();
    args.insert("x-delayed-type".into(), AMQPValue::LongString(inner.into()));
    let declare = ch.exchange_declare(
        name.into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions {
            durable,
            ..Default::default()
        },
        args,
    );
    bounded("exchange.declare (x-delayed-message)", declare)
        .await
        .unwrap();
}
