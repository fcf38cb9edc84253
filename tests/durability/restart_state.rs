//! What a restart on the same data directory brings back exactly, through a real client:
//! the `redelivered` flag (set only for messages delivered before the restart), a quorum
//! queue's delivery counts, delayed retries at their times, TTL deadlines (and messages that
//! expired while the broker was down, dead-lettered at start), runtime users and permissions.

use std::time::Duration;

use crate::common::*;
use dwellmq::{Broker, BrokerConfig, BrokerHandle, UserConfig};
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use serde_json::json;

/// A broker on `dir` whose manual clock starts at `start_ms`.
async fn start_at(dir: &DataDir, start_ms: u64) -> BrokerHandle {
    let config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    Broker::start(config).await.expect("broker starts")
}

async fn confirming_channel(broker: &BrokerHandle) -> (lapin::Connection, Channel) {
    let connection = connect(broker).await;
    let ch = connection.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    (connection, ch)
}

async fn durable_queue(ch: &Channel, name: &str, arguments: &[(&str, AMQPValue)]) {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        table(arguments),
    )
    .await
    .expect("queue declared");
}

/// Publishes a persistent message with confirms; panics unless it is acked.
async fn publish_persistent(ch: &Channel, exchange: &str, key: &str, body: &str) {
    publish_persistent_with(ch, exchange, key, body, BasicProperties::default()).await;
}

async fn publish_persistent_with(
    ch: &Channel,
    exchange: &str,
    key: &str,
    body: &str,
    properties: BasicProperties,
) {
    let confirm = ch
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            properties.with_delivery_mode(2),
        )
        .confirmed()
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "{body} confirmed");
}

/// `basic.get` with acks: the message, left unacked.
async fn get(ch: &Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    ch.basic_get(queue.into(), BasicGetOptions { no_ack: false })
        .await
        .expect("basic.get")
}

fn header_int(props: &BasicProperties, name: &str) -> Option<i64> {
    match props.headers().as_ref()?.inner().get(name)? {
        AMQPValue::LongLongInt(n) => Some(*n),
        other => panic!("{name} is {other:?}"),
    }
}

