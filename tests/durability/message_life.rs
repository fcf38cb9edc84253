//! A message's promises follow it wherever it waits (issue 35): a retry queue dead-letters
//! what waits only in the store at its deadline with nobody reading it, in both expiry
//! modes; a transient message spilled, read back and left on disk again under memory
//! pressure is never lost; a failed persist is written again instead of pinning everything
//! behind it in memory.

use std::time::Duration;

use crate::common::*;
use crate::support::{channel, declare};
use dwellmq::{Broker, BrokerConfig, BrokerHandle, ExpiryMode};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

/// Messages a queue keeps in memory in these tests.
const WINDOW: usize = 8;

fn config(dir: &DataDir, mode: ExpiryMode) -> BrokerConfig {
    let mut config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        expiry_mode: mode,
        ..BrokerConfig::ephemeral()
    };
    config.limits.queue_window_messages = WINDOW;
    config
}

/// Publishes `bodies` with confirms, waiting for them all at the end; true if all were acked.
async fn publish_all(ch: &Channel, queue: &str, bodies: &[String], persistent: bool) -> bool {
    let mode = if persistent { 2 } else { 1 };
    let mut confirms = Vec::with_capacity(bodies.len());
    for body in bodies {
        let confirm = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default().with_delivery_mode(mode),
            )
            .await
            .expect("publish sent");
        confirms.push(confirm);
    }
    let mut all_acked = true;
    for confirm in confirms {
        let confirm = tokio::time::timeout(Duration::from_secs(30), confirm)
            .await
            .expect("a confirm within 30 s")
            .expect("confirm");
        all_acked &= confirm.is_ack();
    }
    all_acked
}

fn bodies(n: usize, width: usize) -> Vec<String> {
    (0..n).map(|i| format!("{i:0width$}")).collect()
}

async fn retry_queue(ch: &Channel) {
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("dlx");
    declare(ch, "dead", true, FieldTable::default()).await;
    ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind");
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(2000));
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("dlx".into()),
    );
    declare(ch, "retry", true, args).await;
}

fn info(broker: &BrokerHandle, queue: &str) -> dwellmq::QueueInfo {
    broker.queue_info("/", queue).expect("queue")
}

/// The classic "retry in 2 s" queue, nobody consuming, far more messages than its window:
/// every one is dead-lettered at its deadline, in order, once.
async fn a_retry_queue_dead_letters_all_of_a_backlog(mode: ExpiryMode, name: &str) {
    let dir = DataDir::new(name);
    let broker = Broker::start(config(&dir, mode).with_manual_clock(1_000_000))
        .await
        .expect("starts");
    let (_connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    retry_queue(&ch).await;
    let sent = bodies(600, 100);
    assert!(publish_all(&ch, "retry", &sent, true).await);
    // Once their commits are in, they leave memory with no command to ask for it.
    assert!(
        wait_until(|| info(&broker, "retry").paged_out > 500).await,
        "most wait on disk only: {}",
        info(&broker, "retry").paged_out
    );
    assert_eq!(info(&broker, "retry").messages, 600);
    // A millisecond before their deadline nothing has expired.
    broker.advance(Duration::from_millis(1999));
    assert_eq!(info(&broker, "retry").messages, 600);
    broker.advance(Duration::from_millis(1));
    let after = (info(&broker, "retry"), info(&broker, "dead"));
    assert_eq!((after.0.messages, after.0.paged_out), (0, 0));
    assert_eq!(after.1.messages, 600);
    let dead: Vec<String> = drain_with_get(&ch, "dead")
        .await
        .into_iter()
        .map(|(body, _)| body)
        .collect();
    assert_eq!(dead, sent, "dead-lettered once each, in queue order");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_retry_queue_dead_letters_a_backlog_on_disk_on_time() {
    a_retry_queue_dead_letters_all_of_a_backlog(ExpiryMode::OnTime, "life-retry-on-time").await;
}

#[tokio::test]
async fn a_retry_queue_dead_letters_a_backlog_on_disk_at_the_head() {
    a_retry_queue_dead_letters_all_of_a_backlog(ExpiryMode::HeadOnly, "life-retry-head").await;
}

/// Memory pressure all the time: transient messages spill beyond the window, are read back
/// by a consumer that then closes with many of them unacknowledged (they go back in front),
/// and what is read back must be written again before it leaves memory a second time.
#[tokio::test]
async fn transient_messages_read_back_and_requeued_under_pressure_all_come_back() {
    let dir = DataDir::new("life-spilled");
    let mut config = config(&dir, ExpiryMode::OnTime);
    config.limits.memory_paging_ratio = 1e-12;
    let broker = Broker::start(config).await.expect("starts");
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare(&ch, "t", false, FieldTable::default()).await;
    let sent = bodies(400, 64);
    assert!(publish_all(&ch, "t", &sent[..200], false).await);
    // A consumer takes 60 through pages read back, and goes away holding them.
    let reader = connection.create_channel().await.expect("channel");
    reader
        .basic_qos(60, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = consume(&reader, "t", "reader", false).await;
    for expected in &sent[..60] {
        let (got, _, _) = next(&mut consumer).await;
        assert_eq!(&got, expected);
    }
    reader.close(200, "bye".into()).await.expect("close");
    assert!(publish_all(&ch, "t", &sent[200..], false).await);
    broker.settle().await.expect("settles");
    assert_eq!(info(&broker, "t").messages, 400);
    let mut got = Vec::new();
    let mut consumer = consume(&ch, "t", "drain", false).await;
    while got.len() < 400 {
        let (body, tag, redelivered) = next(&mut consumer).await;
        // The 60 the reader held come back redelivered, the rest for the first time.
        assert_eq!(redelivered, got.len() < 60, "redelivered flag of {body}");
        got.push(body);
        ch.basic_ack(tag, BasicAckOptions::default())
            .await
            .expect("ack");
    }
    assert_eq!(got, sent, "every message once, in queue order");
    assert_eq!(info(&broker, "t").messages, 0);
    broker.shutdown().await;
}

/// One failed persist (the publisher is nacked) must not keep everything behind it in
/// memory: it is persisted again, and the queue leaves its backlog on disk.
#[tokio::test]
async fn a_failed_persist_does_not_pin_the_backlog_in_memory() {
    let dir = DataDir::new("life-failed-persist");
    let broker = Broker::start(config(&dir, ExpiryMode::OnTime))
        .await
        .expect("starts");
    let (_connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare(&ch, "q", true, FieldTable::default()).await;
    let sent = bodies(300, 32);
    assert!(publish_all(&ch, "q", &sent[..20], true).await);
    broker.fail_next_writes(1);
    assert!(!publish_all(&ch, "q", &sent[20..21], true).await, "nacked");
    assert!(publish_all(&ch, "q", &sent[21..], true).await);
    broker.settle().await.expect("settles");
    let q = wait_until(|| info(&broker, "q").paged_out >= 280).await;
    assert!(
        q,
        "the backlog left memory: {} paged out",
        info(&broker, "q").paged_out
    );
    // The nacked one stays, as RabbitMQ may keep a nacked message: all 300 in order.
    let got: Vec<String> = drain_with_get(&ch, "q")
        .await
        .into_iter()
        .map(|(body, _)| body)
        .collect();
    assert_eq!(got, sent);
    broker.shutdown().await;
}

/// Polls `condition` for up to 10 s (store completions arrive on the writer's thread).
async fn wait_until(mut condition: impl FnMut() -> bool) -> bool {
    for _ in 0..1000 {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    condition()
}
