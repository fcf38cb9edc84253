//! What a failure does to what was confirmed, through a real client: a failed commit never
//! turns into a partial one (a delayed release, a dead-lettering), quorum queues keep every
//! message, a no-ack delivery refused by a closing channel stays stored. Each test restarts
//! the broker on its data directory and looks at what came back.

use std::time::Duration;

use crate::common::{connect, Confirmed, DataDir, T0_MS};
use crate::common::{declare_delayed, long_str, table};
use dwellmq::{Broker, BrokerConfig, BrokerHandle};
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

fn config(dir: &DataDir, now_ms: u64) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(now_ms)
    }
}

async fn channel(broker: &BrokerHandle) -> (lapin::Connection, Channel) {
    let connection = connect(broker).await;
    let ch = connection.create_channel().await.expect("channel");
    (connection, ch)
}

async fn durable_queue(ch: &Channel, name: &str, arguments: FieldTable) {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        arguments,
    )
    .await
    .expect("queue declared");
}

/// Declares `name` passively: a queue that did not survive fails here instead of being
/// created again.
async fn passive_queue(ch: &Channel, name: &str) -> u32 {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("the queue survived the restart")
    .message_count()
}

async fn publish(
    ch: &Channel,
    exchange: &str,
    key: &str,
    body: &str,
    properties: BasicProperties,
) -> bool {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        properties,
    )
    .confirmed()
    .await
    .expect("confirm")
    .is_ack()
}

