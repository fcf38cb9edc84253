//! Quorum-style queues through a real client on the manual clock: delivery counting, the
//! delivery limit, and RabbitMQ 4.3's linear delayed retries.

use std::time::Duration;

use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

fn args(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    table.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    for (k, v) in entries {
        table.insert((*k).into(), v.clone());
    }
    table
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(s.into())
}

async fn quorum_queue(ch: &Channel, name: &str, entries: &[(&str, AMQPValue)]) {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args(entries),
    )
    .await
    .expect("quorum queue declared");
}

async fn publish(ch: &Channel, queue: &str, body: &str, props: BasicProperties) {
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        props,
    )
    .await
    .expect("published");
    sync(ch).await;
}

async fn get(ch: &Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    ch.basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .expect("basic.get")
}

fn header_int(props: &BasicProperties, name: &str) -> Option<i64> {
    match props.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongLongInt(n) => Some(*n),
        other => panic!("{name} is {other:?}"),
    }
}

async fn reject(message: lapin::message::BasicGetMessage) {
    message
        .delivery
        .reject(BasicRejectOptions { requeue: true })
        .await
        .expect("rejected");
}

#[tokio::test]
async fn failed_deliveries_back_off_30_60_90_120_120_seconds() {
    let t = start_manual().await;
    let ch = t.channel().await;
    quorum_queue(
        &ch,
        "orders.retry",
        &[
            ("x-delayed-retry-type", text("failed")),
            ("x-delayed-retry-min", AMQPValue::LongInt(30_000)),
            ("x-delayed-retry-max", AMQPValue::LongInt(120_000)),
        ],
    )
    .await;
    publish(&ch, "orders.retry", "order-1", BasicProperties::default()).await;
    let mut waits = Vec::new();
    for attempt in 1..=5i64 {
        let message = get(&ch, "orders.retry").await.expect("ready");
        assert_eq!(
            header_int(&message.delivery.properties, "x-delivery-count"),
            (attempt > 1).then_some(attempt - 1)
        );
        reject(message).await;
        sync(&ch).await;
        let info = t.broker.queue_info("/", "orders.retry").unwrap();
        assert_eq!((info.messages, info.retrying), (0, 1));
        let ready_at = info.next_retry_at.unwrap();
        waits.push((ready_at - t.broker.now_ms()) / 1000);
        assert!(
            get(&ch, "orders.retry").await.is_none(),
            "invisible while waiting"
        );
        t.broker.set_now(ready_at - 1);
        assert!(
            get(&ch, "orders.retry").await.is_none(),
            "not a millisecond early"
        );
        t.broker.set_now(ready_at);
    }
    assert_eq!(waits, [30, 60, 90, 120, 120]);
    let last = get(&ch, "orders.retry").await.unwrap();
    assert_eq!(
        header_int(&last.delivery.properties, "x-delivery-count"),
        Some(5)
    );
    assert_eq!(
        header_int(&last.delivery.properties, "x-acquired-count"),
        Some(5)
    );
    assert!(last.delivery.redelivered);
}

#[tokio::test]
async fn retry_types_decide_which_returns_wait() {
    let t = start_manual().await;
    let ch = t.channel().await;
    for (queue, kind) in [
        ("q.failed", "failed"),
        ("q.returned", "returned"),
        ("q.all", "all"),
    ] {
        quorum_queue(
            &ch,
            queue,
            &[
                ("x-delayed-retry-type", text(kind)),
                ("x-delayed-retry-min", AMQPValue::LongInt(1_000)),
            ],
        )
        .await;
        publish(&ch, queue, "m", BasicProperties::default()).await;
    }
    let mut waiting = Vec::new();
    for queue in ["q.failed", "q.returned", "q.all"] {
        let message = get(&ch, queue).await.unwrap();
        // A nack hands the message back without failing it.
        message
            .delivery
            .nack(BasicNackOptions {
                requeue: true,
                ..Default::default()
            })
            .await
            .unwrap();
        sync(&ch).await;
        waiting.push(t.broker.queue_info("/", queue).unwrap().retrying);
    }
    assert_eq!(waiting, [0, 1, 1]);
    let nacked = get(&ch, "q.failed").await.unwrap();
    assert_eq!(
        header_int(&nacked.delivery.properties, "x-delivery-count"),
        None
    );
    assert_eq!(
        header_int(&nacked.delivery.properties, "x-acquired-count"),
        Some(1)
    );
}

