//! A dead-lettered message that at-least-once dead-lettering keeps in its source (not every
//! target took it) is charged to the memory monitor while it is kept, as in any other home:
//! it is a whole message in memory, routed again on every retry. The charge goes with it when
//! the targets take it, and a restart that brings it back kept charges it once.

use crate::common::*;
use crate::support::{channel, declare};
use dwellmq::{Broker, BrokerConfig, BrokerHandle, MESSAGE_MEMORY_OVERHEAD};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

const MESSAGES: usize = 2_000;
const BODY: usize = 100;

fn config(dir: &DataDir) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    }
}

/// A quorum queue dead-lettering at least once into `dlx`, its messages expiring after 1 s.
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
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(1_000));
    args
}

fn kept(broker: &BrokerHandle) -> usize {
    broker.queue_info("/", "src").expect("source").dead_lettered
}

/// Publishes [`MESSAGES`] persistent messages to `src`, pipelined, and waits for every confirm.
async fn fill_source(ch: &Channel) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let body = vec![b'x'; BODY];
    let mut confirms = Vec::with_capacity(MESSAGES);
    for _ in 0..MESSAGES {
        let confirm = ch
            .basic_publish(
                "".into(),
                "src".into(),
                BasicPublishOptions::default(),
                &body,
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .expect("publish sent");
        confirms.push(confirm);
    }
    for confirm in confirms {
        let confirm = tokio::time::timeout(std::time::Duration::from_secs(30), confirm)
            .await
            .expect("confirmed in time")
            .expect("confirm");
        assert!(confirm.is_ack());
    }
}

/// Memory counted now, beyond `baseline`.
fn counted_beyond(broker: &BrokerHandle, baseline: i64) -> i64 {
    broker.memory_used() - baseline
}

#[tokio::test]
async fn kept_dead_letters_are_charged_while_kept_and_released_when_they_go() {
    let dir = DataDir::new("kept-dead-letters-memory");
    let broker = Broker::start(config(&dir)).await.expect("broker starts");
    let (connection, ch) = channel(&broker).await;
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("dead-letter exchange declared");
    declare(&ch, "src", true, at_least_once_source()).await;
    broker.settle().await.expect("settled");
    let baseline = broker.memory_used();
    fill_source(&ch).await;
    broker.settle().await.expect("settled");
    let queued = counted_beyond(&broker, baseline);

    // They expire with no route to a target: every one is kept in the source.
    broker.advance(std::time::Duration::from_secs(2));
    eventually("every message is kept", || kept(&broker) == MESSAGES).await;
    broker.settle().await.expect("settled");
    let whole = (MESSAGES * (BODY + MESSAGE_MEMORY_OVERHEAD)) as i64;
    let while_kept = counted_beyond(&broker, baseline);
    eprintln!("counted beyond the baseline: queued {queued}, kept {while_kept}");
    assert!(
        while_kept >= whole,
        "{MESSAGES} kept messages are charged as whole messages: {while_kept} < {whole}"
    );
    drop(connection);
    broker.shutdown().await;

    // Brought back kept by a restart: charged once, not twice and not none.
    let broker = Broker::start(config(&dir)).await.expect("broker restarts");
    broker.settle().await.expect("settled");
    assert_eq!(kept(&broker), MESSAGES);
    let restored = broker.memory_used();
    eprintln!("counted after the restart: {restored}");
    assert!(
        restored >= whole && restored < 2 * whole,
        "charged once: {restored}"
    );

    // A route appears: the targets take them all, and the charges go with them (what is left
    // is the target's own queued messages, which a purge ends).
    let (_connection, ch) = channel(&broker).await;
    declare(&ch, "dead", true, FieldTable::default()).await;
    ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "src".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("target bound");
    eventually("the target takes them all", || kept(&broker) == 0).await;
    let purged = ch
        .queue_purge("dead".into(), QueuePurgeOptions::default())
        .await
        .expect("purged");
    assert_eq!(purged, MESSAGES as u32);
    // The dead copies' persists hold their charges until the store's writer is done with
    // them.
    eventually("no charge outlives the kept messages", || {
        broker.memory_used().abs() < 64 * 1024
    })
    .await;
    eprintln!("counted once they went: {}", broker.memory_used());
    broker.shutdown().await;
}
