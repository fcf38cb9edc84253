//! An exchange's `user_who_performed_action`, as RabbitMQ 3.10 writes it: the user who declared
//! it (over AMQP the connection's, over HTTP the authenticated one, for a definitions import
//! the importing one), `rmq-internal` for the broker's own (the predeclared exchanges, a
//! definitions file at start), and a redeclare leaves it as it was.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use crate::common::DataDir;
use crate::http_client::*;
use dwellmq::{BrokerConfig, BrokerHandle, UserConfig};
use lapin::options::ExchangeDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties, ExchangeKind};
use serde_json::{json, Value};

/// Every AMQP step of these tests is bounded: a broker that stops answering fails the test.
async fn bounded<T>(what: &str, step: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), step)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 10 s"))
}

/// A user who may configure everything in `/`, with the `management` tag (HTTP) or none.
fn user(name: &str, tags: &[&str]) -> UserConfig {
    UserConfig {
        name: name.into(),
        password: "pw".into(),
        password_hash: None,
        vhosts: vec!["/".into()],
        loopback_only: false,
        tags: tags.iter().map(|t| t.to_string()).collect(),
    }
}

/// guest (administrator), `alice` (AMQP only), `bob` (management).
fn config() -> BrokerConfig {
    let mut config = BrokerConfig::ephemeral();
    config.users.push(user("alice", &[]));
    config.users.push(user("bob", &["management"]));
    config
}

/// Declares a durable direct exchange over AMQP as `name`/`pw`.
async fn declare_over_amqp(broker: &BrokerHandle, name: &str, exchange: &str) {
    let url = broker
        .amqp_url()
        .replacen("amqp://", &format!("amqp://{name}:pw@"), 1);
    let conn = bounded(
        "connect",
        Connection::connect(&format!("{url}/%2f"), ConnectionProperties::default()),
    )
    .await
    .expect("connects");
    let ch = bounded("channel", conn.create_channel())
        .await
        .expect("channel");
    let options = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    bounded(
        "exchange.declare",
        ch.exchange_declare(
            exchange.into(),
            ExchangeKind::Direct,
            options,
            FieldTable::default(),
        ),
    )
    .await
    .expect("declared");
    bounded("close", conn.close(200, "bye".into()))
        .await
        .expect("closed");
}

async fn declared_by(addr: SocketAddr, exchange: &str) -> Value {
    let reply = get(addr, &format!("/api/exchanges/%2F/{exchange}"), GUEST).await;
    assert_eq!(reply.status, 200, "{exchange}: {}", reply.text());
    reply.json()["user_who_performed_action"].clone()
}

#[tokio::test]
async fn the_declaring_user_is_recorded_over_amqp_and_http() {
    let (broker, addr) = start_http(config()).await;
    declare_over_amqp(&broker, "alice", "by-alice").await;
    let bob = As::User("bob", "pw");
    let reply = put(
        addr,
        "/api/exchanges/%2F/by-bob",
        bob,
        json!({"type": "topic"}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());

    assert_eq!(declared_by(addr, "by-alice").await, "alice");
    assert_eq!(declared_by(addr, "by-bob").await, "bob");
    assert_eq!(declared_by(addr, "amq.direct").await, "rmq-internal");
    // The list shows the same.
    let all = get(addr, "/api/exchanges/%2F", GUEST).await.json();
    let listed = |name: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {all}"))["user_who_performed_action"]
            .clone()
    };
    assert_eq!(listed("by-alice"), "alice");
    assert_eq!(listed("by-bob"), "bob");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_redeclare_by_another_user_leaves_the_first_declarer() {
    let (broker, addr) = start_http(config()).await;
    declare_over_amqp(&broker, "alice", "shared").await;
    let bob = As::User("bob", "pw");
    let body = json!({"type": "direct", "durable": true});
    let reply = put(addr, "/api/exchanges/%2F/shared", bob, body).await;
    assert_eq!(
        reply.status,
        204,
        "an equivalent one exists: {}",
        reply.text()
    );
    assert_eq!(declared_by(addr, "shared").await, "alice");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_definitions_import_declares_as_the_importing_user_a_file_at_start_as_the_broker() {
    let dir = DataDir::new("exchange-declarer-definitions");
    std::fs::create_dir_all(dir.path()).unwrap();
    let file = dir.path().join("definitions.json");
    let definitions = |name: &str| {
        json!({"exchanges": [{"name": name, "vhost": "/", "type": "fanout", "durable": true,
            "auto_delete": false, "internal": false, "arguments": {}}]})
    };
    std::fs::write(&file, definitions("from-file").to_string()).unwrap();
    let mut config = config();
    config.users.push(user("carol", &["administrator"]));
    config.definitions = Some(file);
    let (broker, addr) = start_http(config).await;
    assert_eq!(declared_by(addr, "from-file").await, "rmq-internal");

    let carol = As::User("carol", "pw");
    let reply = post(addr, "/api/definitions", carol, definitions("imported")).await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    assert_eq!(declared_by(addr, "imported").await, "carol");
    let reply = post(
        addr,
        "/api/definitions/%2F",
        carol,
        definitions("per-vhost"),
    )
    .await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    assert_eq!(declared_by(addr, "per-vhost").await, "carol");
    broker.shutdown().await;
}

/// The store's exchange record keeps the declarer (store format 5), as RabbitMQ's does: a
/// durable exchange restored at start still shows its user (one restored from a record of an
/// earlier format shows RabbitMQ's `unknown`).
#[tokio::test]
async fn a_restored_exchange_keeps_its_declarer() {
    let dir = DataDir::new("exchange-declarer-restart");
    let mut config = config();
    config.data_dir = Some(dir.path().to_path_buf());
    let (broker, addr) = start_http(config).await;
    declare_over_amqp(&broker, "alice", "durable-one").await;
    assert_eq!(declared_by(addr, "durable-one").await, "alice");
    let broker = bounded("restart", broker.restart())
        .await
        .expect("restarts");
    let addr = broker.http_addr().expect("HTTP on");
    assert_eq!(declared_by(addr, "durable-one").await, "alice");
    assert_eq!(declared_by(addr, "amq.topic").await, "rmq-internal");
    broker.shutdown().await;
}
