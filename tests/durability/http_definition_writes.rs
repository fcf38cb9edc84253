//! Definition writes over HTTP are answered after their commit, as RabbitMQ answers after its
//! metadata store: a 2xx means on disk. A write that fails is answered with RabbitMQ's JSON
//! error (500) and leaves nothing in memory that a restart would not have.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::common::{eventually, DataDir, T0_MS};
use crate::http_client::{delete, get, post, put, start_http, GUEST};
use dwellmq::{BrokerConfig, BrokerHandle, StoreFaults};
use serde_json::{json, Value};

async fn start(dir: &DataDir, faults: &Arc<StoreFaults>) -> (BrokerHandle, std::net::SocketAddr) {
    start_http(BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        store_faults: Some(Arc::clone(faults)),
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    })
    .await
}

fn max_length(n: u64, priority: i64) -> Value {
    json!({
        "pattern": "^capped$",
        "apply-to": "queues",
        "priority": priority,
        "definition": {"max-length": n},
    })
}

/// The `max-length` of the policy `name` as the API shows it; `None` if there is none.
async fn max_length_of(addr: std::net::SocketAddr, name: &str) -> Option<u64> {
    let reply = get(addr, &format!("/api/policies/%2F/{name}"), GUEST).await;
    if reply.status == 404 {
        return None;
    }
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["definition"]["max-length"].as_u64()
}

/// Publishes `n` transient messages to `capped` over HTTP.
async fn publish(addr: std::net::SocketAddr, n: usize) {
    for i in 0..n {
        let body = json!({
            "properties": {},
            "routing_key": "capped",
            "payload": format!("m{i}"),
            "payload_encoding": "string",
        });
        let reply = post(addr, "/api/exchanges/%2F/amq.default/publish", GUEST, body).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }
}

async fn writes_fail(broker: &BrokerHandle, faults: &StoreFaults, fail: bool) {
    faults.fail_writes.store(fail, Ordering::SeqCst);
    if !fail {
        eventually("the disk alarm clears", || !broker.disk_alarm()).await;
    }
}

/// A policy `PUT` whose commit fails is answered with a 500 and is not in effect: a new policy
/// is not there, a replaced one is in effect again (queues follow it); one that succeeds
/// survives a restart. Before, the answer came before the commit (201/204 for a policy that a
/// restart would not have) and the failed one stayed in effect.
#[tokio::test]
async fn a_policy_whose_write_fails_is_answered_with_an_error_and_not_in_effect() {
    let dir = DataDir::new("http-policy-write");
    let faults = Arc::new(StoreFaults::default());
    let (broker, addr) = start(&dir, &faults).await;
    let set = put(addr, "/api/policies/%2F/cap", GUEST, max_length(1, 0)).await;
    assert_eq!(set.status, 201, "{}", set.text());
    let declared = put(
        addr,
        "/api/queues/%2F/capped",
        GUEST,
        json!({"durable": true}),
    )
    .await;
    assert_eq!(declared.status, 201, "{}", declared.text());

    writes_fail(&broker, &faults, true).await;
    let replaced = put(addr, "/api/policies/%2F/cap", GUEST, max_length(5, 0)).await;
    assert_eq!(replaced.status, 500, "{}", replaced.text());
    assert!(
        replaced.text().contains("could not be written"),
        "{}",
        replaced.text()
    );
    let added = put(addr, "/api/policies/%2F/wide", GUEST, max_length(10, 9)).await;
    assert_eq!(added.status, 500, "{}", added.text());
    writes_fail(&broker, &faults, false).await;

    assert_eq!(
        max_length_of(addr, "cap").await,
        Some(1),
        "the replaced one is back"
    );
    assert_eq!(
        max_length_of(addr, "wide").await,
        None,
        "the new one is not there"
    );
    // In effect on the queue too: the limit is the one that was written.
    publish(addr, 3).await;
    assert_eq!(
        broker.queue_info("/", "capped").map(|q| q.messages),
        Some(1)
    );

    let kept = put(addr, "/api/policies/%2F/kept", GUEST, max_length(2, 5)).await;
    assert_eq!(kept.status, 201, "{}", kept.text());
    let broker = broker.restart().await.expect("restarts");
    assert_eq!(max_length_of(addr, "kept").await, Some(2));
    assert_eq!(max_length_of(addr, "cap").await, Some(1));
    assert_eq!(max_length_of(addr, "wide").await, None);
    broker.shutdown().await;
}

/// A policy `DELETE` is answered after its commit; while writes fail the answer says so (500),
/// the removal holds and the store retries it, so the policy does not come back after a
/// restart.
#[tokio::test]
async fn a_policy_deleted_while_writes_fail_stays_deleted_after_a_restart() {
    let dir = DataDir::new("http-policy-delete");
    let faults = Arc::new(StoreFaults::default());
    let (broker, addr) = start(&dir, &faults).await;
    let set = put(addr, "/api/policies/%2F/cap", GUEST, max_length(1, 0)).await;
    assert_eq!(set.status, 201, "{}", set.text());

    writes_fail(&broker, &faults, true).await;
    let deleted = delete(addr, "/api/policies/%2F/cap", GUEST).await;
    assert_eq!(deleted.status, 500, "{}", deleted.text());
    assert_eq!(max_length_of(addr, "cap").await, None);
    writes_fail(&broker, &faults, false).await;

    let broker = broker.restart().await.expect("restarts");
    assert_eq!(max_length_of(addr, "cap").await, None);
    broker.shutdown().await;
}

