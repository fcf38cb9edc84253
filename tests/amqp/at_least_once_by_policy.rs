//! At-least-once dead-lettering switched by a policy (`dead-letter-strategy`, `overflow`), as
//! RabbitMQ's quorum queues take it: the queue's argument wins for the strategy, the policy for
//! the overflow mode; a change that ends at-least-once deletes what the source kept
//! (`rabbit_fifo_dlx:update_config`), one that keeps it routes the kept messages again at once.

use crate::common::*;
use dwellmq::{ApplyTo, Policy, PolicyDefinition, PolicyValue};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

fn policy(entries: &[(&'static str, &str)]) -> Policy {
    Policy {
        name: "dlx".into(),
        pattern: "^src$".into(),
        apply_to: ApplyTo::QuorumQueues,
        priority: 0,
        definition: PolicyDefinition::from_entries(
            entries
                .iter()
                .map(|(key, value)| (*key, PolicyValue::Text((*value).into()))),
        )
        .expect("valid definition"),
    }
}

const AT_LEAST_ONCE: [(&str, &str); 3] = [
    ("dead-letter-exchange", "dlx"),
    ("dead-letter-strategy", "at-least-once"),
    ("overflow", "reject-publish"),
];

fn arguments(entries: &[(&str, &str)]) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    for (key, value) in entries {
        args.insert((*key).into(), AMQPValue::LongString((*value).into()));
    }
    args
}

async fn exchange(ch: &Channel, name: &str) {
    ch.exchange_declare(
        name.into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange declared");
}

async fn source(ch: &Channel, args: FieldTable) {
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

/// Publishes `body` to the source and rejects it there without requeue: it is dead-lettered.
async fn dead_letter(ch: &Channel, body: &str) {
    publish(ch, "src", body).await;
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

async fn bind(ch: &Channel, queue: &str, exchange: &str) {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("target declared");
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        "src".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("target bound");
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

fn kept(broker: &TestBroker) -> usize {
    broker
        .broker
        .queue_info("/", "src")
        .expect("source exists")
        .dead_lettered
}

#[tokio::test]
async fn a_policy_turns_at_least_once_on_for_a_queue_declared_without_it() {
    let broker = start_manual().await;
    let ch = broker.channel().await;
    exchange(&ch, "dlx").await;
    // RabbitMQ's blog example: the queue has its exchange and overflow mode as arguments.
    source(
        &ch,
        arguments(&[
            ("x-dead-letter-exchange", "dlx"),
            ("x-overflow", "reject-publish"),
        ]),
    )
    .await;
    dead_letter(&ch, "before").await;
    assert_eq!(kept(&broker), 0, "at most once: dropped");

    broker
        .broker
        .set_policy("/", policy(&[("dead-letter-strategy", "at-least-once")]))
        .expect("policy set");
    dead_letter(&ch, "after").await;
    assert_eq!(kept(&broker), 1, "no queue took it: kept");

    bind(&ch, "dead", "dlx").await;
    assert_eq!(bodies(&ch, "dead").await, ["after"]);
    assert_eq!(kept(&broker), 0);
}

#[tokio::test]
async fn the_argument_wins_for_the_strategy_and_the_policy_for_the_overflow_mode() {
    let broker = start_manual().await;
    let ch = broker.channel().await;
    exchange(&ch, "dlx").await;
    // The argument says drop-head, which alone would make it at most once; the policy's
    // reject-publish wins on a quorum queue.
    source(
        &ch,
        arguments(&[
            ("x-dead-letter-strategy", "at-least-once"),
            ("x-overflow", "drop-head"),
        ]),
    )
    .await;
    broker
        .broker
        .set_policy(
            "/",
            policy(&[
                ("dead-letter-exchange", "dlx"),
                ("dead-letter-strategy", "at-most-once"),
                ("overflow", "reject-publish"),
            ]),
        )
        .expect("policy set");
    dead_letter(&ch, "m1").await;
    assert_eq!(kept(&broker), 1, "the argument's at-least-once applies");
}

#[tokio::test]
async fn ending_at_least_once_deletes_what_the_source_kept() {
    for ending in [
        // Cleared, changed to at most once, or made at most once by the overflow mode.
        None,
        Some(policy(&[
            ("dead-letter-exchange", "dlx"),
            ("dead-letter-strategy", "at-most-once"),
            ("overflow", "reject-publish"),
        ])),
        Some(policy(&[
            ("dead-letter-exchange", "dlx"),
            ("dead-letter-strategy", "at-least-once"),
            ("overflow", "drop-head"),
        ])),
    ] {
        let broker = start_manual().await;
        let ch = broker.channel().await;
        exchange(&ch, "dlx").await;
        source(&ch, arguments(&[])).await;
        broker
            .broker
            .set_policy("/", policy(&AT_LEAST_ONCE))
            .expect("policy set");
        dead_letter(&ch, "m1").await;
        assert_eq!(kept(&broker), 1);

        match &ending {
            None => assert!(broker.broker.clear_policy("/", "dlx")),
            Some(p) => broker
                .broker
                .set_policy("/", p.clone())
                .expect("policy set"),
        }
        assert_eq!(kept(&broker), 0, "deleted: {ending:?}");
        bind(&ch, "dead", "dlx").await;
        broker.broker.advance(std::time::Duration::from_secs(121));
        broker.broker.settle().await.expect("settled");
        assert_eq!(bodies(&ch, "dead").await, Vec::<String>::new());
        assert_eq!(bodies(&ch, "src").await, Vec::<String>::new());
    }
}

#[tokio::test]
async fn a_new_dead_letter_exchange_takes_the_kept_messages_at_once() {
    let broker = start_manual().await;
    let ch = broker.channel().await;
    exchange(&ch, "dlx").await;
    exchange(&ch, "dlx2").await;
    bind(&ch, "dead", "dlx2").await;
    source(&ch, arguments(&[])).await;
    broker
        .broker
        .set_policy("/", policy(&AT_LEAST_ONCE))
        .expect("policy set");
    dead_letter(&ch, "m1").await;
    assert_eq!(kept(&broker), 1, "dlx routes it nowhere");

    broker
        .broker
        .set_policy(
            "/",
            policy(&[
                ("dead-letter-exchange", "dlx2"),
                ("dead-letter-strategy", "at-least-once"),
                ("overflow", "reject-publish"),
            ]),
        )
        .expect("policy set");
    broker.broker.settle().await.expect("settled");
    assert_eq!(
        bodies(&ch, "dead").await,
        ["m1"],
        "without waiting for the retry"
    );
    assert_eq!(kept(&broker), 0);
}
