//! Store faults through a real client, on the store's failing backend
//! (`BrokerConfig::store_faults`): a failed write, a failed fsync and a full disk each nack the
//! publish they hit and block the publishing connection (`connection.blocked`, "low on disk")
//! until the writer's own probe finds the disk working again; a slow disk blocks publishers
//! once too much is queued for it; a restart holds exactly what was confirmed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{connect, Confirmed, DataDir};
use dwellmq::{Broker, BrokerConfig, BrokerHandle, Limits, StoreFaults};
use futures_lite::StreamExt;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Event};

fn config(dir: &DataDir, faults: Option<Arc<StoreFaults>>) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        store_faults: faults,
        ..BrokerConfig::ephemeral()
    }
}

async fn durable_queue(ch: &Channel, name: &str) -> u32 {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("queue declared")
    .message_count()
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

/// Publishes a persistent message with confirms; true for an ack.
async fn publish_confirmed(ch: &Channel, queue: &str, body: &str) -> bool {
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        persistent(),
    )
    .confirmed()
    .await
    .expect("confirm")
    .is_ack()
}

/// The next `connection.blocked` / `unblocked` event (others are skipped), bounded.
async fn next_block_event(events: &mut (impl futures_lite::Stream<Item = Event> + Unpin)) -> Event {
    let wait = async {
        while let Some(event) = events.next().await {
            if matches!(
                event,
                Event::ConnectionBlocked(_) | Event::ConnectionUnblocked
            ) {
                return event;
            }
        }
        panic!("the connection's events ended");
    };
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("a connection.blocked or connection.unblocked within 10 s")
}

/// Everything in `queue` after a restart on `dir` (without faults), in order.
async fn bodies_after_restart(dir: &DataDir, queue: &str) -> Vec<String> {
    let broker = Broker::start(config(dir, None)).await.expect("restarts");
    let connection = connect(&broker).await;
    let ch = connection.create_channel().await.unwrap();
    durable_queue(&ch, queue).await;
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        out.push(String::from_utf8_lossy(&m.delivery.data).to_string());
    }
    drop(connection);
    broker.shutdown().await;
    out
}

/// One fault, end to end: the publish it hits is nacked, the connection is blocked until the
/// fault clears (no further publish needed to notice), later publishes are confirmed, and a
/// restart holds exactly the confirmed ones.
async fn fault_blocks_then_clears(name: &str, switch: impl Fn(&StoreFaults) -> &AtomicBool) {
    let dir = DataDir::new(name);
    let faults = Arc::new(StoreFaults::default());
    let broker = Broker::start(config(&dir, Some(faults.clone())))
        .await
        .expect("broker starts");
    let connection = connect(&broker).await;
    let mut events = Box::pin(connection.events_listener());
    let ch = connection.create_channel().await.unwrap();
    durable_queue(&ch, "jobs").await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish_confirmed(&ch, "jobs", "before").await);

    switch(&faults).store(true, Ordering::SeqCst);
    assert!(
        !publish_confirmed(&ch, "jobs", "during").await,
        "{name}: the publish whose write failed is nacked"
    );
    match next_block_event(&mut events).await {
        Event::ConnectionBlocked(reason) => assert_eq!(reason, "low on disk", "{name}"),
        other => panic!("{name}: expected connection.blocked, got {other:?}"),
    }
    assert!(broker_alarm(&broker), "{name}: the alarm is on");

    switch(&faults).store(false, Ordering::SeqCst);
    assert!(
        matches!(
            next_block_event(&mut events).await,
            Event::ConnectionUnblocked
        ),
        "{name}: unblocked once writes succeed again"
    );
    assert!(
        publish_confirmed(&ch, "jobs", "after").await,
        "{name}: confirmed again"
    );
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    assert_eq!(
        bodies_after_restart(&dir, "jobs").await,
        ["before", "after"],
        "{name}: exactly the confirmed messages"
    );
}

/// Whether the broker reports the disk alarm.
fn broker_alarm(broker: &BrokerHandle) -> bool {
    broker.disk_alarm()
}

#[tokio::test]
async fn a_failed_write_nacks_blocks_publishers_until_writes_succeed_and_keeps_exactly_the_confirmed(
) {
    fault_blocks_then_clears("write", |f| &f.fail_writes).await;
}

#[tokio::test]
async fn a_failed_fsync_nacks_blocks_publishers_until_writes_succeed_and_keeps_exactly_the_confirmed(
) {
    fault_blocks_then_clears("fsync", |f| &f.fail_sync).await;
}

#[tokio::test]
async fn a_full_disk_nacks_blocks_publishers_until_writes_succeed_and_keeps_exactly_the_confirmed()
{
    fault_blocks_then_clears("full", |f| &f.disk_full).await;
}