#[tokio::test]
async fn past_the_delivery_limit_the_message_is_dead_lettered_with_reason_delivery_limit() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "poison").await;
    quorum_queue(
        &ch,
        "jobs",
        &[
            ("x-delivery-limit", AMQPValue::LongInt(2)),
            ("x-dead-letter-exchange", text("")),
            ("x-dead-letter-routing-key", text("poison")),
        ],
    )
    .await;
    publish(&ch, "jobs", "bad", BasicProperties::default()).await;
    for _ in 0..3 {
        reject(get(&ch, "jobs").await.expect("redelivered")).await;
        sync(&ch).await;
    }
    assert!(get(&ch, "jobs").await.is_none());
    let dead = get(&ch, "poison").await.expect("dead-lettered");
    let headers = dead.delivery.properties.headers().clone().unwrap();
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        panic!("no x-death in {headers:?}");
    };
    let AMQPValue::FieldTable(death) = &deaths.as_slice()[0] else {
        panic!("x-death entry")
    };
    assert_eq!(
        death.inner().get("reason"),
        Some(&AMQPValue::LongString("delivery_limit".into()))
    );
    assert_eq!(
        death.inner().get("queue"),
        Some(&AMQPValue::LongString("jobs".into()))
    );
}

#[tokio::test]
async fn a_message_waiting_for_its_retry_does_not_block_the_next_one() {
    let t = start_manual().await;
    let ch = t.channel().await;
    quorum_queue(
        &ch,
        "work",
        &[
            ("x-delayed-retry-type", text("all")),
            ("x-delayed-retry-min", AMQPValue::LongInt(60_000)),
        ],
    )
    .await;
    publish(&ch, "work", "first", BasicProperties::default()).await;
    publish(&ch, "work", "second", BasicProperties::default()).await;
    let mut consumer = ch
        .basic_consume(
            "work".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let first = next_delivery(&mut consumer).await;
    assert_eq!(first.data, b"first");
    first
        .reject(BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    let second = next_delivery(&mut consumer).await;
    assert_eq!(second.data, b"second");
    second.ack(BasicAckOptions::default()).await.unwrap();
    t.broker.advance(Duration::from_secs(60));
    let again = next_delivery(&mut consumer).await;
    assert_eq!(again.data, b"first");
    assert!(again.redelivered);
}

#[tokio::test]
async fn x_opt_delivery_time_retries_at_an_exact_time() {
    let t = start_manual().await;
    let ch = t.channel().await;
    quorum_queue(&ch, "reminders", &[]).await;
    let at = T0_MS + 24 * 3600 * 1000;
    let mut headers = FieldTable::default();
    headers.insert(
        "x-opt-delivery-time".into(),
        AMQPValue::LongLongInt(at as i64),
    );
    publish(
        &ch,
        "reminders",
        "tomorrow",
        BasicProperties::default().with_headers(headers),
    )
    .await;
    reject(get(&ch, "reminders").await.unwrap()).await;
    sync(&ch).await;
    let waiting = t.broker.retrying_messages("/", "reminders");
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].ready_at_ms, at);
    assert_eq!(waiting[0].delivery_count, 1);
    t.broker.set_now(at - 1);
    assert!(get(&ch, "reminders").await.is_none());
    t.broker.set_now(at);
    assert!(get(&ch, "reminders").await.is_some());
}

#[tokio::test]
async fn a_consumer_that_goes_away_counts_as_a_failed_delivery() {
    let t = start_manual().await;
    let ch = t.channel().await;
    quorum_queue(&ch, "work", &[]).await;
    publish(&ch, "work", "m", BasicProperties::default()).await;
    let other = t.channel().await;
    let held = get(&other, "work").await.unwrap();
    assert_eq!(held.delivery.data, b"m");
    other.close(200, "bye".into()).await.unwrap();
    let again = get(&ch, "work").await.expect("returned");
    assert_eq!(
        header_int(&again.delivery.properties, "x-delivery-count"),
        Some(1)
    );
}

#[tokio::test]
async fn purge_removes_waiting_messages_and_an_operator_can_release_them() {
    let t = start_manual().await;
    let ch = t.channel().await;
    quorum_queue(
        &ch,
        "work",
        &[
            ("x-delayed-retry-type", text("all")),
            ("x-delayed-retry-min", AMQPValue::LongInt(60_000)),
        ],
    )
    .await;
    for body in ["a", "b"] {
        publish(&ch, "work", body, BasicProperties::default()).await;
        reject(get(&ch, "work").await.unwrap()).await;
    }
    sync(&ch).await;
    assert_eq!(t.broker.release_retries("/", "work"), 2);
    assert_eq!(
        passive_declare(&ch, "work").await.unwrap().message_count(),
        2
    );
    for _ in 0..2 {
        reject(get(&ch, "work").await.unwrap()).await;
    }
    sync(&ch).await;
    assert_eq!(
        passive_declare(&ch, "work").await.unwrap().message_count(),
        0
    );
    let purged = ch
        .queue_purge("work".into(), QueuePurgeOptions::default())
        .await
        .unwrap();
    assert_eq!(purged, 2);
    assert_eq!(t.broker.queue_info("/", "work").unwrap().retrying, 0);
}

#[tokio::test]
async fn a_classic_queue_neither_counts_nor_delays() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "classic").await;
    publish(&ch, "classic", "m", BasicProperties::default()).await;
    reject(get(&ch, "classic").await.unwrap()).await;
    let again = get(&ch, "classic").await.unwrap();
    assert!(again.delivery.redelivered);
    assert_eq!(again.delivery.properties.headers(), &None);
}
