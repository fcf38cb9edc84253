//! `x-dead-letter-strategy: at-least-once` on a quorum queue with `x-overflow: reject-publish`:
//! a dead-lettered message that no target takes stays in its source, undeliverable, and is
//! routed again on a timer or when a binding appears, as RabbitMQ's dead-letter worker does.

use std::time::Duration;

use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

/// Longer than the broker's retry interval (RabbitMQ's two minutes).
const PAST_THE_RETRY: Duration = Duration::from_secs(121);

fn at_least_once_source() -> FieldTable {
    let mut args = FieldTable::default();
    for (key, value) in [
        ("x-queue-type", "quorum"),
        ("x-dead-letter-exchange", "dlx"),
        ("x-dead-letter-strategy", "at-least-once"),
        ("x-overflow", "reject-publish"),
    ] {
        args.insert(key.into(), AMQPValue::LongString(value.into()));
    }
    args
}

/// The dead-letter exchange `dlx` and the quorum source queue `src` that dead-letters into it.
async fn source_and_exchange(ch: &Channel) {
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("dead-letter exchange declared");
    ch.queue_declare(
        "src".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        at_least_once_source(),
    )
    .await
    .expect("source declared");
}

async fn publish(ch: &Channel, queue: &str, body: &str) {
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default(),
    )
    .await
    .expect("published");
    sync(ch).await;
}

/// Takes the source's head message and rejects it without requeue: it is dead-lettered.
async fn reject_head_of_source(ch: &Channel) {
    let got = ch
        .basic_get("src".into(), BasicGetOptions { no_ack: false })
        .await
        .expect("basic.get")
        .expect("a message in the source");
    got.delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .expect("rejected");
    sync(ch).await;
}

async fn bodies(ch: &Channel, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(got) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        out.push(String::from_utf8_lossy(&got.delivery.data).into_owned());
    }
    out
}

async fn bind_target(ch: &Channel, queue: &str, arguments: FieldTable) {
    ch.queue_declare(queue.into(), QueueDeclareOptions::default(), arguments)
        .await
        .expect("target declared");
    ch.queue_bind(
        queue.into(),
        "dlx".into(),
        "src".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("target bound");
}

fn dead_lettered_in_source(broker: &TestBroker) -> usize {
    broker
        .broker
        .queue_info("/", "src")
        .expect("source exists")
        .dead_lettered
}

#[tokio::test]
async fn an_unroutable_dead_letter_is_kept_and_delivered_once_when_a_binding_appears() {
    let broker = start_manual().await;
    let ch = broker.channel().await;
    source_and_exchange(&ch).await;
    publish(&ch, "src", "m1").await;
    reject_head_of_source(&ch).await;

    assert_eq!(dead_lettered_in_source(&broker), 1, "kept in the source");
    assert_eq!(
        bodies(&ch, "src").await,
        Vec::<String>::new(),
        "not deliverable"
    );

    bind_target(&ch, "dead", FieldTable::default()).await;
    assert_eq!(bodies(&ch, "dead").await, ["m1"]);
    assert_eq!(dead_lettered_in_source(&broker), 0);

    // The timer's retry finds nothing left to send.
    broker.broker.advance(PAST_THE_RETRY);
    broker.broker.settle().await.expect("settled");
    assert_eq!(bodies(&ch, "dead").await, Vec::<String>::new());
}

#[tokio::test]
async fn a_dead_letter_refused_by_a_full_target_is_retried_once_there_is_space() {
    let broker = start_manual().await;
    let ch = broker.channel().await;
    source_and_exchange(&ch).await;
    let mut bounded = FieldTable::default();
    bounded.insert("x-max-length".into(), AMQPValue::LongInt(1));
    bounded.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    bind_target(&ch, "dead", bounded).await;
    publish(&ch, "dead", "filler").await;
    publish(&ch, "src", "m1").await;
    reject_head_of_source(&ch).await;
    assert_eq!(dead_lettered_in_source(&broker), 1, "refused, so kept");

    assert_eq!(bodies(&ch, "dead").await, ["filler"]);
    broker.broker.advance(PAST_THE_RETRY);
    broker.broker.settle().await.expect("settled");

    assert_eq!(bodies(&ch, "dead").await, ["m1"]);
    assert_eq!(dead_lettered_in_source(&broker), 0);
}

#[tokio::test]
async fn at_most_once_still_drops_an_unroutable_dead_letter() {
    let broker = start_manual().await;
    let ch = broker.channel().await;
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("dead-letter exchange declared");
    let mut args = at_least_once_source();
    args.insert(
        "x-dead-letter-strategy".into(),
        AMQPValue::LongString("at-most-once".into()),
    );
    ch.queue_declare(
        "src".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .expect("source declared");
    publish(&ch, "src", "m1").await;
    reject_head_of_source(&ch).await;
    // Dropped: nothing of it is left in the source, neither kept as a dead letter nor ready
    // nor unacknowledged, and nothing routes it later.
    let source = broker.broker.queue_info("/", "src").expect("source exists");
    assert_eq!(
        (source.messages, source.unacked, source.dead_lettered),
        (0, 0, 0),
        "the source holds nothing of the dropped message"
    );
    bind_target(&ch, "dead", FieldTable::default()).await;
    broker.broker.advance(PAST_THE_RETRY);
    broker.broker.settle().await.expect("settled");
    assert_eq!(bodies(&ch, "dead").await, Vec::<String>::new());
    assert_eq!(
        bodies(&ch, "src").await,
        Vec::<String>::new(),
        "not in the source"
    );
    assert_eq!(dead_lettered_in_source(&broker), 0);
}

#[tokio::test]
async fn a_retry_skips_the_targets_that_took_the_message_already() {
    let broker = start_manual().await;
    let ch = broker.channel().await;
    source_and_exchange(&ch).await;
    let mut bounded = FieldTable::default();
    bounded.insert("x-max-length".into(), AMQPValue::LongInt(1));
    bounded.insert(
        "x-overflow".into(),
        AMQPValue::LongString("reject-publish".into()),
    );
    bind_target(&ch, "full", bounded).await;
    bind_target(&ch, "open", FieldTable::default()).await;
    publish(&ch, "full", "filler").await;
    publish(&ch, "src", "m1").await;
    reject_head_of_source(&ch).await;
    assert_eq!(dead_lettered_in_source(&broker), 1, "one target refused it");
    assert_eq!(bodies(&ch, "open").await, ["m1"]);

    assert_eq!(bodies(&ch, "full").await, ["filler"]);
    broker.broker.advance(PAST_THE_RETRY);
    broker.broker.settle().await.expect("settled");

    assert_eq!(bodies(&ch, "full").await, ["m1"]);
    assert_eq!(
        bodies(&ch, "open").await,
        Vec::<String>::new(),
        "not a second copy"
    );
    assert_eq!(dead_lettered_in_source(&broker), 0);
}