fn quorum(entries: &[(&'static str, AMQPValue)]) -> Vec<(&'static str, AMQPValue)> {
    let mut all = vec![("x-queue-type", long_str("quorum"))];
    all.extend(entries.iter().cloned());
    all
}

#[tokio::test]
async fn only_messages_delivered_before_a_restart_come_back_redelivered() {
    let dir = DataDir::new("redelivered");
    let broker = start_at(&dir, T0_MS).await;
    let (connection, ch) = confirming_channel(&broker).await;
    durable_queue(&ch, "backlog", &[]).await;
    durable_queue(&ch, "live", &[]).await;
    for body in ["a", "b", "c"] {
        publish_persistent(&ch, "", "backlog", body).await;
    }
    let consumers = connection.create_channel().await.unwrap();
    consumers
        .basic_qos(1, BasicQosOptions::default())
        .await
        .unwrap();
    // Delivered from the backlog (a state write records it), not acked.
    let mut backlog = consume(&consumers, "backlog", "b", false).await;
    let first = next_delivery(&mut backlog).await;
    assert_eq!((body(&first).as_str(), first.redelivered), ("a", false));
    // Published to a waiting consumer (its persist records the delivery), not acked; the
    // next one waits behind it.
    let mut live = consume(&consumers, "live", "l", false).await;
    publish_persistent(&ch, "", "live", "x").await;
    assert_eq!(body(&next_delivery(&mut live).await), "x");
    publish_persistent(&ch, "", "live", "y").await;
    sync(&consumers).await;
    broker.shutdown().await;

    let broker = start_at(&dir, T0_MS).await;
    let (_connection, ch) = confirming_channel(&broker).await;
    let expected = |pairs: &[(&str, bool)]| -> Vec<(String, bool)> {
        pairs.iter().map(|&(b, r)| (b.to_string(), r)).collect()
    };
    assert_eq!(
        drain_with_get(&ch, "backlog").await,
        expected(&[("a", true), ("b", false), ("c", false)])
    );
    assert_eq!(
        drain_with_get(&ch, "live").await,
        expected(&[("x", true), ("y", false)])
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_quorum_queue_continues_its_delivery_count_across_a_restart() {
    let dir = DataDir::new("delivery-count");
    let broker = start_at(&dir, T0_MS).await;
    let (_connection, ch) = confirming_channel(&broker).await;
    let limit = quorum(&[("x-delivery-limit", AMQPValue::LongLongInt(2))]);
    durable_queue(&ch, "work", &limit).await;
    publish_persistent(&ch, "", "work", "job").await;
    for _ in 0..2 {
        let message = get(&ch, "work").await.expect("job ready");
        message
            .delivery
            .reject(BasicRejectOptions { requeue: true })
            .await
            .unwrap();
    }
    sync(&ch).await;
    broker.shutdown().await;

    let broker = start_at(&dir, T0_MS).await;
    let (_connection, ch) = confirming_channel(&broker).await;
    let message = get(&ch, "work").await.expect("job back");
    let props = &message.delivery.properties;
    assert!(message.delivery.redelivered);
    assert_eq!(header_int(props, "x-delivery-count"), Some(2));
    assert_eq!(header_int(props, "x-acquired-count"), Some(2));
    // The third failure passes the limit of 2: the count went on from the stored one.
    message
        .delivery
        .reject(BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    sync(&ch).await;
    assert!(get(&ch, "work").await.is_none(), "dropped past its limit");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_delayed_retry_waits_across_a_restart_until_its_time() {
    let dir = DataDir::new("retry");
    let broker = start_at(&dir, T0_MS).await;
    let (_connection, ch) = confirming_channel(&broker).await;
    let retry = |ms: i64| {
        quorum(&[
            ("x-delayed-retry-type", long_str("failed")),
            ("x-delayed-retry-min", AMQPValue::LongLongInt(ms)),
        ])
    };
    durable_queue(&ch, "later", &retry(10_000)).await;
    durable_queue(&ch, "overdue", &retry(2_000)).await;
    for queue in ["later", "overdue"] {
        publish_persistent(&ch, "", queue, queue).await;
        let message = get(&ch, queue).await.expect("ready");
        message
            .delivery
            .reject(BasicRejectOptions { requeue: true })
            .await
            .unwrap();
    }
    sync(&ch).await;
    assert!(get(&ch, "later").await.is_none(), "waiting for its retry");
    broker.shutdown().await;

    // Back 4 s later: "overdue" was due at +2 s (ready at once), "later" is due at +10 s.
    let broker = start_at(&dir, T0_MS + 4_000).await;
    let (_connection, ch) = confirming_channel(&broker).await;
    let overdue = get(&ch, "overdue").await.expect("released at start");
    assert_eq!(
        header_int(&overdue.delivery.properties, "x-delivery-count"),
        Some(1)
    );
    assert!(get(&ch, "later").await.is_none());
    broker.advance(Duration::from_millis(5_999));
    assert!(get(&ch, "later").await.is_none(), "not before its time");
    broker.advance(Duration::from_millis(1));
    let later = get(&ch, "later").await.expect("released at its time");
    assert_eq!(body(&later.delivery), "later");
    assert_eq!(
        header_int(&later.delivery.properties, "x-delivery-count"),
        Some(1)
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn ttl_continues_across_a_restart_and_what_expired_meanwhile_is_dead_lettered() {
    let dir = DataDir::new("ttl");
    let broker = start_at(&dir, T0_MS).await;
    let (_connection, ch) = confirming_channel(&broker).await;
    // A named dead-letter exchange: its binding is restored after the queues.
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    durable_queue(&ch, "dead", &[]).await;
    ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    durable_queue(
        &ch,
        "ttl",
        &[
            ("x-message-ttl", AMQPValue::LongLongInt(10_000)),
            ("x-dead-letter-exchange", long_str("dlx")),
        ],
    )
    .await;
    publish_persistent(&ch, "", "ttl", "queue ttl").await;
    publish_persistent_with(
        &ch,
        "",
        "ttl",
        "message ttl",
        BasicProperties::default().with_expiration("3000".into()),
    )
    .await;
    broker.shutdown().await;

    // Back 5 s later: "message ttl" expired while the broker was down.
    let broker = start_at(&dir, T0_MS + 5_000).await;
    let (_connection, ch) = confirming_channel(&broker).await;
    assert_eq!(
        drain_with_get(&ch, "dead").await,
        [("message ttl".to_string(), false)]
    );
    // "queue ttl" keeps its deadline: T0 + 10 s.
    broker.advance(Duration::from_millis(4_999));
    assert_eq!(broker.queue_info("/", "ttl").unwrap().messages, 1);
    broker.advance(Duration::from_millis(1));
    assert_eq!(
        drain_with_get(&ch, "dead").await,
        [("queue ttl".to_string(), false)]
    );
    assert!(get(&ch, "ttl").await.is_none());
    broker.shutdown().await;
}

fn amqp_url(broker: &BrokerHandle, user: &str, password: &str) -> String {
    let port = broker.local_addr().port();
    format!("amqp://{user}:{password}@127.0.0.1:{port}/%2f")
}

#[tokio::test]
async fn users_and_permissions_changed_at_runtime_survive_a_restart() {
    let dir = DataDir::new("users");
    let config = || BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        users: vec![
            UserConfig::guest(),
            configured("configured"),
            configured("recreated"),
        ],
        ..BrokerConfig::ephemeral()
    };
    let (broker, addr) = crate::http_client::start_http(config()).await;
    let admin = crate::http_client::GUEST;
    let created = crate::http_client::put(
        addr,
        "/api/users/app",
        admin,
        json!({"password": "app-secret", "tags": "management"}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let granted = crate::http_client::put(
        addr,
        "/api/permissions/%2F/app",
        admin,
        json!({"configure": "^app\\.", "write": ".*", "read": ".*"}),
    )
    .await;
    assert_eq!(granted.status, 201, "{}", granted.text());
    // A configured user deleted at runtime stays deleted.
    let deleted = crate::http_client::delete(addr, "/api/users/configured", admin).await;
    assert_eq!(deleted.status, 204, "{}", deleted.text());
    // Deleted and created again: a new password, and none of its configured permissions.
    crate::http_client::delete(addr, "/api/users/recreated", admin).await;
    let again = crate::http_client::put(
        addr,
        "/api/users/recreated",
        admin,
        json!({"password": "new", "tags": ""}),
    )
    .await;
    assert_eq!(again.status, 201, "{}", again.text());
    broker.shutdown().await;

    let (broker, addr) = crate::http_client::start_http(config()).await;
    let app = connect_url(&amqp_url(&broker, "app", "app-secret"))
        .await
        .expect("app logs in with its password after the restart");
    round_trip(&app, "app.jobs").await;
    let ch = app.create_channel().await.unwrap();
    let refused = ch
        .queue_declare(
            "other".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("configure is still ^app\\.");
    assert_eq!(amqp_error(&refused).0, 403);
    assert!(connect_url(&amqp_url(&broker, "app", "wrong"))
        .await
        .is_err());
    let shown = crate::http_client::get(addr, "/api/users/app", admin)
        .await
        .json();
    assert_eq!(shown["tags"], json!(["management"]));
    assert!(
        connect_url(&amqp_url(&broker, "configured", "cfg"))
            .await
            .is_err(),
        "deleted at runtime, not brought back by the configuration"
    );
    assert_eq!(
        crate::http_client::get(addr, "/api/users/configured", admin)
            .await
            .status,
        404
    );
    let refused = connect_url(&amqp_url(&broker, "recreated", "new"))
        .await
        .expect_err("its configured permission in / stays cleared");
    assert_eq!(
        amqp_error(&refused).1,
        "NOT_ALLOWED - access to vhost '/' refused for user 'recreated'"
    );
    assert!(connect_url(&amqp_url(&broker, "recreated", "cfg"))
        .await
        .is_err());
    broker.shutdown().await;
}

/// A user the configuration defines, with full permissions in `/`.
fn configured(name: &str) -> UserConfig {
    UserConfig {
        name: name.into(),
        password: "cfg".into(),
        password_hash: None,
        vhosts: vec!["/".into()],
        loopback_only: false,
        tags: Vec::new(),
    }
}
