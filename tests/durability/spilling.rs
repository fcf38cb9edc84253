//! Transient messages under memory pressure: with a data directory, a classic queue leaves
//! what lies beyond its window on disk (spilled) instead of blocking publishers at the memory
//! alarm, reads it back in order, and a restart brings none of it back.

use crate::common::*;
use crate::support::{channel, declare, publish_confirmed};
use dwellmq::{Broker, BrokerConfig, BrokerHandle, MemoryWatermark};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::Channel;

/// Messages a queue keeps in memory in these tests.
const WINDOW: usize = 8;

/// The memory watermark: 256 KiB. Pressure starts at half of it; the messages published
/// here would hold several times the watermark if they all stayed in memory.
const WATERMARK: u64 = 256 << 10;

fn config(dir: &DataDir) -> BrokerConfig {
    let mut config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral()
    };
    config.limits.queue_window_messages = WINDOW;
    config.limits.memory_high_watermark = MemoryWatermark::Absolute(WATERMARK);
    config
}

/// A broker on `dir`, a confirming channel to it, and the queue `queue` declared.
async fn start_with_queue(
    dir: &DataDir,
    queue: &str,
    durable: bool,
) -> (BrokerHandle, lapin::Connection, Channel) {
    let broker = Broker::start(config(dir)).await.expect("starts");
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare(&ch, queue, durable, FieldTable::default()).await;
    (broker, connection, ch)
}

/// A 1 KiB body that names message `i`.
fn body_of(i: usize) -> String {
    format!("m{i:05}-{}", "x".repeat(1018))
}

fn paged_out(broker: &BrokerHandle, queue: &str) -> u64 {
    broker.queue_info("/", queue).expect("queue").paged_out
}

async fn publish(
    ch: &Channel,
    queue: &str,
    range: std::ops::Range<usize>,
    persistent: impl Fn(usize) -> bool,
) {
    for i in range {
        assert!(
            publish_confirmed(ch, queue, &body_of(i), persistent(i)).await,
            "message {i} confirmed"
        );
    }
}

