//! Messages held by durable delayed exchanges: kept across restarts, caught up after an outage,
//! listed, cancelled, purged and released in due order from disk.

use crate::common::*;
use crate::support::*;
use dwellmq::{Broker, BrokerConfig};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

#[tokio::test]
async fn messages_held_by_a_durable_delayed_exchange_survive_a_restart_at_their_due_times() {
    let dir = DataDir::new("delayed");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("reminders", true), ("scratch", false)]).await;
    assert!(publish_delayed(&ch, "reminders", "in 5 s", 5_000).await);
    assert!(publish_delayed(&ch, "reminders", "in 1 s", 1_000).await);
    assert!(publish_delayed(&ch, "reminders", "in 1 h", 3_600_000).await);
    assert!(publish_delayed(&ch, "reminders", "cancelled by release", 500).await);
    assert!(publish_delayed(&ch, "scratch", "transient exchange", 1_000).await);
    // One falls due before the stop and goes into the queue (and is consumed: gone).
    broker.advance(std::time::Duration::from_millis(600));
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("cancelled by release".to_string(), false)]
    );
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    // Back 2 s after the first start: "in 1 s" fell due while the broker was down.
    let broker = Broker::start(config(T0_MS + 2_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 3);
    assert_eq!(broker.delayed_count("/", "scratch"), 0);
    let (_connection, ch) = channel(&broker).await;
    broker.advance(std::time::Duration::ZERO);
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("in 1 s".to_string(), false)]
    );
    // The others at their original due times.
    broker.advance(std::time::Duration::from_millis(2_999));
    assert_eq!(drain_with_get(&ch, "due").await, Vec::new());
    broker.advance(std::time::Duration::from_millis(1));
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("in 5 s".to_string(), false)]
    );
    assert_eq!(
        broker.delayed_next_due("/", "reminders"),
        Some(T0_MS + 3_600_000)
    );
    broker.shutdown().await;

    // Released ones are not held again after another restart; the hour-long one still is.
    let broker = Broker::start(config(T0_MS + 10_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 1);
    broker.shutdown().await;
}

#[tokio::test]
async fn delayed_messages_that_fell_due_during_an_outage_are_caught_up_at_a_bounded_rate() {
    let dir = DataDir::new("catch-up");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("reminders", true)]).await;
    // Published newest-due first: they come out oldest first all the same.
    for i in (1..=25).rev() {
        assert!(publish_delayed(&ch, "reminders", &format!("{i:02}"), 1_000 + i).await);
    }
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    // An hour later all 25 are overdue: 10 per millisecond (10,000 per second) from now on.
    let broker = Broker::start(config(T0_MS + 3_600_000)).await.unwrap();
    let (_connection, ch) = channel(&broker).await;
    let bodies = |got: Vec<(String, bool)>| got.into_iter().map(|(b, _)| b).collect::<Vec<_>>();
    let expect = |from: i64, to: i64| (from..=to).map(|i| format!("{i:02}")).collect::<Vec<_>>();
    broker.advance(std::time::Duration::ZERO);
    assert_eq!(bodies(drain_with_get(&ch, "due").await), expect(1, 10));
    broker.advance(std::time::Duration::from_millis(1));
    assert_eq!(bodies(drain_with_get(&ch, "due").await), expect(11, 20));
    broker.advance(std::time::Duration::from_millis(1));
    assert_eq!(bodies(drain_with_get(&ch, "due").await), expect(21, 25));
    broker.shutdown().await;

    // Released (under their catch-up times) means removed from the store.
    let broker = Broker::start(config(T0_MS + 7_200_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 0);
    broker.shutdown().await;
}

const DAY_MS: i64 = 86_400_000;

/// Declares the delayed exchanges (name, durable) and a durable queue `due` bound to each with
/// key `k`, and puts the channel in confirm mode.
async fn delayed_into_due(ch: &Channel, exchanges: &[(&str, bool)]) {
    for &(name, durable) in exchanges {
        declare_delayed(ch, name, "direct", durable).await;
    }
    declare(ch, "due", true, FieldTable::default()).await;
    let names: Vec<&str> = exchanges.iter().map(|&(name, _)| name).collect();
    bind_all(ch, "due", &names).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
}

