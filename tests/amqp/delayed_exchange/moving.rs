//! Moving held messages to other due times through the handle: each arrives once, at its new
//! time, with its headers and body as published; bad destinations are refused.

use std::time::Duration;

use super::setup;
use crate::common::*;
use dwellmq::{DelayedId, DelayedMove, MoveDelayedError};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel};

/// Publishes `body` to `delayed` with `x-delay` and a `trace` header naming it.
async fn publish(ch: &Channel, body: &str, delay_ms: i32) {
    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), AMQPValue::LongInt(delay_ms));
    headers.insert("trace".into(), AMQPValue::LongString(body.into()));
    ch.basic_publish(
        "delayed".into(),
        "k".into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default()
            .with_headers(headers)
            .with_message_id(format!("id-{body}").into()),
    )
    .await
    .unwrap();
}

/// The id of the held message due at `due_ms`.
fn held_at(t: &TestBroker, due_ms: u64) -> DelayedId {
    let held = t.broker.delayed_messages("/", "delayed", 100);
    let found = held.iter().find(|m| m.due_ms == due_ms);
    found
        .unwrap_or_else(|| panic!("nothing held due at {due_ms}"))
        .id
}

/// Takes what `out` holds: (body, `x-delay`, `trace`, message id) of each.
async fn take_out(ch: &Channel) -> Vec<(String, Option<AMQPValue>, Option<AMQPValue>, String)> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get("out".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        let properties = &m.delivery.properties;
        let header = |name: &str| {
            let headers = properties.headers().as_ref()?;
            headers.inner().get(&ShortString::from(name)).cloned()
        };
        let id = properties.message_id().as_ref().map(|s| s.to_string());
        out.push((
            body(&m.delivery),
            header("x-delay"),
            header("trace"),
            id.unwrap_or_default(),
        ));
    }
    out
}

fn delivered(body: &str, delay_ms: i32) -> (String, Option<AMQPValue>, Option<AMQPValue>, String) {
    (
        body.to_string(),
        // As published, negated at release: a move does not rewrite it.
        Some(AMQPValue::LongInt(-delay_ms)),
        Some(AMQPValue::LongString(body.into())),
        format!("id-{body}"),
    )
}

#[tokio::test]
async fn moved_messages_arrive_once_at_their_new_times_with_their_headers_and_body() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    for (body, delay) in [
        ("stays", 5_000),
        ("later", 10_000),
        ("sooner", 60_000),
        ("now", 3_600_000),
    ] {
        publish(&ch, body, delay).await;
    }
    sync(&ch).await;
    let at = |delay: u64| T0_MS + delay;

    // Released now: delivered before the move returns, under the manual clock.
    let moved = t
        .broker
        .move_delayed(held_at(&t, at(3_600_000)), DelayedMove::Now)
        .expect("moved");
    assert!(
        moved.to_string().starts_with(&format!("{T0_MS}-")),
        "{moved}: due now"
    );
    assert_eq!(take_out(&ch).await, [delivered("now", 3_600_000)]);
    // One later, one sooner.
    let later = DelayedMove::At(at(20_000));
    t.broker
        .move_delayed(held_at(&t, at(10_000)), later)
        .expect("moved");
    let sooner = DelayedMove::After(1_000);
    t.broker
        .move_delayed(held_at(&t, at(60_000)), sooner)
        .expect("moved");
    let dues: Vec<u64> = t
        .broker
        .delayed_messages("/", "delayed", 10)
        .iter()
        .map(|m| m.due_ms)
        .collect();
    assert_eq!(dues, [at(1_000), at(5_000), at(20_000)]);

    assert_eq!(t.broker.advance(Duration::from_millis(999)), 0);
    assert_eq!(t.broker.advance(Duration::from_millis(1)), 1);
    assert_eq!(take_out(&ch).await, [delivered("sooner", 60_000)]);
    assert_eq!(t.broker.advance(Duration::from_millis(4_000)), 1);
    assert_eq!(take_out(&ch).await, [delivered("stays", 5_000)]);
    // Nothing at its old time.
    assert_eq!(t.broker.advance(Duration::from_millis(14_999)), 0);
    assert_eq!(t.broker.advance(Duration::from_millis(1)), 1);
    assert_eq!(take_out(&ch).await, [delivered("later", 10_000)]);
    // Each once: nothing more, ever.
    assert_eq!(t.broker.advance(Duration::from_secs(7_200)), 0);
    assert_eq!(take_out(&ch).await, []);
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
}

#[tokio::test]
async fn a_move_refuses_a_time_in_the_past_beyond_ten_years_or_a_message_no_longer_held() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish(&ch, "m", 1_000).await;
    sync(&ch).await;
    let id = held_at(&t, T0_MS + 1_000);
    t.broker.advance(Duration::from_millis(10));
    let now = T0_MS + 10;
    assert_eq!(
        t.broker.move_delayed(id, DelayedMove::At(now - 1)),
        Err(MoveDelayedError::InThePast {
            due_ms: now - 1,
            now_ms: now
        })
    );
    let ten_years = 315_360_000_000;
    let too_far = t.broker.move_delayed(id, DelayedMove::After(ten_years + 1));
    assert!(
        matches!(too_far, Err(MoveDelayedError::TooFar { .. })),
        "{too_far:?}"
    );
    assert_eq!(
        t.broker.delayed_messages("/", "delayed", 10)[0].id,
        id,
        "a refused move changes nothing"
    );
    // Ten years to the millisecond is allowed.
    let far = t
        .broker
        .move_delayed(id, DelayedMove::After(ten_years))
        .expect("moved");
    assert_eq!(
        t.broker.move_delayed(id, DelayedMove::Now),
        Err(MoveDelayedError::NotFound(id)),
        "the old id is gone"
    );
    assert!(t.broker.cancel_delayed(far));
    assert_eq!(
        t.broker.move_delayed(far, DelayedMove::Now),
        Err(MoveDelayedError::NotFound(far))
    );
    assert_eq!(take_out(&ch).await, []);
}
