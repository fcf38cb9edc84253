//! Durable queues longer than their window: the messages further back stay in the store
//! only, are read back in order as consumers come to them, count from the start, and survive
//! a power cut without a restart reading them.

use std::sync::Arc;

use crate::common::*;
use crate::support::{channel, declare, publish_confirmed};
use dwellmq::{Broker, BrokerConfig, BrokerHandle, StoreFaults};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::Channel;

/// Messages a queue keeps in memory in these tests: paging starts with few messages.
const WINDOW: usize = 8;

/// What a restart reads of a paged queue at once: one page, half the window.
const FIRST_PAGE: u64 = WINDOW as u64 / 2;

fn config(dir: &DataDir, faults: Option<Arc<StoreFaults>>) -> BrokerConfig {
    let mut config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        store_faults: faults,
        ..BrokerConfig::ephemeral()
    };
    config.limits.queue_window_messages = WINDOW;
    config
}

fn paged_out(broker: &BrokerHandle, queue: &str) -> u64 {
    broker.queue_info("/", queue).expect("queue").paged_out
}

async fn fill(ch: &Channel, queue: &str, bodies: std::ops::Range<usize>) {
    for i in bodies {
        assert!(publish_confirmed(ch, queue, &format!("m{i}"), true).await);
    }
}

fn names(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("m{i}")).collect()
}

async fn get_all(ch: &Channel, queue: &str) -> Vec<String> {
    drain_with_get(ch, queue)
        .await
        .into_iter()
        .map(|(body, _)| body)
        .collect()
}

async fn message_count(ch: &Channel, queue: &str) -> u32 {
    passive_declare(ch, queue)
        .await
        .expect("queue exists")
        .message_count()
}

/// The disk as a power cut at this moment would leave it, as a new data directory.
fn power_cut_image(faults: &StoreFaults, dir: &DataDir, name: &str) -> DataDir {
    let image = DataDir::new(name);
    std::fs::create_dir_all(image.path()).expect("image directory");
    let file = dwellmq_store::DB_FILE;
    faults
        .disk_image(&dir.path().join(file), &image.path().join(file))
        .expect("disk image");
    image
}