/// Binds queue `queue` to each of `exchanges` with key `k`.
async fn bind_all(ch: &Channel, queue: &str, exchanges: &[&str]) {
    for exchange in exchanges {
        ch.queue_bind(
            (*queue).into(),
            (*exchange).into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn messages_held_on_disk_are_listed_cancelled_and_released_in_order_days_after_a_restart() {
    let dir = DataDir::new("disk-held");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("reminders", true), ("scratch", false)]).await;
    // Beyond the scheduler's horizon (held on disk) but for "soon", published out of order.
    for (body, delay_ms) in [
        ("day 3", 3 * DAY_MS),
        ("day 1", DAY_MS),
        ("cancelled", DAY_MS + DAY_MS / 2),
        ("day 2", 2 * DAY_MS),
        ("in 10 s", 10_000),
        ("soon", 500),
    ] {
        assert!(publish_delayed(&ch, "reminders", body, delay_ms).await);
    }
    assert!(publish_delayed(&ch, "scratch", "transient", DAY_MS).await);
    let listed = broker.delayed_messages("/", "reminders", 10);
    let dues: Vec<u64> = listed.iter().map(|m| m.due_ms).collect();
    let at = |delay_ms: i64| T0_MS + delay_ms as u64;
    assert_eq!(
        dues,
        [
            at(500),
            at(10_000),
            at(DAY_MS),
            at(DAY_MS + DAY_MS / 2),
            at(2 * DAY_MS),
            at(3 * DAY_MS)
        ]
    );
    assert!(listed.iter().all(|m| m.routing_key == "k"));
    assert_eq!(listed[3].body_size, "cancelled".len());
    assert_eq!(broker.delayed_messages("/", "scratch", 10).len(), 1);
    // Cancelled on disk: once, and it does not come back.
    assert!(broker.cancel_delayed(listed[3].id));
    assert!(!broker.cancel_delayed(listed[3].id));
    assert_eq!(broker.delayed_count("/", "reminders"), 5);
    assert_eq!(broker.delayed_next_due("/", "reminders"), Some(at(500)));
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    // Back a second later: "soon" fell due while the broker was down.
    let broker = Broker::start(config(T0_MS + 1_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 5);
    assert_eq!(broker.delayed_count("/", "scratch"), 0);
    let listed = broker.delayed_messages("/", "reminders", 10);
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[1].due_ms, at(10_000));
    let (_connection, ch) = channel(&broker).await;
    broker.advance(std::time::Duration::ZERO);
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("soon".to_string(), false)]
    );
    // Days ahead in one jump: each in due order, none lost, the cancelled one not back.
    broker.advance(std::time::Duration::from_millis(3 * DAY_MS as u64));
    let bodies: Vec<String> = drain_with_get(&ch, "due")
        .await
        .into_iter()
        .map(|(body, _)| body)
        .collect();
    assert_eq!(bodies, ["in 10 s", "day 1", "day 2", "day 3"]);
    assert_eq!(broker.delayed_count("/", "reminders"), 0);
    broker.shutdown().await;

    let broker = Broker::start(config(T0_MS + 4 * DAY_MS as u64))
        .await
        .unwrap();
    assert_eq!(broker.delayed_total(), 0);
    broker.shutdown().await;
}

/// Publishes `n` messages due `delay_ms` from now to `exchange`, confirms pipelined; true if all
/// were acked.
async fn publish_many_delayed(ch: &Channel, exchange: &str, n: usize, delay_ms: i64) -> bool {
    let mut confirms = Vec::with_capacity(n);
    for i in 0..n {
        let mut headers = FieldTable::default();
        headers.insert(
            "x-delay".into(),
            AMQPValue::LongLongInt(delay_ms + i as i64),
        );
        confirms.push(
            ch.basic_publish(
                exchange.into(),
                "k".into(),
                BasicPublishOptions::default(),
                b"m",
                BasicProperties::default().with_headers(headers),
            )
            .await
            .expect("publish sent"),
        );
    }
    let mut all = true;
    for confirm in confirms {
        all &= confirm.await.expect("confirm").is_ack();
    }
    all
}

