//! When held messages are released: due order, publish order within a millisecond, long and
//! very long delays, both tiers of the timer.

use std::time::Duration;

use super::{publish_delayed, setup};
use crate::common::*;
use lapin::types::{AMQPValue, ShortString};

#[tokio::test]
async fn shorter_delay_published_later_arrives_first() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "three", Some(AMQPValue::LongInt(3000))).await;
    publish_delayed(&ch, "delayed", "k", "one", Some(AMQPValue::LongInt(1000))).await;
    sync(&ch).await;
    assert_eq!(t.broker.delayed_count("/", "delayed"), 2);
    assert_eq!(ready(&t, "out"), 0);
    let mut consumer = consume_no_ack(&ch, "out").await;
    assert_eq!(t.broker.advance(Duration::from_millis(999)), 0);
    assert_eq!(t.broker.advance(Duration::from_millis(1)), 1);
    let first = next_delivery(&mut consumer).await;
    assert_eq!(first.data, b"one");
    let headers = first.properties.headers().clone().unwrap();
    // Signed 32-bit, as the 3.x plugin writes it (pika reads a 64-bit `l` as unsigned).
    assert_eq!(
        headers.inner().get(&ShortString::from("x-delay")),
        Some(&AMQPValue::LongInt(-1000))
    );
    assert_eq!(t.broker.advance(Duration::from_secs(2)), 1);
    assert_eq!(next_body(&mut consumer).await, "three");
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
}

#[tokio::test]
async fn same_millisecond_releases_in_publish_order() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    for i in 0..20 {
        publish_delayed(
            &ch,
            "delayed",
            "k",
            &i.to_string(),
            Some(AMQPValue::LongInt(500)),
        )
        .await;
    }
    sync(&ch).await;
    let mut consumer = consume_no_ack(&ch, "out").await;
    assert_eq!(t.broker.advance(Duration::from_millis(500)), 20);
    for i in 0..20 {
        assert_eq!(next_body(&mut consumer).await, i.to_string());
    }
}

#[tokio::test]
async fn a_24_hour_reminder_runs_in_milliseconds() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "reminder",
        Some(AMQPValue::LongLongInt(86_400_000)),
    )
    .await;
    sync(&ch).await;
    t.broker.advance(Duration::from_secs(86_399));
    assert_eq!(ready(&t, "out"), 0);
    t.broker.advance(Duration::from_secs(1));
    assert_eq!(ready(&t, "out"), 1);
}

#[tokio::test]
async fn delays_beyond_u32_millis_are_honoured() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let sixty_days = 60 * 86_400_000i64;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "later",
        Some(AMQPValue::LongLongInt(sixty_days)),
    )
    .await;
    sync(&ch).await;
    assert_eq!(
        ready(&t, "out"),
        0,
        "not delivered at once, unlike the plugin"
    );
    let listed = t.broker.delayed_messages("/", "delayed", 10);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].due_ms, T0_MS + sixty_days as u64);
    let mut consumer = consume_no_ack(&ch, "out").await;
    t.broker.set_now(T0_MS + sixty_days as u64);
    let delivery = next_delivery(&mut consumer).await;
    // −delay does not fit 32 bits: only then is it written as a signed 64-bit `l`.
    assert_eq!(
        delivery
            .properties
            .headers()
            .as_ref()
            .unwrap()
            .inner()
            .get("x-delay"),
        Some(&AMQPValue::LongLongInt(-sixty_days))
    );
}

#[tokio::test]
async fn messages_from_both_tiers_release_in_due_then_publish_order() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let delay = |ms| Some(AMQPValue::LongInt(ms));
    // "a" waits beyond the wheel's one-second horizon; "b" goes straight into the wheel.
    publish_delayed(&ch, "delayed", "k", "a", delay(2000)).await;
    publish_delayed(&ch, "delayed", "k", "b", delay(800)).await;
    sync(&ch).await;
    let mut consumer = consume_no_ack(&ch, "out").await;
    assert_eq!(t.broker.advance(Duration::from_millis(1500)), 1);
    assert_eq!(next_body(&mut consumer).await, "b");
    // "a" has moved into the wheel by now; "c" is due in the same millisecond and must follow
    // it. "d" waits beyond the horizon and is released by the jump without moving in.
    publish_delayed(&ch, "delayed", "k", "c", delay(500)).await;
    publish_delayed(&ch, "delayed", "k", "d", delay(3000)).await;
    sync(&ch).await;
    let listed: Vec<u64> = t
        .broker
        .delayed_messages("/", "delayed", 10)
        .iter()
        .map(|m| m.due_ms - T0_MS)
        .collect();
    assert_eq!(listed, [2000, 2000, 4500]);
    assert_eq!(
        t.broker.delayed_next_due("/", "delayed"),
        Some(T0_MS + 2000)
    );
    assert_eq!(t.broker.set_now(T0_MS + 10_000), 3);
    for expected in ["a", "c", "d"] {
        assert_eq!(next_body(&mut consumer).await, expected);
    }
    assert_eq!(t.broker.delayed_total(), 0);
    assert_eq!(t.broker.delayed_next_due("/", "delayed"), None);
}
