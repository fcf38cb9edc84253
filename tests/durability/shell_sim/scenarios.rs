//! The simulation's findings as short deterministic scenarios, each the few steps that show
//! one defect (the seed that found it is named), so that a fix can be checked without a
//! simulation run.

use std::time::{Duration, Instant};

use dwellmq::{Broker, BrokerConfig, BrokerHandle, MemoryWatermark};
use lapin::options::{
    BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

use crate::common::{connect, long_str, table, DataDir, T0_MS};

/// A broker on a data directory with the simulation's paging: a window of 4 messages, and
/// memory always under pressure (transient messages beyond the window are spilled).
async fn paging_broker(dir: &DataDir, watermark: Option<u64>) -> BrokerHandle {
    let mut config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    };
    config.limits.queue_window_messages = 4;
    config.limits.memory_paging_ratio = 1e-12;
    if let Some(octets) = watermark {
        config.limits.memory_high_watermark = MemoryWatermark::Absolute(octets);
    }
    Broker::start(config).await.expect("broker starts")
}

async fn confirmed_channel(broker: &BrokerHandle) -> (lapin::Connection, Channel) {
    let connection = connect(broker).await;
    let ch = connection.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    (connection, ch)
}

async fn declare(ch: &Channel, queue: &str, arguments: FieldTable) {
    let options = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare(queue.into(), options, arguments)
        .await
        .expect("declare");
}

/// Publishes `body` to `queue` with an `expiration` if given, and waits (5 s at most) for
/// its confirm: whether it was acked.
async fn publish(
    ch: &Channel,
    queue: &str,
    body: &[u8],
    persistent: bool,
    expiration: Option<&str>,
) -> bool {
    let confirm = send(ch, queue, body, persistent, expiration).await;
    match tokio::time::timeout(Duration::from_secs(5), confirm).await {
        Ok(Ok(c)) => c.is_ack(),
        Ok(Err(e)) => panic!("the confirm failed: {e}"),
        Err(_) => panic!("no confirm within 5 s: the publisher is blocked for good"),
    }
}

/// Sends a publish (5 s at most: a client blocked by the broker does not send) and returns
/// its confirm.
async fn send(
    ch: &Channel,
    queue: &str,
    body: &[u8],
    persistent: bool,
    expiration: Option<&str>,
) -> lapin::PublisherConfirm {
    let mut properties = BasicProperties::default();
    if persistent {
        properties = properties.with_delivery_mode(2);
    }
    if let Some(ms) = expiration {
        properties = properties.with_expiration(ms.into());
    }
    let publish = ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body,
        properties,
    );
    match tokio::time::timeout(Duration::from_secs(5), publish).await {
        Ok(Ok(confirm)) => confirm,
        Ok(Err(e)) => panic!("publishing failed: {e}"),
        Err(_) => panic!("a publish not sent within 5 s: the publisher is blocked for good"),
    }
}

/// Waits up to 5 s for `done` to hold.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

fn bodies(broker: &BrokerHandle, queue: &str) -> Vec<Vec<u8>> {
    broker
        .peek_messages("/", queue, usize::MAX)
        .into_iter()
        .map(|m| m.body)
        .collect()
}

/// Issue 35 point 1 (every seed of the simulation): a retry queue (TTL and a dead-letter
/// exchange, nobody consuming) longer than its window dead-letters every message once its
/// TTL has passed, not just those in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_queue_dead_letters_its_paged_messages_on_time() {
    let dir = DataDir::new("scenario-retry");
    let broker = paging_broker(&dir, None).await;
    let (_connection, ch) = confirmed_channel(&broker).await;
    let retry = table(&[
        ("x-message-ttl", AMQPValue::LongInt(3_000)),
        ("x-dead-letter-exchange", long_str("")),
        ("x-dead-letter-routing-key", long_str("retried")),
    ]);
    declare(&ch, "retry", retry).await;
    declare(&ch, "retried", FieldTable::default()).await;
    for i in 0..40 {
        assert!(publish(&ch, "retry", format!("{i}").as_bytes(), true, None).await);
    }
    broker.advance(Duration::from_millis(3_000));
    let all_moved = eventually(|| {
        broker.peek_messages("/", "retry", 1).is_empty()
            && broker.peek_messages("/", "retried", usize::MAX).len() == 40
    })
    .await;
    assert!(
        all_moved,
        "5 s after the TTL passed: {} left in retry, {} dead-lettered of 40",
        bodies(&broker, "retry").len(),
        bodies(&broker, "retried").len()
    );
}