#[tokio::test]
async fn a_queue_longer_than_its_window_delivers_everything_in_order_with_a_requeue_between() {
    let dir = DataDir::new("paging-order");
    let broker = Broker::start(config(&dir, None)).await.expect("starts");
    let (_connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare(&ch, "q", true, FieldTable::default()).await;
    fill(&ch, "q", 0..100).await;
    assert_eq!(message_count(&ch, "q").await, 100);
    assert_eq!(paged_out(&broker, "q"), 100 - WINDOW as u64);

    ch.basic_qos(1, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = consume(&ch, "q", "c", false).await;
    let mut seen = Vec::new();
    while seen.len() < 101 {
        let delivery = next_delivery(&mut consumer).await;
        let body = body(&delivery);
        seen.push((body.clone(), delivery.redelivered));
        if body == "m30" && !delivery.redelivered {
            // Back to its place, in front of what is still in the store.
            delivery
                .nack(BasicNackOptions {
                    requeue: true,
                    ..Default::default()
                })
                .await
                .expect("nack");
        } else {
            delivery.ack(BasicAckOptions::default()).await.expect("ack");
        }
    }
    let mut expected: Vec<(String, bool)> = names(0..31).into_iter().map(|b| (b, false)).collect();
    expected.push(("m30".into(), true));
    expected.extend(names(31..100).into_iter().map(|b| (b, false)));
    assert_eq!(seen, expected);
    sync(&ch).await;
    assert_eq!(message_count(&ch, "q").await, 0);
    assert_eq!(paged_out(&broker, "q"), 0);
}

#[tokio::test]
async fn a_purge_forgets_the_paged_run_and_a_delete_drops_a_page_in_flight() {
    let dir = DataDir::new("paging-purge");
    let broker = Broker::start(config(&dir, None)).await.expect("starts");
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare(&ch, "q", true, FieldTable::default()).await;
    fill(&ch, "q", 0..50).await;
    assert_eq!(
        ch.queue_purge("q".into(), QueuePurgeOptions::default())
            .await
            .expect("purged"),
        50
    );
    assert_eq!(
        (message_count(&ch, "q").await, paged_out(&broker, "q")),
        (0, 0)
    );
    fill(&ch, "q", 50..53).await;
    assert_eq!(get_all(&ch, "q").await, names(50..53));
    // Nothing purged comes back with a restart.
    drop(connection);
    broker.shutdown().await;
    let broker = Broker::start(config(&dir, None)).await.expect("restarts");
    let (_connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    assert_eq!(message_count(&ch, "q").await, 0);

    // A consumer takes the window and asks for a page; the read is held, so the page is in
    // flight while the queue is deleted and declared again (with a backlog of its own, paged
    // too).
    fill(&ch, "q", 53..100).await;
    broker.hold_page_reads();
    let mut consumer = consume(&ch, "q", "c", true).await;
    let mut delivered = Vec::new();
    for _ in 0..WINDOW {
        delivered.push(body(&next_delivery(&mut consumer).await));
    }
    assert_eq!(delivered, names(53..53 + WINDOW), "the window, in memory");
    eventually("a page read in flight", || broker.page_reads_held() == 1).await;
    bounded(
        "queue.delete",
        ch.queue_delete("q".into(), QueueDeleteOptions::default()),
    )
    .await
    .expect("deleted");
    declare(&ch, "q", true, FieldTable::default()).await;
    fill(&ch, "q", 100..120).await;
    broker.release_page_reads();
    eventually("the page handed over", || broker.page_reads_held() == 0).await;
    sync(&ch).await;
    // Dropped: the deleted queue's consumer got only the window before the delete cancelled
    // it, and the new queue holds only its own messages, in order; nothing stays counted.
    let rest = bounded("the cancelled consumer's end", async {
        let mut rest = Vec::new();
        while let Some(delivery) = futures_lite::StreamExt::next(&mut consumer).await {
            rest.push(body(&delivery.expect("delivery")));
        }
        rest
    })
    .await;
    assert_eq!(rest, Vec::<String>::new(), "nothing after the window");
    assert_eq!(message_count(&ch, "q").await, 20);
    assert_eq!(get_all(&ch, "q").await, names(100..120));
    sync(&ch).await;
    eventually("no memory counted", || broker.memory_used() == 0).await;
}

#[tokio::test]
async fn after_a_power_cut_a_paged_backlog_is_counted_before_any_read_and_read_back_whole() {
    let dir = DataDir::new("paging-power-cut");
    let faults = Arc::new(StoreFaults::default());
    let broker = Broker::start(config(&dir, Some(Arc::clone(&faults))))
        .await
        .expect("starts");
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare(&ch, "q", true, FieldTable::default()).await;
    fill(&ch, "q", 0..100).await;
    assert!(paged_out(&broker, "q") > 0);
    let image = power_cut_image(&faults, &dir, "paging-power-cut-image");
    drop(connection);
    broker.shutdown().await;

    let faults = Arc::new(StoreFaults::default());
    let broker = Broker::start(config(&image, Some(Arc::clone(&faults))))
        .await
        .expect("starts on the disk image");
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    // Counted from the store's counts: only the first page (half the window) was read.
    assert_eq!(message_count(&ch, "q").await, 100);
    assert_eq!(paged_out(&broker, "q"), 100 - FIRST_PAGE);

    // A consumer acks the first 30 (pages are read meanwhile); then the power fails.
    ch.basic_qos(5, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = consume(&ch, "q", "c", false).await;
    for i in 0..30 {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(
            (body(&delivery), delivery.redelivered),
            (format!("m{i}"), false)
        );
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    sync(&ch).await;
    // Commits end in order: once this publish is confirmed, the acks are on disk.
    declare(&ch, "marker", true, FieldTable::default()).await;
    assert!(publish_confirmed(&ch, "marker", "x", true).await);
    let image2 = power_cut_image(&faults, &image, "paging-power-cut-image-2");
    drop(connection);
    broker.shutdown().await;

    let broker = Broker::start(config(&image2, None))
        .await
        .expect("starts on the second disk image");
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(message_count(&ch, "q").await, 70);
    // The 5 delivered and not acked at the cut come back redelivered, the rest as they were.
    let rest = drain_with_get(&ch, "q").await;
    let bodies: Vec<String> = rest.iter().map(|(b, _)| b.clone()).collect();
    assert_eq!(bodies, names(30..100));
    let redelivered: Vec<bool> = rest.iter().map(|(_, r)| *r).collect();
    assert_eq!(redelivered, [vec![true; 5], vec![false; 65]].concat());
}

#[tokio::test]
async fn a_restart_reads_one_page_and_an_ack_of_a_paged_in_message_sticks() {
    let dir = DataDir::new("paging-restart");
    let broker = Broker::start(config(&dir, None)).await.expect("starts");
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare(&ch, "q", true, FieldTable::default()).await;
    fill(&ch, "q", 0..40).await;
    drop(connection);
    broker.shutdown().await;

    let broker = Broker::start(config(&dir, None)).await.expect("restarts");
    let (connection, ch) = channel(&broker).await;
    assert_eq!(paged_out(&broker, "q"), 40 - FIRST_PAGE);
    let got = ch
        .basic_get("q".into(), BasicGetOptions { no_ack: false })
        .await
        .expect("basic.get")
        .expect("the head, read from the store");
    assert_eq!((body(&got.delivery), got.message_count), ("m0".into(), 39));
    got.delivery
        .ack(BasicAckOptions::default())
        .await
        .expect("ack");
    sync(&ch).await;
    assert_eq!(
        paged_out(&broker, "q"),
        40 - FIRST_PAGE,
        "nothing more read"
    );
    drop(connection);
    broker.shutdown().await;

    let broker = Broker::start(config(&dir, None))
        .await
        .expect("restarts again");
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(message_count(&ch, "q").await, 39);
    let mut consumer = consume_no_ack(&ch, "q").await;
    let mut bodies = Vec::new();
    while bodies.len() < 39 {
        bodies.push(body(&next_delivery(&mut consumer).await));
    }
    assert_eq!(bodies, names(1..40));
    sync(&ch).await;
    assert_eq!(message_count(&ch, "q").await, 0);
}