/// Declares the durable queue `orders` and the durable direct exchange `books` over HTTP.
async fn declare_orders_and_books(
    addr: std::net::SocketAddr,
) -> (crate::http_client::Reply, crate::http_client::Reply) {
    let queue = put(
        addr,
        "/api/queues/%2F/orders",
        GUEST,
        json!({"durable": true}),
    )
    .await;
    let exchange = put(
        addr,
        "/api/exchanges/%2F/books",
        GUEST,
        json!({"type": "direct", "durable": true}),
    )
    .await;
    (queue, exchange)
}

/// Exchanges, queues and bindings declared over HTTP are answered after their commit: a
/// failed one is a 500 and the exchange or queue is not there (taken back, as for a declare
/// over AMQP); ones that succeed survive a restart.
#[tokio::test]
async fn declares_over_http_are_answered_after_their_commit() {
    let dir = DataDir::new("http-declare-write");
    let faults = Arc::new(StoreFaults::default());
    let (broker, addr) = start(&dir, &faults).await;

    writes_fail(&broker, &faults, true).await;
    let (queue, exchange) = declare_orders_and_books(addr).await;
    assert_eq!(queue.status, 500, "{}", queue.text());
    assert_eq!(exchange.status, 500, "{}", exchange.text());
    assert_eq!(get(addr, "/api/queues/%2F/orders", GUEST).await.status, 404);
    assert_eq!(
        get(addr, "/api/exchanges/%2F/books", GUEST).await.status,
        404
    );
    writes_fail(&broker, &faults, false).await;

    let (queue, exchange) = declare_orders_and_books(addr).await;
    assert_eq!(queue.status, 201, "{}", queue.text());
    assert_eq!(exchange.status, 201, "{}", exchange.text());
    let bound = post(
        addr,
        "/api/bindings/%2F/e/books/q/orders",
        GUEST,
        json!({"routing_key": "new"}),
    )
    .await;
    assert_eq!(bound.status, 201, "{}", bound.text());
    let broker = broker.restart().await.expect("restarts");
    assert_eq!(get(addr, "/api/queues/%2F/orders", GUEST).await.status, 200);
    let bindings = get(addr, "/api/bindings/%2F/e/books/q/orders", GUEST).await;
    assert_eq!(bindings.status, 200, "{}", bindings.text());
    assert_eq!(
        bindings.json()[0]["routing_key"],
        "new",
        "{}",
        bindings.text()
    );
    broker.shutdown().await;
}

/// A vhost `PUT` whose commit fails is answered with a 500 and the vhost is not there; a
/// later `PUT` writes it again and it survives a restart. Before, the failed vhost stayed in
/// memory, and the second `PUT` found it and wrote nothing: a restart lost it.
#[tokio::test]
async fn a_vhost_whose_write_fails_is_taken_back_and_written_by_the_next_put() {
    let dir = DataDir::new("http-vhost-write");
    let faults = Arc::new(StoreFaults::default());
    let (broker, addr) = start(&dir, &faults).await;

    writes_fail(&broker, &faults, true).await;
    let added = put(addr, "/api/vhosts/tenant", GUEST, json!({})).await;
    assert_eq!(added.status, 500, "{}", added.text());
    writes_fail(&broker, &faults, false).await;
    let listed = get(addr, "/api/vhosts/tenant", GUEST).await;
    assert_eq!(listed.status, 404, "taken back: {}", listed.text());

    let again = put(addr, "/api/vhosts/tenant", GUEST, json!({})).await;
    assert_eq!(again.status, 201, "{}", again.text());
    let broker = broker.restart().await.expect("restarts");
    let listed = get(addr, "/api/vhosts/tenant", GUEST).await;
    assert_eq!(
        listed.status,
        200,
        "written by the second PUT: {}",
        listed.text()
    );
    broker.shutdown().await;
}

/// A `queue.bind` whose commit fails closes the channel with 506 and the binding is not in
/// effect; a later bind writes it again and it survives a restart. Before, the failed binding
/// stayed in memory and routed messages that a restart would not route.
#[tokio::test]
async fn a_binding_whose_write_fails_is_taken_back_and_written_by_the_next_bind() {
    use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
    use lapin::types::FieldTable;
    let dir = DataDir::new("amqp-binding-write");
    let faults = Arc::new(StoreFaults::default());
    let (broker, addr) = start(&dir, &faults).await;
    let connection = crate::common::connect(&broker).await;
    let ch = connection.create_channel().await.expect("channel");
    ch.exchange_declare(
        "orders".into(),
        lapin::ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("exchange declared");
    ch.queue_declare(
        "billing".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("queue declared");
    let bind = |ch: lapin::Channel| async move {
        ch.queue_bind(
            "billing".into(),
            "orders".into(),
            "new".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
    };
    let bindings = "/api/bindings/%2F/e/orders/q/billing";

    writes_fail(&broker, &faults, true).await;
    let refused = bind(ch)
        .await
        .expect_err("the binding could not be written");
    assert_eq!(crate::common::amqp_error(&refused).0, 506);
    writes_fail(&broker, &faults, false).await;
    let listed = get(addr, bindings, GUEST).await;
    assert_eq!(listed.json(), json!([]), "taken back: {}", listed.text());

    let ch = connection.create_channel().await.expect("channel");
    bind(ch).await.expect("bound");
    drop(connection);
    let broker = broker.restart().await.expect("restarts");
    let listed = get(addr, bindings, GUEST).await;
    assert_eq!(listed.json()[0]["routing_key"], "new", "{}", listed.text());
    broker.shutdown().await;
}
