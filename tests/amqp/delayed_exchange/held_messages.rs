//! Messages while held: listed, cancelled, purged, dropped with their exchange or queue, their
//! memory accounted, their properties kept.

use std::time::Duration;

use super::{delay_headers, publish_delayed, setup};
use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;

#[tokio::test]
async fn target_queue_deleted_before_release_drops_the_message() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "m", Some(AMQPValue::LongInt(100))).await;
    sync(&ch).await;
    ch.queue_delete("out".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(t.broker.advance(Duration::from_millis(100)), 1);
    assert_eq!(t.broker.delayed_unroutable(), 1);
    assert!(t.broker.queue_info("/", "out").is_none());
}

#[tokio::test]
async fn deleting_a_delayed_exchange_drops_what_it_holds() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "m", Some(AMQPValue::LongInt(100))).await;
    sync(&ch).await;
    assert_eq!(t.broker.delayed_count("/", "delayed"), 1);
    ch.exchange_delete("delayed".into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
    // A new exchange of the same name does not inherit the old messages.
    declare_delayed(&ch, "delayed", "direct", false).await;
    ch.queue_bind(
        "out".into(),
        "delayed".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!(t.broker.advance(Duration::from_millis(100)), 0);
    assert_eq!(ready(&t, "out"), 0);
}

#[tokio::test]
async fn list_cancel_and_purge_held_messages() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    for (body, delay) in [("a", 300), ("b", 100), ("c", 200)] {
        publish_delayed(&ch, "delayed", "k", body, Some(AMQPValue::LongInt(delay))).await;
    }
    sync(&ch).await;
    let held = t.broker.delayed_messages("/", "delayed", 10);
    let order: Vec<u64> = held.iter().map(|m| m.due_ms - T0_MS).collect();
    assert_eq!(order, [100, 200, 300]);
    assert_eq!(held[0].routing_key, "k");
    assert_eq!(held[0].body_size, 1);
    assert_eq!(t.broker.delayed_bytes("/", "delayed"), 3);
    assert!(t.broker.cancel_delayed(held[0].id));
    assert!(!t.broker.cancel_delayed(held[0].id), "already cancelled");
    assert_eq!(t.broker.delayed_count("/", "delayed"), 2);
    t.broker.advance(Duration::from_millis(200));
    assert_eq!(ready(&t, "out"), 1, "only c: b was cancelled");
    assert_eq!(t.broker.purge_delayed("/", "delayed"), 1);
    t.broker.advance(Duration::from_millis(1000));
    assert_eq!(ready(&t, "out"), 1);
}

#[tokio::test]
async fn far_future_messages_keep_publish_order_and_can_be_cancelled() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    // Beyond the wheel's horizon: these wait in the ordered index first.
    for i in 0..10 {
        publish_delayed(
            &ch,
            "delayed",
            "k",
            &i.to_string(),
            Some(AMQPValue::LongInt(90_000)),
        )
        .await;
    }
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "cancel me",
        Some(AMQPValue::LongInt(120_000)),
    )
    .await;
    sync(&ch).await;
    let held = t.broker.delayed_messages("/", "delayed", 20);
    assert_eq!(held.len(), 11);
    assert!(t.broker.cancel_delayed(held[10].id));
    let mut consumer = consume_no_ack(&ch, "out").await;
    // Step through time the way the timer task does, in small increments.
    for _ in 0..90 {
        t.broker.advance(Duration::from_secs(1));
    }
    for i in 0..10 {
        assert_eq!(next_body(&mut consumer).await, i.to_string());
    }
    assert_eq!(t.broker.advance(Duration::from_secs(60)), 0);
    assert_eq!(t.broker.delayed_total(), 0);
}

#[tokio::test]
async fn held_messages_count_toward_memory_until_released_cancelled_or_purged() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let small = "s".repeat(1000);
    let large = "L".repeat(40_000); // above the size that is packed: kept as published
    for (body, delay) in [(&small, 100), (&large, 100), (&small, 200), (&small, 300)] {
        publish_delayed(&ch, "delayed", "k", body, Some(AMQPValue::LongInt(delay))).await;
    }
    sync(&ch).await;
    // Bodies, plus an overhead per message: the small ones are packed while held, the large
    // one is kept as published.
    let packed = dwellmq::HELD_MESSAGE_MEMORY_OVERHEAD as i64;
    let queued = dwellmq::MESSAGE_MEMORY_OVERHEAD as i64;
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.memory_used(), 43_000 + 3 * packed + queued);
    let held = t.broker.delayed_messages("/", "delayed", 10);
    assert!(t.broker.cancel_delayed(held[3].id));
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.memory_used(), 42_000 + 2 * packed + queued);

    let mut consumer = consume_no_ack(&ch, "out").await;
    t.broker.advance(Duration::from_millis(100));
    let mut bodies = vec![
        next_body(&mut consumer).await,
        next_body(&mut consumer).await,
    ];
    bodies.sort_by_key(String::len);
    assert_eq!(bodies, [small.clone(), large]);
    sync(&ch).await;
    t.broker.settle().await.unwrap();
    assert_eq!(
        t.broker.memory_used(),
        1000 + packed,
        "only the message due at 200 is left"
    );
    assert_eq!(t.broker.purge_delayed("/", "delayed"), 1);
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.memory_used(), 0);
}

#[tokio::test]
async fn a_held_message_keeps_its_properties_key_and_exchange() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let mut headers = delay_headers(AMQPValue::LongInt(250));
    headers.insert("trace".into(), AMQPValue::LongString("abc".into()));
    let props = BasicProperties::default()
        .with_headers(headers)
        .with_content_type("application/json".into())
        .with_correlation_id("c-1".into())
        .with_delivery_mode(2)
        .with_priority(3);
    ch.basic_publish(
        "delayed".into(),
        "k".into(),
        BasicPublishOptions::default(),
        b"{}",
        props,
    )
    .await
    .unwrap();
    sync(&ch).await;
    let mut consumer = consume_no_ack(&ch, "out").await;
    t.broker.advance(Duration::from_millis(250));
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(delivery.exchange.as_str(), "delayed");
    assert_eq!(delivery.routing_key.as_str(), "k");
    assert_eq!(delivery.data, b"{}");
    let p = &delivery.properties;
    assert_eq!(
        p.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json")
    );
    assert_eq!(p.correlation_id().as_ref().map(|s| s.as_str()), Some("c-1"));
    assert_eq!(*p.delivery_mode(), Some(2));
    assert_eq!(*p.priority(), Some(3));
    let headers = p.headers().as_ref().expect("headers");
    assert_eq!(
        headers.inner().get("x-delay"),
        Some(&AMQPValue::LongInt(-250))
    );
    assert_eq!(
        headers.inner().get("trace"),
        Some(&AMQPValue::LongString("abc".into()))
    );
}

#[tokio::test]
async fn cancel_finds_messages_in_either_tier_and_rejects_a_stale_id() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "near", Some(AMQPValue::LongInt(300))).await;
    publish_delayed(&ch, "delayed", "k", "far", Some(AMQPValue::LongInt(60_000))).await;
    sync(&ch).await;
    let held = t.broker.delayed_messages("/", "delayed", 10);
    let (near, far) = (held[0].id, held[1].id);
    // An id printed and parsed back (as an HTTP API would carry it) still works.
    let far_again: dwellmq::DelayedId = far.to_string().parse().unwrap();
    assert!(t.broker.cancel_delayed(far_again));
    assert!(t.broker.cancel_delayed(near));
    assert!(!t.broker.cancel_delayed(near));
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
    assert_eq!(t.broker.advance(Duration::from_secs(120)), 0);
}
