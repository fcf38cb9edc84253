//! Moving messages held by a durable delayed exchange, through a real client: on disk and in
//! the wheel, later, sooner and now; after a restart each keeps its new due time and arrives
//! once, at that time, with its body.

use std::time::Duration;

use crate::common::*;
use crate::support::*;
use dwellmq::{Broker, BrokerConfig, DelayedMove};
use lapin::options::{ConfirmSelectOptions, QueueBindOptions};
use lapin::types::FieldTable;

const DAY_MS: u64 = 86_400_000;

fn bodies(got: Vec<(String, bool)>) -> Vec<String> {
    got.into_iter().map(|(body, _)| body).collect()
}

#[tokio::test]
async fn moved_durable_messages_keep_their_new_due_times_across_a_restart_and_arrive_once() {
    let dir = DataDir::new("delayed-moves");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    declare_delayed(&ch, "reminders", "direct", true).await;
    declare(&ch, "due", true, FieldTable::default()).await;
    ch.queue_bind(
        "due".into(),
        "reminders".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    // On disk: a day, an hour, a week away; in the wheel: half a second away.
    for (body, delay) in [
        ("day", DAY_MS),
        ("hour", 3_600_000),
        ("week", 7 * DAY_MS),
        ("soon", 500),
    ] {
        assert!(publish_delayed(&ch, "reminders", body, delay as i64).await);
    }
    let id_of = |due: u64| {
        let held = broker.delayed_messages("/", "reminders", 10);
        held.iter().find(|m| m.due_ms == due).expect("held").id
    };
    let at = |ms: u64| T0_MS + ms;
    // Disk to now: released at once.
    broker
        .move_delayed(id_of(at(7 * DAY_MS)), DelayedMove::Now)
        .expect("moved");
    assert_eq!(bodies(drain_with_get(&ch, "due").await), ["week"]);
    // Disk to disk (sooner), disk to two seconds (still beyond the wheel), wheel to disk.
    let moves = [
        (at(3_600_000), at(1_500)),
        (at(DAY_MS), at(2_000)),
        (at(500), at(2 * DAY_MS)),
    ];
    for (from, to) in moves {
        broker
            .move_delayed(id_of(from), DelayedMove::At(to))
            .expect("moved");
    }
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    // Back a second later: the new due times, nothing at the old ones.
    let broker = Broker::start(config(T0_MS + 1_000)).await.unwrap();
    let dues: Vec<u64> = broker
        .delayed_messages("/", "reminders", 10)
        .iter()
        .map(|m| m.due_ms)
        .collect();
    assert_eq!(dues, [at(1_500), at(2_000), at(2 * DAY_MS)]);
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(broker.advance(Duration::from_millis(499)), 0);
    assert_eq!(broker.advance(Duration::from_millis(1)), 1);
    assert_eq!(bodies(drain_with_get(&ch, "due").await), ["hour"]);
    assert_eq!(broker.advance(Duration::from_millis(500)), 1);
    assert_eq!(bodies(drain_with_get(&ch, "due").await), ["day"]);
    assert_eq!(broker.advance(Duration::from_millis(DAY_MS)), 0);
    assert_eq!(broker.advance(Duration::from_millis(DAY_MS)), 1);
    assert_eq!(bodies(drain_with_get(&ch, "due").await), ["soon"]);
    assert_eq!(broker.advance(Duration::from_millis(8 * DAY_MS)), 0);
    broker.shutdown().await;

    // Released means gone from the store: nothing comes back.
    let broker = Broker::start(config(T0_MS + 20 * DAY_MS)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 0);
    broker.shutdown().await;
}

/// A held message released (by the clock, or moved to now) into a quorum queue just before
/// two commits fail: what was confirmed, and the released message, are in the queue after a
/// restart; a nacked publish is not. (Which commits fail depends on the writer's timing: the
/// store's `a_release_elided_with_its_hold_in_a_failed_commit_still_retries_its_queue_copy`
/// makes the losing case certain.)
async fn released_before_failing_commits_survives(move_it: bool) {
    let dir = DataDir::new("delayed-release-fail");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    declare_delayed(&ch, "later", "direct", true).await;
    let mut quorum = FieldTable::default();
    quorum.insert(
        "x-queue-type".into(),
        lapin::types::AMQPValue::LongString("quorum".into()),
    );
    declare(&ch, "q1", true, quorum).await;
    ch.queue_bind(
        "q1".into(),
        "later".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish_confirmed(&ch, "q1", "before", true).await);
    assert!(publish_delayed(&ch, "later", "held", 3_000).await);
    if move_it {
        let id = broker.delayed_messages("/", "later", 1)[0].id;
        broker.move_delayed(id, DelayedMove::Now).expect("moved");
    } else {
        assert_eq!(broker.advance(Duration::from_millis(3_000)), 1);
    }
    broker.fail_next_writes(2);
    let mut expected = vec!["before".to_string(), "held".to_string()];
    for body in ["maybe-1", "maybe-2", "maybe-3"] {
        if publish_confirmed(&ch, "q1", body, true).await {
            expected.push(body.to_string());
        }
    }
    assert!(publish_confirmed(&ch, "q1", "after", true).await);
    expected.push("after".to_string());
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let broker = Broker::start(config(T0_MS + 4_000)).await.unwrap();
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(bodies(drain_with_get(&ch, "q1").await), expected);
    broker.shutdown().await;
}

#[tokio::test]
async fn a_message_released_before_failing_commits_is_in_its_queue_after_a_restart() {
    released_before_failing_commits_survives(false).await;
}

#[tokio::test]
async fn a_message_moved_to_now_before_failing_commits_is_in_its_queue_after_a_restart() {
    released_before_failing_commits_survives(true).await;
}