#[tokio::test]
async fn purging_or_deleting_a_delayed_exchange_drops_its_disk_held_messages_for_good() {
    let dir = DataDir::new("disk-purge");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("purged", true), ("deleted", true), ("kept", true)]).await;
    let memory_before = broker.memory_used();
    // More than one purge chunk each.
    assert!(publish_many_delayed(&ch, "purged", 2_500, DAY_MS).await);
    assert!(publish_many_delayed(&ch, "deleted", 2_500, DAY_MS).await);
    assert!(publish_delayed(&ch, "kept", "kept", 2 * DAY_MS).await);
    // Held on disk: not charged as memory.
    assert_eq!(broker.memory_used(), memory_before);
    assert_eq!(broker.delayed_count("/", "purged"), 2_500);
    assert_eq!(broker.purge_delayed("/", "purged"), 2_500);
    assert_eq!(broker.delayed_count("/", "purged"), 0);
    assert!(broker.delayed_messages("/", "purged", 10).is_empty());
    ch.exchange_delete("deleted".into(), Default::default())
        .await
        .unwrap();
    assert_eq!(broker.delayed_count("/", "deleted"), 0);
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let broker = Broker::start(config(T0_MS + 1_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "purged"), 0);
    assert_eq!(broker.delayed_count("/", "deleted"), 0);
    assert_eq!(broker.delayed_count("/", "kept"), 1);
    let (_connection, ch) = channel(&broker).await;
    // Declared again, the deleted exchange holds nothing.
    declare_delayed(&ch, "deleted", "direct", true).await;
    bind_all(&ch, "due", &["deleted"]).await;
    assert_eq!(broker.delayed_count("/", "deleted"), 0);
    broker.advance(std::time::Duration::from_millis(3 * DAY_MS as u64));
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("kept".to_string(), false)]
    );
    assert_eq!(broker.delayed_total(), 0);
    broker.shutdown().await;
}

/// Under the system clock a durable exchange's messages due beyond the horizon are held on
/// disk, and the disk mover thread brings them into the timer's wheel ahead of time: each is
/// released in due order and none before its time (publish order differs from due order).
#[tokio::test]
async fn disk_held_messages_are_released_in_due_order_under_the_system_clock() {
    let dir = DataDir::new("mover");
    let broker = start_on(&dir).await;
    let (_connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("later", true)]).await;
    let mut consumer = consume_no_ack(&ch, "due").await;
    // Delays 1.2 s to 2.15 s, 50 ms apart, published in a shuffled order and pipelined (the
    // confirms are awaited afterwards), so that due order is delay order.
    let delays: Vec<u64> = (0..20u64).map(|k| 1_200 + 50 * ((k * 7) % 20)).collect();
    let sent = std::time::Instant::now();
    let mut confirms = Vec::new();
    for &delay in &delays {
        let mut headers = FieldTable::default();
        headers.insert("x-delay".into(), AMQPValue::LongLongInt(delay as i64));
        let confirm = ch
            .basic_publish(
                "later".into(),
                "k".into(),
                BasicPublishOptions::default(),
                delay.to_string().as_bytes(),
                BasicProperties::default().with_headers(headers),
            )
            .await
            .expect("publish sent");
        confirms.push(confirm);
    }
    for confirm in confirms {
        assert!(confirm.await.expect("confirm").is_ack());
    }
    let mut released = Vec::new();
    for _ in &delays {
        let body = next_body(&mut consumer).await;
        let delay: u64 = body.parse().expect("a delay");
        // Never early: due at the broker's receipt plus the delay, which is after `sent`
        // (less the broker clock's millisecond rounding).
        let waited = sent.elapsed().as_millis() as u64;
        assert!(
            waited + 2 >= delay,
            "{delay} ms message released after {waited} ms"
        );
        released.push(delay);
    }
    let mut in_due_order = delays.clone();
    in_due_order.sort_unstable();
    assert_eq!(released, in_due_order);
    assert_eq!(broker.delayed_count("/", "later"), 0);
    broker.shutdown().await;
}
