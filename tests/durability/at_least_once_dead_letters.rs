//! At-least-once dead-lettering across a power cut: a dead-lettered message its source keeps
//! (no queue took it) is still kept after the restart, and is delivered once a route appears;
//! a purge leaves it (as RabbitMQ's quorum queues' purge leaves their dead-lettered messages);
//! a policy change that ends at-least-once deletes it, on disk too.

use std::sync::Arc;

use crate::common::*;
use crate::support::{channel, declare, publish_confirmed};
use dwellmq::{
    ApplyTo, Broker, BrokerConfig, BrokerHandle, Policy, PolicyDefinition, PolicyValue, StoreFaults,
};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

fn config(dir: &DataDir, faults: Option<Arc<StoreFaults>>) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        store_faults: faults,
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    }
}

fn at_least_once_source() -> FieldTable {
    let mut args = FieldTable::default();
    for (key, value) in [
        ("x-queue-type", "quorum"),
        ("x-dead-letter-exchange", "dlx"),
        ("x-dead-letter-strategy", "at-least-once"),
        ("x-overflow", "reject-publish"),
    ] {
        args.insert(key.into(), AMQPValue::LongString(value.into()));
    }
    args
}

async fn bodies(ch: &Channel, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(got) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        out.push(String::from_utf8_lossy(&got.delivery.data).into_owned());
    }
    out
}

fn kept(broker: &BrokerHandle) -> usize {
    broker
        .queue_info("/", "src")
        .expect("source restored")
        .dead_lettered
}

