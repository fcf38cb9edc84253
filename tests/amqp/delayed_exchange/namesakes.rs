//! A delayed exchange's purge or deletion while it is under way: the old messages are no
//! longer the exchange's (none is released), and a namesake declared meanwhile holds only its
//! own.

use std::time::Duration;

use super::{publish_delayed, setup};
use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};

#[tokio::test]
async fn a_message_due_while_its_exchanges_purge_is_under_way_is_dropped_not_released() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "early", Some(AMQPValue::LongInt(100))).await;
    publish_delayed(&ch, "delayed", "k", "late", Some(AMQPValue::LongInt(5_000))).await;
    sync(&ch).await;
    t.broker.pause_delayed_purges_once_begun();
    assert_eq!(t.broker.purge_delayed("/", "delayed"), 0, "paused");
    // Published after the purge began: the exchange keeps it.
    publish_delayed(&ch, "delayed", "k", "after", Some(AMQPValue::LongInt(200))).await;
    sync(&ch).await;
    assert_eq!(t.broker.delayed_count("/", "delayed"), 1);

    t.broker.advance(Duration::from_millis(300));
    assert_eq!(
        ready(&t, "out"),
        1,
        "only the message published after the purge"
    );
    assert_eq!(t.broker.resume_delayed_purges(), 1, "the late one");
    t.broker.advance(Duration::from_millis(10_000));
    assert_eq!(
        drain_with_get(&ch, "out").await,
        [("after".to_string(), false)]
    );
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
    assert_eq!(t.broker.delayed_total(), 0);
}

#[tokio::test]
async fn an_exchange_declared_again_before_its_deleted_namesakes_messages_are_dropped_holds_only_its_own(
) {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "old near",
        Some(AMQPValue::LongInt(100)),
    )
    .await;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "old far",
        Some(AMQPValue::LongInt(5_000)),
    )
    .await;
    sync(&ch).await;
    // Deleted: gone from the vhost, its messages not dropped yet.
    t.broker.pause_delayed_purges_at_start();
    ch.exchange_delete("delayed".into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
    declare_delayed(&ch, "delayed", "direct", false).await;
    declare_queue(&ch, "new out").await;
    ch.queue_bind(
        "new out".into(),
        "delayed".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "new near",
        Some(AMQPValue::LongInt(200)),
    )
    .await;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "new far",
        Some(AMQPValue::LongInt(6_000)),
    )
    .await;
    sync(&ch).await;
    assert_eq!(t.broker.delayed_count("/", "delayed"), 2);
    assert_eq!(t.broker.delayed_bytes("/", "delayed"), 15);

    t.broker.advance(Duration::from_millis(300));
    assert_eq!(t.broker.delayed_count("/", "delayed"), 1);
    assert_eq!(t.broker.resume_delayed_purges(), 1, "the old far one");
    assert_eq!(t.broker.delayed_count("/", "delayed"), 1);
    assert_eq!(t.broker.delayed_bytes("/", "delayed"), 7);
    t.broker.advance(Duration::from_millis(10_000));
    assert_eq!(ready(&t, "out"), 0);
    assert_eq!(
        drain_with_get(&ch, "new out").await,
        [
            ("new near".to_string(), false),
            ("new far".to_string(), false)
        ]
    );
    assert_eq!(t.broker.delayed_total(), 0);
}