/// Consumes `n` messages with acks; returns their bodies' names.
async fn consume_all(ch: &Channel, queue: &str, n: usize) -> Vec<String> {
    ch.basic_qos(50, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = consume(ch, queue, "c", false).await;
    let mut seen = Vec::with_capacity(n);
    while seen.len() < n {
        let delivery = next_delivery(&mut consumer).await;
        seen.push(body(&delivery)[..6].to_string());
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    ch.basic_cancel("c".into(), BasicCancelOptions::default())
        .await
        .expect("cancelled");
    seen
}

fn names(range: impl Iterator<Item = usize>) -> Vec<String> {
    range.map(|i| body_of(i)[..6].to_string()).collect()
}

#[tokio::test]
async fn a_transient_queue_under_pressure_pages_to_disk_without_blocking_publishers() {
    let dir = DataDir::new("spilling-transient");
    let (broker, _connection, ch) = start_with_queue(&dir, "t", false).await;
    // 2,000 KiB of bodies against a 256 KiB watermark, nobody consuming: without spilling
    // the alarm would block the publisher for good. (It may go on for a moment when the
    // disk falls behind; what was spilled then leaves memory and lets it go.)
    publish(&ch, "t", 0..2000, |_| false).await;
    sync(&ch).await;
    // The last publish was taken below the watermark (one message more at most).
    assert!(
        broker.memory_used() < WATERMARK as i64 + 2048,
        "{} octets counted",
        broker.memory_used()
    );
    assert!(
        paged_out(&broker, "t") > 1500,
        "most of the queue is on disk"
    );
    let count = passive_declare(&ch, "t")
        .await
        .expect("queue")
        .message_count();
    assert_eq!(count, 2000);
    assert_eq!(consume_all(&ch, "t", 2000).await, names(0..2000));
    sync(&ch).await;
    assert_eq!(paged_out(&broker, "t"), 0);
}

#[tokio::test]
async fn a_durable_queue_spills_its_transient_messages_and_a_restart_keeps_only_the_persistent() {
    let dir = DataDir::new("spilling-durable");
    let (broker, connection, ch) = start_with_queue(&dir, "d", true).await;
    // Every third message persistent: without spilling, the first transient one beyond the
    // window would keep everything behind it in memory.
    publish(&ch, "d", 0..1500, |i| i % 3 == 0).await;
    sync(&ch).await;
    assert!(paged_out(&broker, "d") > 1000);
    // Half of them read back and acked, in order, persistent and spilled merged.
    assert_eq!(consume_all(&ch, "d", 750).await, names(0..750));
    drop(connection);
    broker.shutdown().await;

    let broker = Broker::start(config(&dir)).await.expect("restarts");
    let (_connection, ch) = channel(&broker).await;
    let count = passive_declare(&ch, "d")
        .await
        .expect("queue")
        .message_count();
    assert_eq!(
        count, 250,
        "the persistent messages not acked, nothing spilled"
    );
    assert_eq!(
        consume_all(&ch, "d", 250).await,
        names((750..1500).filter(|i| i % 3 == 0))
    );
}

#[tokio::test]
async fn spills_whose_commits_fail_stay_in_memory_and_nothing_is_lost() {
    let dir = DataDir::new("spilling-failures");
    let (broker, _connection, ch) = start_with_queue(&dir, "t", false).await;
    publish(&ch, "t", 0..300, |_| false).await;
    // The next commits carrying spills fail: what they carried stays in memory.
    broker.fail_next_writes(5);
    publish(&ch, "t", 300..900, |_| false).await;
    sync(&ch).await;
    // All five failed on spills: nothing else here writes a message (transient messages on a
    // transient queue), so each failure the store counts down was a spill's commit.
    eventually("five spill commits failed", || broker.writes_to_fail() == 0).await;
    assert!(
        paged_out(&broker, "t") > 0,
        "spilling went on after the failures"
    );
    assert_eq!(consume_all(&ch, "t", 900).await, names(0..900));
    sync(&ch).await;
    assert_eq!(paged_out(&broker, "t"), 0);
    let count = passive_declare(&ch, "t")
        .await
        .expect("queue")
        .message_count();
    assert_eq!(count, 0);
}

#[tokio::test]
async fn a_purge_and_a_delete_drop_what_was_spilled() {
    let dir = DataDir::new("spilling-purge");
    let (broker, _connection, ch) = start_with_queue(&dir, "t", false).await;
    publish(&ch, "t", 0..600, |_| false).await;
    sync(&ch).await;
    assert!(paged_out(&broker, "t") > 0);
    eventually("the spills committed", || spilled_in_store(&broker) > 0).await;
    let purged = bounded(
        "queue.purge",
        ch.queue_purge("t".into(), QueuePurgeOptions::default()),
    )
    .await
    .expect("purged");
    assert_eq!(purged, 600);
    // The store drops the purged records too (what memory forgot must not stay on disk).
    eventually("the purge dropped the spilled records", || {
        spilled_in_store(&broker) == 0
    })
    .await;
    publish(&ch, "t", 600..610, |_| false).await;
    assert_eq!(consume_all(&ch, "t", 10).await, names(600..610));
    publish(&ch, "t", 610..1200, |_| false).await;
    sync(&ch).await;
    eventually("the spills committed", || spilled_in_store(&broker) > 0).await;
    bounded(
        "queue.delete",
        ch.queue_delete("t".into(), QueueDeleteOptions::default()),
    )
    .await
    .expect("deleted");
    eventually("the delete dropped the spilled records", || {
        spilled_in_store(&broker) == 0
    })
    .await;
    declare(&ch, "t", false, FieldTable::default()).await;
    publish(&ch, "t", 1200..1203, |_| false).await;
    assert_eq!(consume_all(&ch, "t", 3).await, names(1200..1203));
}

/// Spilled records in the store, over every queue the broker has had.
fn spilled_in_store(broker: &BrokerHandle) -> u64 {
    broker.spilled_in_store().expect("the store reads")
}