#[tokio::test]
async fn a_kept_dead_letter_survives_a_power_cut_and_is_delivered_when_a_route_appears() {
    let dir = DataDir::new("at-least-once-power-cut");
    let faults = Arc::new(StoreFaults::default());
    let broker = Broker::start(config(&dir, Some(Arc::clone(&faults))))
        .await
        .expect("broker starts");
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("dead-letter exchange declared");
    declare(&ch, "src", true, at_least_once_source()).await;
    declare(&ch, "later", true, FieldTable::default()).await;
    assert!(publish_confirmed(&ch, "src", "m1", true).await);
    let got = ch
        .basic_get("src".into(), BasicGetOptions { no_ack: false })
        .await
        .expect("basic.get")
        .expect("m1 in the source");
    got.delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .expect("rejected");
    sync(&ch).await;
    assert_eq!(kept(&broker), 1, "no queue took it: kept");
    // Commits end in order: once this one is confirmed, the rejection's is on disk.
    assert!(publish_confirmed(&ch, "later", "after", true).await);

    let image = DataDir::new("at-least-once-power-cut-image");
    std::fs::create_dir_all(image.path()).expect("image directory");
    let file = dwellmq_store::DB_FILE;
    faults
        .disk_image(&dir.path().join(file), &image.path().join(file))
        .expect("disk image");
    drop(connection);
    broker.shutdown().await;

    let broker = Broker::start(config(&image, None))
        .await
        .expect("broker starts on the disk image");
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(kept(&broker), 1, "still kept after the power cut");
    assert_eq!(
        bodies(&ch, "src").await,
        Vec::<String>::new(),
        "not deliverable"
    );

    ch.queue_declare(
        "dead".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("target declared");
    ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "src".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("target bound");
    assert_eq!(bodies(&ch, "dead").await, ["m1"]);
    assert_eq!(kept(&broker), 0);
    broker.shutdown().await;
}

/// A broker with the fault backend, a durable `dlx` exchange, the source `src` declared with
/// `source_args`, and a durable `later` queue (for the barrier before a power cut).
async fn start_with_source(
    dir: &DataDir,
    source_args: FieldTable,
) -> (BrokerHandle, Arc<StoreFaults>, lapin::Connection, Channel) {
    let faults = Arc::new(StoreFaults::default());
    let broker = Broker::start(config(dir, Some(Arc::clone(&faults))))
        .await
        .expect("broker starts");
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("dead-letter exchange declared");
    declare(&ch, "src", true, source_args).await;
    declare(&ch, "later", true, FieldTable::default()).await;
    (broker, faults, connection, ch)
}

/// Publishes `body` to the source, confirmed, and rejects it there without requeue.
async fn dead_letter(ch: &Channel, body: &str) {
    assert!(publish_confirmed(ch, "src", body, true).await);
    let got = ch
        .basic_get("src".into(), BasicGetOptions { no_ack: false })
        .await
        .expect("basic.get")
        .expect("the message in the source");
    got.delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .expect("rejected");
    sync(ch).await;
}

/// Cuts the power once what came before is on disk, and starts a broker on the disk image.
async fn power_cut(
    dir: &DataDir,
    broker: BrokerHandle,
    faults: &StoreFaults,
    connection: lapin::Connection,
    ch: &Channel,
) -> (DataDir, BrokerHandle) {
    // Commits end in order: once this one is confirmed, everything before it is on disk.
    assert!(publish_confirmed(ch, "later", "barrier", true).await);
    let image = DataDir::new("at-least-once-image");
    std::fs::create_dir_all(image.path()).expect("image directory");
    let file = dwellmq_store::DB_FILE;
    faults
        .disk_image(&dir.path().join(file), &image.path().join(file))
        .expect("disk image");
    drop(connection);
    broker.shutdown().await;
    let broker = Broker::start(config(&image, None))
        .await
        .expect("broker starts on the disk image");
    (image, broker)
}

async fn bind_dead(ch: &Channel) {
    ch.queue_declare(
        "dead".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("target declared");
    ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "src".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("target bound");
}

#[tokio::test]
async fn a_purge_leaves_the_kept_dead_letters_in_memory_and_on_disk() {
    let dir = DataDir::new("at-least-once-purge");
    let (broker, faults, connection, ch) = start_with_source(&dir, at_least_once_source()).await;
    dead_letter(&ch, "kept").await;
    assert!(publish_confirmed(&ch, "src", "ready", true).await);
    assert_eq!(kept(&broker), 1);

    let purged = ch
        .queue_purge("src".into(), QueuePurgeOptions::default())
        .await
        .expect("purged");
    assert_eq!(purged, 1, "the ready message only");
    assert_eq!(kept(&broker), 1, "still kept");

    let (_image, broker) = power_cut(&dir, broker, &faults, connection, &ch).await;
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(kept(&broker), 1, "still kept after the power cut");
    assert_eq!(bodies(&ch, "src").await, Vec::<String>::new(), "purged");
    bind_dead(&ch).await;
    assert_eq!(bodies(&ch, "dead").await, ["kept"]);
    assert_eq!(kept(&broker), 0);
    broker.shutdown().await;
}

/// The policy that makes `src` dead-letter into `dlx` at least once.
fn at_least_once_policy() -> Policy {
    let definition = PolicyDefinition::from_entries(
        [
            ("dead-letter-exchange", "dlx"),
            ("dead-letter-strategy", "at-least-once"),
            ("overflow", "reject-publish"),
        ]
        .map(|(key, value)| (key, PolicyValue::Text(value.into()))),
    )
    .expect("valid definition");
    Policy {
        name: "dlx".into(),
        pattern: "^src$".into(),
        apply_to: ApplyTo::QuorumQueues,
        priority: 0,
        definition,
    }
}

#[tokio::test]
async fn a_policy_that_ends_at_least_once_deletes_the_kept_dead_letters_on_disk_too() {
    let dir = DataDir::new("at-least-once-policy-cleared");
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    let (broker, faults, connection, ch) = start_with_source(&dir, args).await;
    broker
        .set_policy("/", at_least_once_policy())
        .expect("policy set");
    dead_letter(&ch, "m1").await;
    assert_eq!(kept(&broker), 1);
    assert!(broker.clear_policy("/", "dlx"));
    assert_eq!(kept(&broker), 0, "deleted");
    // At least once again before the power cut (the policy is stored): had the deletion not
    // reached the disk, the restart would restore the message as kept, and the target bound
    // below would receive it.
    broker
        .set_policy("/", at_least_once_policy())
        .expect("policy set again");

    let (_image, broker) = power_cut(&dir, broker, &faults, connection, &ch).await;
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(kept(&broker), 0, "deleted on disk too");
    bind_dead(&ch).await;
    sync(&ch).await;
    broker.settle().await.expect("settled");
    assert_eq!(bodies(&ch, "dead").await, Vec::<String>::new());
    assert_eq!(bodies(&ch, "src").await, Vec::<String>::new());
    broker.shutdown().await;
}