#[tokio::test]
async fn a_publisher_without_confirms_is_blocked_while_the_writer_is_behind_and_loses_nothing() {
    let dir = DataDir::new("backlog");
    let faults = Arc::new(StoreFaults::default());
    let broker = Broker::start(BrokerConfig {
        limits: Limits {
            store_backlog_bytes: 20_000,
            ..Limits::default()
        },
        ..config(&dir, Some(faults.clone()))
    })
    .await
    .expect("broker starts");
    let connection = connect(&broker).await;
    let mut events = Box::pin(connection.events_listener());
    let ch = connection.create_channel().await.unwrap();
    durable_queue(&ch, "bulk").await;
    // The disk is stuck in an fsync: every write from now on queues up behind it.
    faults.pause();
    let publisher = tokio::spawn({
        let ch = ch.clone();
        async move {
            for i in 0..100 {
                let body = format!("{i:03}{}", "x".repeat(997));
                ch.basic_publish(
                    "".into(),
                    "bulk".into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    persistent(),
                )
                .await
                .expect("publish sent");
            }
        }
    });
    match next_block_event(&mut events).await {
        Event::ConnectionBlocked(reason) => assert_eq!(reason, "low on disk"),
        other => panic!("expected connection.blocked, got {other:?}"),
    }
    faults.resume();
    assert!(matches!(
        next_block_event(&mut events).await,
        Event::ConnectionUnblocked
    ));
    tokio::time::timeout(Duration::from_secs(10), publisher)
        .await
        .expect("the publisher finishes once unblocked")
        .unwrap();
    // A round trip on the same channel: every publish before it was handled.
    assert_eq!(durable_queue(&ch, "bulk").await, 100);
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let bodies = bodies_after_restart(&dir, "bulk").await;
    let expected: Vec<String> = (0..100)
        .map(|i| format!("{i:03}{}", "x".repeat(997)))
        .collect();
    assert_eq!(bodies.len(), 100, "nothing lost");
    assert!(bodies == expected, "in order");
}

#[tokio::test]
async fn tx_commit_ok_waits_for_the_commit_and_a_failed_commit_closes_the_channel() {
    let dir = DataDir::new("tx");
    let faults = Arc::new(StoreFaults::default());
    let broker = Broker::start(config(&dir, Some(faults.clone())))
        .await
        .expect("broker starts");
    let connection = connect(&broker).await;
    let ch = connection.create_channel().await.unwrap();
    durable_queue(&ch, "tx").await;
    ch.tx_select().await.unwrap();
    let publish = |body: &'static str| {
        let ch = ch.clone();
        async move {
            ch.basic_publish(
                "".into(),
                "tx".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                persistent(),
            )
            .await
            .expect("publish sent");
        }
    };
    publish("committed").await;
    // The commit's fsync is held: tx.commit-ok cannot go out before it ends.
    let syncs = faults.syncs.load(Ordering::SeqCst);
    faults.pause();
    let commit = tokio::spawn({
        let ch = ch.clone();
        async move { ch.tx_commit().await }
    });
    crate::common::eventually("the transaction's commit reaches its fsync", || {
        faults.syncs.load(Ordering::SeqCst) > syncs
    })
    .await;
    assert!(
        !commit.is_finished(),
        "tx.commit-ok arrived while the commit was still in its fsync"
    );
    faults.resume();
    commit.await.unwrap().expect("tx.commit-ok once durable");

    // A commit that fails: the channel is closed with 506, no tx.commit-ok.
    faults.fail_writes.store(true, Ordering::SeqCst);
    publish("failed").await;
    let error = ch
        .tx_commit()
        .await
        .expect_err("a failed write is no tx.commit-ok");
    let (code, text) = crate::common::amqp_error(&error);
    assert_eq!(code, 506, "{text}");
    assert!(text.contains("tx.commit"), "{text}");
    faults.fail_writes.store(false, Ordering::SeqCst);
    drop(connection);
    broker.shutdown().await;

    assert_eq!(bodies_after_restart(&dir, "tx").await, ["committed"]);
}

#[tokio::test]
async fn a_durable_declare_whose_definition_cannot_be_written_closes_the_channel() {
    let dir = DataDir::new("declare");
    let faults = Arc::new(StoreFaults::default());
    let broker = Broker::start(config(&dir, Some(faults.clone())))
        .await
        .expect("broker starts");
    let connection = connect(&broker).await;
    faults.fail_writes.store(true, Ordering::SeqCst);
    let ch = connection.create_channel().await.unwrap();
    let error = ch
        .queue_declare(
            "durable".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect_err("no declare-ok for a definition that was not written");
    let (code, text) = crate::common::amqp_error(&error);
    assert_eq!(code, 506, "{text}");
    assert!(text.contains("could not write the definition"), "{text}");
    // A transient queue writes nothing: declared at once, whatever the disk does.
    let ch = connection.create_channel().await.unwrap();
    ch.queue_declare(
        "transient".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("declare-ok");
    faults.fail_writes.store(false, Ordering::SeqCst);
    drop(connection);
    broker.shutdown().await;
}
