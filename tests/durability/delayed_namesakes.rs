//! A durable delayed exchange deleted and declared again before the old one's disk-held
//! messages are dropped: the namesake's counts and releases are its own.

use std::time::Duration;

use crate::common::*;
use crate::support::*;
use dwellmq::{Broker, BrokerConfig};
use lapin::options::{ConfirmSelectOptions, QueueBindOptions};
use lapin::types::FieldTable;
use lapin::Channel;

const DAY_MS: i64 = 86_400_000;

async fn bind_to_due(ch: &Channel) {
    ch.queue_bind(
        "due".into(),
        "d".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_durable_exchange_declared_again_before_its_deleted_namesakes_messages_are_dropped_counts_and_releases_only_its_own(
) {
    let dir = DataDir::new("delayed-namesake");
    let config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    };
    let broker = Broker::start(config).await.unwrap();
    let (_connection, ch) = channel(&broker).await;
    declare_delayed(&ch, "d", "direct", true).await;
    declare(&ch, "due", true, FieldTable::default()).await;
    bind_to_due(&ch).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    // One in the wheel, two on disk.
    assert!(publish_delayed(&ch, "d", "old near", 500).await);
    assert!(publish_delayed(&ch, "d", "old day", DAY_MS).await);
    assert!(publish_delayed(&ch, "d", "old day 2", DAY_MS + 10).await);

    broker.pause_delayed_purges_at_start();
    ch.exchange_delete("d".into(), Default::default())
        .await
        .unwrap();
    declare_delayed(&ch, "d", "direct", true).await;
    bind_to_due(&ch).await;
    assert!(publish_delayed(&ch, "d", "new day", DAY_MS + 5).await);
    assert!(publish_delayed(&ch, "d", "new near", 600).await);
    assert_eq!(broker.delayed_count("/", "d"), 2);
    assert_eq!(broker.delayed_bytes("/", "d"), 15);

    broker.resume_delayed_purges();
    assert_eq!(broker.delayed_count("/", "d"), 2);
    assert_eq!(broker.delayed_bytes("/", "d"), 15);
    broker.advance(Duration::from_millis(DAY_MS as u64 + 100));
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [
            ("new near".to_string(), false),
            ("new day".to_string(), false)
        ]
    );
    assert_eq!(broker.delayed_count("/", "d"), 0);
    assert_eq!(broker.delayed_total(), 0);
}

#[tokio::test]
async fn while_a_durable_exchanges_purge_is_under_way_its_listing_shows_only_what_was_published_since(
) {
    let dir = DataDir::new("delayed-purge-listing");
    let config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    };
    let broker = Broker::start(config).await.unwrap();
    let (_connection, ch) = channel(&broker).await;
    declare_delayed(&ch, "d", "direct", true).await;
    declare(&ch, "due", true, FieldTable::default()).await;
    bind_to_due(&ch).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    // On disk, due before and after the one published once the purge began.
    for delay in [DAY_MS, DAY_MS + 20, 2 * DAY_MS] {
        assert!(publish_delayed(&ch, "d", "old", delay).await);
    }
    broker.pause_delayed_purges_once_begun();
    assert_eq!(broker.purge_delayed("/", "d"), 0, "paused");
    assert!(publish_delayed(&ch, "d", "new", DAY_MS + 10).await);

    let listed: Vec<u64> = broker
        .delayed_messages("/", "d", 10)
        .iter()
        .map(|m| m.due_ms)
        .collect();
    assert_eq!(listed, [T0_MS + DAY_MS as u64 + 10]);
    assert_eq!(broker.delayed_count("/", "d"), 1);
    assert_eq!(
        broker.delayed_next_due("/", "d"),
        Some(T0_MS + DAY_MS as u64 + 10)
    );
    assert_eq!(broker.resume_delayed_purges(), 3);
    broker.advance(Duration::from_millis(3 * DAY_MS as u64));
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("new".to_string(), false)]
    );
}
