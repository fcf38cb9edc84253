//! A step of the host's wall clock, while the broker runs and across a restart, on the system
//! clock. The broker's clock is the wall clock read at start plus monotonic time since: a step
//! while it runs moves no deadline; a stored due time is wall-clock, so a step takes effect at
//! the next start (docs/compat.md). Each test steps its own `SteppableWall` (the host's clock
//! plus an offset), as a real step would, but without stepping the machine's.

use std::time::{Duration, Instant};

use crate::common::*;
use crate::support::*;
use dwellmq::Broker;
use dwellmq_timer::SteppableWall;
use futures_lite::StreamExt;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Consumer};

const HOUR: Duration = Duration::from_secs(3_600);

/// Delayed exchanges routing to `due`: `later`, durable (what it holds beyond a second is on
/// disk only), and `later-in-memory`, transient; a queue `ttl` dead-lettering what expires to
/// `expired`; confirms on.
async fn delayed_and_expiring(ch: &Channel) {
    declare(ch, "due", true, FieldTable::default()).await;
    for (exchange, durable) in [("later", true), ("later-in-memory", false)] {
        declare_delayed(ch, exchange, "direct", durable).await;
        ch.queue_bind(
            "due".into(),
            exchange.into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bound");
    }
    let dead_letters = table(&[
        ("x-dead-letter-exchange", long_str("")),
        ("x-dead-letter-routing-key", long_str("expired")),
    ]);
    declare(ch, "ttl", false, dead_letters).await;
    declare(ch, "expired", false, FieldTable::default()).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
}

/// Publishes `body` to queue `ttl` with a per-message TTL; true once acked.
async fn publish_expiring(ch: &Channel, body: &str, ttl_ms: u64) -> bool {
    ch.basic_publish(
        "".into(),
        "ttl".into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default().with_expiration(ttl_ms.to_string().into()),
    )
    .await
    .expect("publish sent")
    .await
    .expect("confirm")
    .is_ack()
}

/// The next delivery's body, or `None` if none comes within `wait`.
async fn arrival(consumer: &mut Consumer, wait: Duration) -> Option<String> {
    let delivery = tokio::time::timeout(wait, consumer.next()).await.ok()?;
    let delivery = delivery.expect("consumer open").expect("delivery");
    Some(body(&delivery))
}

/// The next delivery's body, failing the test if none comes within 10 s (far less than the
/// hour a step could delay it by).
async fn arrives(consumer: &mut Consumer) -> String {
    arrival(consumer, Duration::from_secs(10))
        .await
        .expect("a delivery within 10 s")
}

/// Asserts at least `at_least` passed since `since` (minus the broker clock's millisecond
/// rounding): the message was not released or expired early.
fn not_before(what: &str, since: Instant, at_least: Duration) {
    let waited = since.elapsed();
    assert!(
        waited + Duration::from_millis(2) >= at_least,
        "{what} came after {waited:?}, before its {at_least:?}"
    );
}

#[tokio::test]
async fn a_wall_clock_step_an_hour_forward_while_running_releases_and_expires_nothing_early() {
    static WALL: SteppableWall = SteppableWall::new();
    let dir = DataDir::new("wall-forward");
    let broker = Broker::start(on_disk(&dir).with_test_wall(&WALL))
        .await
        .expect("starts");
    let (_connection, ch) = channel(&broker).await;
    delayed_and_expiring(&ch).await;
    let mut due = consume(&ch, "due", "due", true).await;
    let mut expired = consume(&ch, "expired", "expired", true).await;

    let published = Instant::now();
    assert!(publish_delayed(&ch, "later", "delayed 4 s", 4_000).await);
    assert!(publish_delayed(&ch, "later-in-memory", "in memory 4 s", 4_000).await);
    assert!(publish_expiring(&ch, "ttl 4 s", 4_000).await);
    // Wakes the timer thread a second from now, when it looks at every deadline (a clock
    // that read the wall would then find all of them an hour past).
    assert!(publish_delayed(&ch, "later-in-memory", "in memory 1 s", 1_000).await);
    WALL.step_forward(HOUR);
    let stepped = Instant::now();
    assert!(publish_delayed(&ch, "later", "after the step 2 s", 2_000).await);

    let nothing_early = |held: usize, held_in_memory: usize| {
        assert_eq!(broker.delayed_count("/", "later"), held);
        assert_eq!(broker.delayed_count("/", "later-in-memory"), held_in_memory);
        let ttl = broker.queue_info("/", "ttl").expect("queue ttl");
        let _ = ttl;
    };
    assert_eq!(arrival(&mut due, Duration::from_millis(500)).await, None);
    nothing_early(2, 2);
    assert_eq!(arrives(&mut due).await, "in memory 1 s");
    not_before("in memory 1 s", published, Duration::from_secs(1));
    assert_eq!(arrival(&mut due, Duration::from_millis(300)).await, None);
    nothing_early(2, 1);
    assert_eq!(arrives(&mut due).await, "after the step 2 s");
    not_before("after the step 2 s", stepped, Duration::from_secs(2));
    let mut four_seconds = [arrives(&mut due).await, arrives(&mut due).await];
    not_before("the 4 s delays", published, Duration::from_secs(4));
    four_seconds.sort();
    assert_eq!(four_seconds, ["delayed 4 s", "in memory 4 s"]);
    assert_eq!(arrives(&mut expired).await, "ttl 4 s");
    not_before("ttl 4 s", published, Duration::from_secs(4));
    broker.shutdown().await;
}

#[tokio::test]
async fn a_wall_clock_step_an_hour_back_while_running_delays_nothing() {
    static WALL: SteppableWall = SteppableWall::new();
    let dir = DataDir::new("wall-back");
    let broker = Broker::start(on_disk(&dir).with_test_wall(&WALL))
        .await
        .expect("starts");
    let (_connection, ch) = channel(&broker).await;
    delayed_and_expiring(&ch).await;
    let mut due = consume(&ch, "due", "due", true).await;
    let mut expired = consume(&ch, "expired", "expired", true).await;

    let published = Instant::now();
    assert!(publish_delayed(&ch, "later", "delayed 1.5 s", 1_500).await);
    assert!(publish_delayed(&ch, "later-in-memory", "in memory 1.5 s", 1_500).await);
    assert!(publish_expiring(&ch, "ttl 1.5 s", 1_500).await);
    WALL.step_back(HOUR);

    let mut delayed = [arrives(&mut due).await, arrives(&mut due).await];
    not_before("the 1.5 s delays", published, Duration::from_millis(1_500));
    delayed.sort();
    assert_eq!(delayed, ["delayed 1.5 s", "in memory 1.5 s"]);
    assert_eq!(arrives(&mut expired).await, "ttl 1.5 s");
    not_before("ttl 1.5 s", published, Duration::from_millis(1_500));
    broker.shutdown().await;
}

/// The held message's due time, from the listing.
fn listed_due(broker: &dwellmq::BrokerHandle) -> u64 {
    let listed = broker.delayed_messages("/", "later", 10);
    assert_eq!(listed.len(), 1, "one message held: {listed:?}");
    listed[0].due_ms
}

#[tokio::test]
async fn a_step_forward_takes_effect_at_the_next_start_releasing_what_it_made_overdue() {
    static WALL: SteppableWall = SteppableWall::new();
    let dir = DataDir::new("wall-forward-restart");
    let broker = Broker::start(on_disk(&dir).with_test_wall(&WALL))
        .await
        .expect("starts");
    let (connection, ch) = channel(&broker).await;
    delayed_and_expiring(&ch).await;
    assert!(publish_delayed(&ch, "later", "in 30 min", 1_800_000).await);
    let due_ms = listed_due(&broker);
    WALL.step_forward(HOUR);
    // Still held while the broker runs on its own time.
    let mut due = consume(&ch, "due", "due", true).await;
    assert_eq!(arrival(&mut due, Duration::from_millis(300)).await, None);
    assert_eq!(listed_due(&broker), due_ms);
    connection.close(200, "bye".into()).await.expect("closed");

    // The stored due time is wall-clock: the new start finds it half an hour past.
    let broker = broker.restart().await.expect("restarts");
    assert!(
        broker.now_ms() >= due_ms + 1_700_000,
        "the new start is an hour on"
    );
    let (_connection, ch) = channel(&broker).await;
    let mut due = consume(&ch, "due", "due", true).await;
    assert_eq!(arrives(&mut due).await, "in 30 min");
    assert_eq!(broker.delayed_count("/", "later"), 0);
    broker.shutdown().await;
}

#[tokio::test]
async fn a_step_back_takes_effect_at_the_next_start_holding_an_hour_longer() {
    static WALL: SteppableWall = SteppableWall::new();
    let dir = DataDir::new("wall-back-restart");
    let broker = Broker::start(on_disk(&dir).with_test_wall(&WALL))
        .await
        .expect("starts");
    let (connection, ch) = channel(&broker).await;
    delayed_and_expiring(&ch).await;
    let published = Instant::now();
    assert!(publish_delayed(&ch, "later", "in 3 s", 3_000).await);
    let due_ms = listed_due(&broker);
    WALL.step_back(HOUR);
    connection.close(200, "bye".into()).await.expect("closed");

    let broker = broker.restart().await.expect("restarts");
    assert_eq!(
        broker.delayed_count("/", "later"),
        1,
        "held across the restart (the restart took {:?})",
        published.elapsed()
    );
    let (_connection, ch) = channel(&broker).await;
    let mut due = consume(&ch, "due", "due", true).await;
    // Past its due time on the host's clock, and not released: on the new start's clock
    // (an hour behind) it is due in about an hour, at the same time as listed before.
    let past_due = Duration::from_secs(4).saturating_sub(published.elapsed());
    assert_eq!(arrival(&mut due, past_due).await, None);
    assert_eq!(listed_due(&broker), due_ms);
    let left = due_ms.saturating_sub(broker.now_ms());
    assert!(left > 3_590_000, "due in {left} ms");
    broker.shutdown().await;
}