/// Issue 35 point 2 (seed 1033 with `skip-paged-expiry`): a transient message with an
/// `expiration`, spilled under memory pressure, is still there after the messages before it
/// were read back and requeued past the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requeue_past_the_window_keeps_the_spilled_messages_behind_it() {
    let dir = DataDir::new("scenario-spilled");
    let broker = paging_broker(&dir, None).await;
    let (_connection, ch) = confirmed_channel(&broker).await;
    declare(&ch, "q", FieldTable::default()).await;
    let published: Vec<Vec<u8>> = (0..8).map(|i| format!("m{i}").into_bytes()).collect();
    // As seed 1033 had them: persistent and transient, sent before waiting for their
    // confirms; the last one transient with an `expiration` (not due here; without it the
    // message is not lost).
    let mut confirms = Vec::new();
    for (i, body) in published.iter().enumerate() {
        let persistent = matches!(i, 0 | 2 | 6);
        let expiration = (i == 7).then_some("4118");
        confirms.push(send(&ch, "q", body, persistent, expiration).await);
    }
    for confirm in confirms {
        let confirmed = tokio::time::timeout(Duration::from_secs(5), confirm).await;
        assert!(matches!(confirmed, Ok(Ok(c)) if c.is_ack()));
    }
    let mut tags = Vec::new();
    for _ in 0..7 {
        let got = ch
            .basic_get("q".into(), BasicGetOptions { no_ack: false })
            .await
            .expect("basic.get")
            .expect("a message");
        tags.push(got.delivery.delivery_tag);
    }
    for tag in tags {
        let requeue = BasicNackOptions {
            requeue: true,
            multiple: false,
        };
        ch.basic_nack(tag, requeue).await.expect("nack");
    }
    // The queue pages what is now beyond its window; everything must still be there, in
    // order.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let intact = eventually(|| bodies(&broker, "q") == published).await;
    let seen: Vec<String> = bodies(&broker, "q")
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert!(intact, "the queue holds {seen:?}, 8 were confirmed");
}

/// Found by the simulation's memory figures (seed 1091 with `skip-paged-expiry`: 80 of a
/// retry queue's messages stayed in memory): one failed commit stops a paging queue from
/// paging at all. Its nacked message never joins the paged run, nor does anything behind
/// it, so every later message stays in memory; with no consumer, nothing lowers it, and once
/// the watermark is reached the publisher is blocked for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_persist_does_not_stop_a_queue_from_paging() {
    const WATERMARK: u64 = 256 << 10;
    let dir = DataDir::new("scenario-failed-persist");
    let broker = paging_broker(&dir, Some(WATERMARK)).await;
    let (_connection, ch) = confirmed_channel(&broker).await;
    declare(&ch, "q", FieldTable::default()).await;
    let body = vec![7u8; 2_000];
    for batch in 0..30 {
        if batch == 5 {
            broker.fail_next_writes(1);
        }
        for _ in 0..10 {
            publish(&ch, "q", &body, true, None).await;
        }
    }
    // 300 messages of 2,000 octets: all but the window and the last few beyond it are in
    // the store only.
    let info = broker.queue_info("/", "q").unwrap();
    assert!(
        info.paged_out > 250,
        "{} of {} messages paged out, {} octets counted in memory",
        info.paged_out,
        info.messages,
        broker.memory_used()
    );
}
