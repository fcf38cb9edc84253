//! A durable queue the restore kept on disk (its vhost was not configured) and a later
//! declare takes back comes back as a restart brings back a paging queue: as one run counted
//! from the store, its first page read, then a window at a time as consumers take them.
//! Before, the declare read every message, a page of 4,096 at a time, each page counted whole
//! in memory until the queue paged it out again: with large bodies, far more than a window.

use crate::common::*;
use crate::http_client::{put, GUEST};
use crate::support::declare;
use dwellmq::{Broker, BrokerConfig, BrokerHandle};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};

const MESSAGES: usize = 1_000;
/// Beyond what a queue packs: each is kept as published, its whole body counted.
const BODY: usize = 16 * 1024;
const WINDOW: usize = 256;

/// Message `i`'s body: its number, then padding.
fn body_of(i: usize) -> Vec<u8> {
    let mut body = format!("m{i} ").into_bytes();
    body.resize(BODY, b'.');
    body
}

fn config(dir: &DataDir, tenant: bool) -> BrokerConfig {
    let mut config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        http: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    };
    config.limits.queue_window_messages = WINDOW;
    if tenant {
        config.vhosts = vec!["tenant".into()];
    }
    config
}

async fn tenant_channel(broker: &BrokerHandle) -> (lapin::Connection, Channel) {
    let url = format!(
        "amqp://guest:guest@127.0.0.1:{}/tenant",
        broker.local_addr().port()
    );
    let connection = connect_url(&url).await.expect("tenant");
    let ch = connection.create_channel().await.expect("channel");
    (connection, ch)
}

/// Publishes `m0`.. to `backlog`, pipelined, and waits for every confirm.
async fn fill_backlog(ch: &Channel) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let mut confirms = Vec::with_capacity(MESSAGES);
    for i in 0..MESSAGES {
        let confirm = ch
            .basic_publish(
                "".into(),
                "backlog".into(),
                BasicPublishOptions::default(),
                &body_of(i),
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .expect("publish sent");
        confirms.push(confirm);
    }
    for confirm in confirms {
        let confirm = tokio::time::timeout(std::time::Duration::from_secs(60), confirm)
            .await
            .expect("confirmed in time")
            .expect("confirm");
        assert!(confirm.is_ack());
    }
}

/// Runs `work` while a thread samples the memory counted; returns its output and the most
/// counted at any sample.
async fn with_peak_memory<T>(
    broker: &BrokerHandle,
    work: impl std::future::Future<Output = T>,
) -> (T, i64) {
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
    let stop = AtomicBool::new(false);
    let peak = AtomicI64::new(broker.memory_used());
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(broker.memory_used(), Ordering::Relaxed);
            }
        });
        let out = tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(work));
        stop.store(true, Ordering::Relaxed);
        (out, peak.load(Ordering::Relaxed))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declare_takes_back_a_kept_queue_as_a_paged_run() {
    let dir = DataDir::new("kept-queue-paged");
    let broker = Broker::start(config(&dir, true)).await.expect("starts");
    let (connection, ch) = tenant_channel(&broker).await;
    declare(&ch, "backlog", true, FieldTable::default()).await;
    fill_backlog(&ch).await;
    drop(connection);
    broker.shutdown().await;

    // Without the vhost the queue is kept on disk; the vhost comes back at runtime.
    let broker = Broker::start(config(&dir, false)).await.expect("starts");
    let http = broker.http_addr().expect("HTTP");
    let added = put(http, "/api/vhosts/tenant", GUEST, serde_json::json!({})).await;
    assert_eq!(added.status, 201, "{}", added.text());
    let everything = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
    let granted = put(http, "/api/permissions/tenant/guest", GUEST, everything).await;
    assert!(granted.status < 300, "{}", granted.text());
    let (_connection, ch) = tenant_channel(&broker).await;
    broker.settle().await.expect("settled");
    let before = broker.memory_used();

    let (declared, peak) = with_peak_memory(&broker, async {
        ch.queue_declare(
            "backlog".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("taken back")
    })
    .await;
    let peak = peak - before;
    eprintln!("peak memory counted during the declare: {peak} octets");
    // A window of these bodies is 4 MiB (`queue_window_bytes`); all of them 16 MiB.
    let bound = 8 * 1024 * 1024;
    assert!(
        peak <= bound,
        "the declare read no more than a window into memory: {peak} > {bound}"
    );
    assert_eq!(
        declared.message_count() as usize,
        MESSAGES,
        "counted at once"
    );
    broker.settle().await.expect("settled");
    let taken_back = broker.memory_used() - before;
    let info = broker.queue_info("tenant", "backlog").expect("queue");
    eprintln!(
        "memory counted for the taken-back queue: {taken_back} octets; in memory {}, paged out {}",
        info.messages - info.paged_out as usize,
        info.paged_out
    );
    assert!(
        info.messages - info.paged_out as usize <= WINDOW,
        "at most a window in memory: {} of {}",
        info.messages - info.paged_out as usize,
        info.messages
    );
    assert!(
        taken_back <= bound,
        "memory counted for at most a window: {taken_back} > {bound}"
    );

    // Everything comes back, in order, a window at a time.
    let mut consumer = ch
        .basic_consume(
            "backlog".into(),
            "all".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume");
    for i in 0..MESSAGES {
        let delivery = tokio::time::timeout(std::time::Duration::from_secs(30), consumer.next())
            .await
            .expect("delivered in time")
            .expect("a delivery")
            .expect("delivered");
        assert!(delivery.data == body_of(i), "m{i} in its place");
    }
    broker.settle().await.expect("settled");
    assert_eq!(
        broker.queue_info("tenant", "backlog").map(|q| q.messages),
        Some(0)
    );
    broker.shutdown().await;
}