async fn bodies(ch: &Channel, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
    {
        out.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    out
}

/// Waits (bounded) until the store has committed what is queued for it: a confirmed publish
/// to a scratch durable queue commits after everything submitted before it.
async fn committed(ch: &Channel) {
    durable_queue(ch, "scratch", FieldTable::default()).await;
    for _ in 0..100 {
        if publish(ch, "", "scratch", "sync", persistent()).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the store never committed again");
}

/// A durable delayed exchange `later` (direct) bound to a durable queue `due` with key `k`,
/// and the channel in confirm mode.
async fn delayed_into_due(ch: &Channel) {
    declare_delayed(ch, "later", "direct", true).await;
    durable_queue(ch, "due", FieldTable::default()).await;
    ch.queue_bind(
        "due".into(),
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
}

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

/// A confirmed delayed message released while its commit fails: the release's copy and the
/// removal of its hold are retried together, so after the restart it is in its queue (before,
/// the retry removed the hold alone and the message was gone).
#[tokio::test]
async fn a_delayed_release_whose_commit_fails_is_retried_whole() {
    let dir = DataDir::new("failure-release");
    let broker = Broker::start(config(&dir, T0_MS)).await.expect("starts");
    let (connection, ch) = channel(&broker).await;
    delayed_into_due(&ch).await;
    let delayed = persistent().with_headers(table(&[("x-delay", AMQPValue::LongInt(1500))]));
    assert!(publish(&ch, "later", "k", "reminder", delayed).await);

    broker.fail_next_writes(1);
    broker.advance(Duration::from_secs(3));
    // The release's commit failed (the fault is used up) and was retried whole.
    crate::common::eventually("the release's commit fails", || {
        broker.writes_to_fail() == 0
    })
    .await;
    committed(&ch).await;
    drop(connection);
    let broker = broker.restart().await.expect("restarts");
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(passive_queue(&ch, "due").await, 1);
    assert_eq!(bodies(&ch, "due").await, ["reminder"]);
    assert_eq!(broker.delayed_count("/", "later"), 0, "released once");
    broker.shutdown().await;
}

/// A message dead-lettered by its TTL leaves its queue and enters the dead-letter queue in
/// one commit: when that commit fails, both are retried, and a restart finds it exactly once.
#[tokio::test]
async fn a_dead_lettering_whose_commit_fails_is_retried_whole() {
    let dir = DataDir::new("failure-dead-letter");
    let broker = Broker::start(config(&dir, T0_MS)).await.expect("starts");
    let (connection, ch) = channel(&broker).await;
    durable_queue(&ch, "dead", FieldTable::default()).await;
    durable_queue(
        &ch,
        "work",
        table(&[
            ("x-message-ttl", AMQPValue::LongInt(1000)),
            ("x-dead-letter-exchange", long_str("")),
            ("x-dead-letter-routing-key", long_str("dead")),
        ]),
    )
    .await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish(&ch, "", "work", "job", persistent()).await);

    broker.fail_next_writes(1);
    broker.advance(Duration::from_secs(2));
    crate::common::eventually("the dead-lettering's commit fails", || {
        broker.writes_to_fail() == 0
    })
    .await;
    committed(&ch).await;
    drop(connection);
    let broker = broker.restart().await.expect("restarts");
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(passive_queue(&ch, "work").await, 0, "it left its queue");
    assert_eq!(bodies(&ch, "dead").await, ["job"]);
    broker.shutdown().await;
}

/// RabbitMQ's quorum queues keep every message: a transient one is confirmed after its commit
/// and comes back after a restart.
#[tokio::test]
async fn a_quorum_queue_keeps_transient_messages_across_a_restart() {
    let dir = DataDir::new("failure-quorum-transient");
    let broker = Broker::start(config(&dir, T0_MS)).await.expect("starts");
    let (connection, ch) = channel(&broker).await;
    durable_queue(&ch, "q", table(&[("x-queue-type", long_str("quorum"))])).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish(&ch, "", "q", "transient", BasicProperties::default()).await);
    assert!(publish(&ch, "", "q", "persistent", persistent()).await);
    drop(connection);
    let broker = broker.restart().await.expect("restarts");
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(bodies(&ch, "q").await, ["transient", "persistent"]);
    broker.shutdown().await;
}

/// A quorum queue's transient message is not confirmed when its commit fails.
#[tokio::test]
async fn a_quorum_queues_transient_message_is_nacked_when_its_commit_fails() {
    let dir = DataDir::new("failure-quorum-nack");
    let broker = Broker::start(config(&dir, T0_MS)).await.expect("starts");
    let (_connection, ch) = channel(&broker).await;
    durable_queue(&ch, "q", table(&[("x-queue-type", long_str("quorum"))])).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    broker.fail_next_writes(1);
    assert!(!publish(&ch, "", "q", "lost", BasicProperties::default()).await);
    broker.shutdown().await;
}

/// A no-ack delivery takes its message out of the store once it went out (the removal goes
/// with the delivery, so one a closing channel refuses stays stored: core's
/// `a_no_ack_delivery_forgets_its_stored_message_only_once_delivered`).
#[tokio::test]
async fn messages_delivered_to_a_no_ack_consumer_do_not_come_back() {
    let dir = DataDir::new("failure-no-ack-delivered");
    let broker = Broker::start(config(&dir, T0_MS)).await.expect("starts");
    let (connection, ch) = channel(&broker).await;
    durable_queue(&ch, "jobs", FieldTable::default()).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for body in ["one", "two", "three"] {
        assert!(publish(&ch, "", "jobs", body, persistent()).await);
    }
    let mut consumer = ch
        .basic_consume(
            "jobs".into(),
            "eager".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume");
    for expected in ["one", "two", "three"] {
        assert_eq!(crate::common::next_body(&mut consumer).await, expected);
    }
    assert!(publish(&ch, "", "jobs", "four", persistent()).await);
    assert_eq!(crate::common::next_body(&mut consumer).await, "four");
    committed(&ch).await;
    drop(connection);
    let broker = broker.restart().await.expect("restarts");
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(passive_queue(&ch, "jobs").await, 0);
    broker.shutdown().await;
}

/// A durable queue whose definition cannot be written is taken back: the declare fails (506,
/// as RabbitMQ answers a failed write), a later declare writes it again, and after a restart
/// the queue and its confirmed messages are there. Before, the queue stayed in memory, the
/// redeclare answered declare-ok without writing, and the restart lost both.
#[tokio::test]
async fn a_queue_whose_definition_write_failed_is_written_by_the_next_declare() {
    use std::sync::atomic::Ordering;
    let dir = DataDir::new("failure-definition");
    let faults = std::sync::Arc::new(dwellmq::StoreFaults::default());
    let broker = Broker::start(BrokerConfig {
        store_faults: Some(faults.clone()),
        ..config(&dir, T0_MS)
    })
    .await
    .expect("starts");
    let connection = connect(&broker).await;
    let ch = connection.create_channel().await.expect("channel");
    faults.fail_writes.store(true, Ordering::SeqCst);
    let refused = ch
        .queue_declare(
            "orders".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect_err("the definition could not be written");
    assert_eq!(crate::common::amqp_error(&refused).0, 506);
    assert!(broker.queue_names("/").iter().all(|q| q != "orders"));
    faults.fail_writes.store(false, Ordering::SeqCst);
    crate::common::eventually("the disk alarm clears", || !broker.disk_alarm()).await;

    let ch = connection.create_channel().await.expect("channel");
    durable_queue(&ch, "orders", FieldTable::default()).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish(&ch, "", "orders", "order 1", persistent()).await);
    drop(connection);
    let broker = broker.restart().await.expect("restarts");
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(passive_queue(&ch, "orders").await, 1);
    assert_eq!(bodies(&ch, "orders").await, ["order 1"]);
    broker.shutdown().await;
}

/// A user deleted over HTTP is answered after the commit: while writes fail the answer says
/// so (500), the deletion holds in memory, and the store retries its mark until it is written,
/// so the user does not come back after a restart. Before, the answer came first (204) and a
/// failed mark was never written again: the deleted user came back.
#[tokio::test]
async fn a_user_deleted_while_writes_fail_stays_deleted_after_a_restart() {
    use crate::http_client::{delete, get, put, start_http, GUEST};
    use std::sync::atomic::Ordering;
    let dir = DataDir::new("failure-user-deleted");
    let faults = std::sync::Arc::new(dwellmq::StoreFaults::default());
    let (broker, addr) = start_http(BrokerConfig {
        store_faults: Some(faults.clone()),
        ..config(&dir, T0_MS)
    })
    .await;
    let created = put(
        addr,
        "/api/users/ops",
        GUEST,
        serde_json::json!({"password": "ops-pw", "tags": ""}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text());

    faults.fail_writes.store(true, Ordering::SeqCst);
    let deleted = delete(addr, "/api/users/ops", GUEST).await;
    assert_eq!(deleted.status, 500, "{}", deleted.text());
    assert!(
        deleted.text().contains("could not be written"),
        "{}",
        deleted.text()
    );
    assert_eq!(get(addr, "/api/users/ops", GUEST).await.status, 404);
    faults.fail_writes.store(false, Ordering::SeqCst);
    crate::common::eventually("the disk alarm clears", || !broker.disk_alarm()).await;

    let broker = broker.restart().await.expect("restarts");
    assert_eq!(broker.http_addr(), Some(addr));
    assert_eq!(get(addr, "/api/users/ops", GUEST).await.status, 404);
    broker.shutdown().await;
}

/// RabbitMQ's free disk space alarm: with less free space on the data directory's file system
/// than `disk_free_limit`, publishers are blocked (`connection.blocked`, "low on disk") before
/// the disk is full; the default limit (50 MB) leaves them alone here.
#[tokio::test]
async fn publishers_are_blocked_below_the_disk_free_limit() {
    use futures_lite::StreamExt;
    let dir = DataDir::new("failure-disk-free");
    let mut low = config(&dir, T0_MS);
    low.limits.disk_free_limit = dwellmq::DiskFreeLimit::Absolute(u64::MAX);
    let broker = Broker::start(low).await.expect("starts");
    assert!(broker.disk_alarm(), "no file system has that much free");
    let connection = connect(&broker).await;
    let mut events = Box::pin(connection.events_listener());
    let ch = connection.create_channel().await.expect("channel");
    // A publish is what gets a connection blocked, as in RabbitMQ.
    ch.basic_publish(
        "".into(),
        "nowhere".into(),
        BasicPublishOptions::default(),
        b"x",
        BasicProperties::default(),
    )
    .await
    .expect("sent");
    let blocked = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(event) = events.next().await {
            if let lapin::Event::ConnectionBlocked(reason) = event {
                return reason;
            }
        }
        panic!("the connection's events ended");
    })
    .await
    .expect("connection.blocked within 10 s");
    assert_eq!(blocked, "low on disk");
    drop(connection);
    broker.shutdown().await;

    let dir = DataDir::new("failure-disk-free-default");
    let broker = Broker::start(config(&dir, T0_MS)).await.expect("starts");
    assert!(!broker.disk_alarm(), "50 MB are free on the test machine");
    broker.shutdown().await;
}

/// A restore never deletes: with a vhost taken out of the configuration, what lives in it is
/// not restored but kept on disk untouched (and named by the definitions health check); put
/// back, everything returns: the queue with its message, the binding, the delayed message.
/// Before, the restart without the vhost deleted the bindings and the held messages.
#[tokio::test]
async fn definitions_that_cannot_be_restored_are_kept_for_a_later_start() {
    use crate::http_client::{get, GUEST};
    let dir = DataDir::new("failure-unrestored");
    let with_tenant = |tenant: bool, now_ms: u64| {
        let mut config = config(&dir, now_ms);
        if tenant {
            config.vhosts = vec!["tenant".into()];
        }
        config.http = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        config
    };
    let url = |broker: &BrokerHandle| {
        format!(
            "amqp://guest:guest@127.0.0.1:{}/tenant",
            broker.local_addr().port()
        )
    };
    let broker = Broker::start(with_tenant(true, T0_MS))
        .await
        .expect("starts");
    let connection = crate::common::connect_url(&url(&broker))
        .await
        .expect("tenant");
    let ch = connection.create_channel().await.unwrap();
    delayed_into_due(&ch).await;
    assert!(publish(&ch, "", "due", "queued", persistent()).await);
    let delayed = persistent().with_headers(table(&[("x-delay", AMQPValue::LongInt(60_000))]));
    assert!(publish(&ch, "later", "k", "held", delayed).await);
    drop(connection);
    broker.shutdown().await;

    // Without the vhost, two minutes later: nothing of it is restored (the held message fell
    // due meanwhile and is left on disk), and the health check says what is kept.
    let later = T0_MS + 120_000;
    let broker = Broker::start(with_tenant(false, later))
        .await
        .expect("starts");
    broker.advance(Duration::from_secs(5));
    let http = broker.http_addr().expect("HTTP");
    let check = get(http, "/api/health/checks/definitions", GUEST).await;
    assert_eq!(check.status, 503, "{}", check.text());
    let kept = check.json()["definitions"].to_string();
    for name in ["'later'", "'due'", "later -> due"] {
        assert!(kept.contains(name), "{name} not named in {kept}");
    }
    broker.shutdown().await;

    // Back in the configuration: everything returns, and the held message is released.
    let broker = Broker::start(with_tenant(true, later + 5_000))
        .await
        .expect("starts");
    let http = broker.http_addr().expect("HTTP");
    let check = get(http, "/api/health/checks/definitions", GUEST).await;
    assert_eq!(check.status, 200, "{}", check.text());
    let connection = crate::common::connect_url(&url(&broker))
        .await
        .expect("tenant");
    let ch = connection.create_channel().await.unwrap();
    assert_eq!(bodies(&ch, "due").await, ["queued"]);
    assert_eq!(broker.delayed_count("tenant", "later"), 1);
    broker.advance(Duration::from_secs(1));
    crate::common::eventually("the held message is released", || {
        broker
            .queue_info("tenant", "due")
            .is_some_and(|q| q.messages == 1)
    })
    .await;
    assert_eq!(bodies(&ch, "due").await, ["held"]);
    broker.shutdown().await;
}

/// A queue the restore kept on disk (its vhost was not configured) is taken back by a later
/// declare of the same vhost and name: the declare reuses its stored id, so its message comes
/// back, and its kept binding with it; the health check no longer names them, and a restart
/// finds the message once. Before, the declare got a fresh id: an empty queue, with the kept
/// message orphaned under the old one.
#[tokio::test]
async fn a_declare_takes_back_a_queue_the_restore_kept_with_its_messages() {
    use crate::http_client::{get, put, GUEST};
    let dir = DataDir::new("failure-kept-queue");
    let start = |tenant: bool| {
        let mut config = config(&dir, T0_MS);
        if tenant {
            config.vhosts = vec!["tenant".into()];
        }
        config.http = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        Broker::start(config)
    };
    let url = |broker: &BrokerHandle| {
        format!(
            "amqp://guest:guest@127.0.0.1:{}/tenant",
            broker.local_addr().port()
        )
    };
    let tenant_channel = |broker: &BrokerHandle| {
        let url = url(broker);
        async move {
            let connection = crate::common::connect_url(&url).await.expect("tenant");
            let ch = connection.create_channel().await.unwrap();
            (connection, ch)
        }
    };
    let broker = start(true).await.expect("starts");
    let (connection, ch) = tenant_channel(&broker).await;
    durable_queue(&ch, "due", FieldTable::default()).await;
    ch.queue_bind(
        "due".into(),
        "amq.direct".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish(&ch, "", "due", "queued", persistent()).await);
    drop(connection);
    broker.shutdown().await;

    // Without the vhost in the configuration the queue is kept on disk; the vhost is then
    // added at runtime and the queue declared again.
    let broker = start(false).await.expect("starts");
    let http = broker.http_addr().expect("HTTP");
    let check = get(http, "/api/health/checks/definitions", GUEST).await;
    assert_eq!(check.status, 503, "{}", check.text());
    let added = put(http, "/api/vhosts/tenant", GUEST, serde_json::json!({})).await;
    assert_eq!(added.status, 201, "{}", added.text());
    let everything = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
    let granted = put(http, "/api/permissions/tenant/guest", GUEST, everything).await;
    assert!(granted.status < 300, "{}", granted.text());
    let (connection, ch) = tenant_channel(&broker).await;
    let declared = ch
        .queue_declare(
            "due".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declared");
    assert_eq!(declared.message_count(), 1, "its kept message is back");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish(&ch, "amq.direct", "k", "bound", persistent()).await);
    assert_eq!(
        broker.queue_info("tenant", "due").map(|q| q.messages),
        Some(2),
        "its kept binding is back"
    );
    let check = get(http, "/api/health/checks/definitions", GUEST).await;
    assert_eq!(check.status, 200, "{}", check.text());
    drop(connection);
    broker.shutdown().await;

    let broker = start(false).await.expect("starts");
    let (_connection, ch) = tenant_channel(&broker).await;
    assert_eq!(bodies(&ch, "due").await, ["queued", "bound"]);
    broker.shutdown().await;
}
