//! The management API's shapes as RabbitMQ 3.10 answers: a queue's byte, memory, consumer
//! and rate fields, a quorum queue's delayed retries (RabbitMQ 4.3's `messages_delayed` and
//! `next_delayed_at`), a vhost's `message_stats`, octets and state, an exchange's `incoming`
//! and `outgoing`, the 401 bodies, and `DELETE /api/vhosts/{name}`.

use std::net::SocketAddr;

use crate::common::*;
use crate::http_client::*;
use dwellmq::BrokerConfig;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use serde_json::{json, Value};

async fn start_api() -> (TestBroker, SocketAddr) {
    let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let broker = start_with(config).await;
    let addr = broker.broker.http_addr().expect("HTTP on");
    (broker, addr)
}

fn assert_fields(value: &Value, fields: &[&str]) {
    for field in fields {
        assert!(value.get(field).is_some(), "{field} missing from {value:#}");
    }
}

fn rate(value: &Value, field: &str) -> f64 {
    value[format!("{field}_details")]["rate"]
        .as_f64()
        .unwrap_or_else(|| panic!("{field}_details.rate missing from {value:#}"))
}

#[tokio::test]
async fn a_queue_shows_bytes_memory_consumers_and_rates() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    // A rate sample of the empty queue; the next one, 5 s of broker time later, sees the
    // depths below (the sampler samples at the manual clock's time).
    t.broker.sample_rates().await;
    for body in [&b"abc"[..], b"defgh"] {
        ch.basic_publish(
            "".into(),
            "q".into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    ch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = ch
        .basic_consume(
            "q".into(),
            "the-consumer".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(next_delivery(&mut consumer).await.data, b"abc");
    sync(&ch).await;
    t.broker.advance(std::time::Duration::from_secs(5));
    t.broker.sample_rates().await;

    let q = get(addr, "/api/queues/%2F/q", GUEST).await.json();
    assert_fields(
        &q,
        &[
            "message_bytes",
            "message_bytes_ready",
            "message_bytes_unacknowledged",
            "message_bytes_persistent",
            "message_bytes_ram",
            "message_bytes_paged_out",
            "messages_persistent",
            "messages_ram",
            "messages_ready_ram",
            "messages_unacknowledged_ram",
            "messages_paged_out",
            "consumer_utilisation",
            "consumer_capacity",
            "consumer_details",
            "deliveries",
            "incoming",
            "message_stats",
        ],
    );
    assert_eq!(q["messages"], 2);
    assert_eq!(q["messages_ready"], 1);
    assert_eq!(q["messages_unacknowledged"], 1);
    assert_eq!(q["message_bytes"], 8);
    assert_eq!(q["message_bytes_ready"], 5);
    assert_eq!(q["message_bytes_unacknowledged"], 3);
    assert_eq!(q["message_bytes_ram"], 8);
    assert_eq!(q["message_bytes_paged_out"], 0);
    assert_eq!(q["messages_ram"], 2);
    assert_eq!(q["messages_ready_ram"], 1);
    assert_eq!(q["messages_unacknowledged_ram"], 1);
    assert_eq!(q["messages_paged_out"], 0);
    // In memory: nothing is persisted.
    assert_eq!(q["messages_persistent"], 0);
    assert_eq!(q["message_bytes_persistent"], 0);
    // A message waits for the consumer (prefetch 1): not at capacity.
    assert_eq!(q["consumer_capacity"], 0.0);
    // Depth rates: the change per second between the two samples (0 to 2, 1 and 1 in 5 s).
    for (field, per_second) in [
        ("messages", 0.4),
        ("messages_ready", 0.2),
        ("messages_unacknowledged", 0.2),
    ] {
        assert_eq!(rate(&q, field), per_second, "{field}");
    }
    let details = q["consumer_details"].as_array().unwrap();
    assert_eq!(details.len(), 1, "{q:#}");
    assert_eq!(details[0]["consumer_tag"], "the-consumer");
    assert_eq!(details[0]["ack_required"], true);
    assert_eq!(details[0]["prefetch_count"], 1);
    assert_eq!(details[0]["queue"], json!({"name": "q", "vhost": "/"}));
    assert_eq!(q["deliveries"], json!([]));
    assert_eq!(q["incoming"], json!([]));
    assert!(
        q.get("messages_delayed").is_none(),
        "classic queues have none"
    );

    // Acked and drained: the consumer keeps up.
    ch.basic_ack(1, BasicAckOptions { multiple: true })
        .await
        .unwrap();
    let second = next_delivery(&mut consumer).await;
    ch.basic_ack(second.delivery_tag, BasicAckOptions::default())
        .await
        .unwrap();
    sync(&ch).await;
    let q = get(addr, "/api/queues/%2F/q", GUEST).await.json();
    assert_eq!(q["message_bytes"], 0);
    assert_eq!(q["consumer_capacity"], 1.0);
    assert_eq!(q["consumer_utilisation"], 1.0);
}

#[tokio::test]
async fn a_quorum_queue_shows_messages_waiting_for_a_delayed_retry() {
    let (t, addr) = start_api().await;
    let reply = put(
        addr,
        "/api/queues/%2F/retry",
        GUEST,
        json!({"durable": true, "arguments": {
            "x-queue-type": "quorum",
            "x-delayed-retry-type": "failed",
            "x-delayed-retry-min": 30000,
            "x-delayed-retry-max": 120000,
        }}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let q = get(addr, "/api/queues/%2F/retry", GUEST).await.json();
    assert_eq!(q["messages_delayed"], 0);
    assert_eq!(q["next_delayed_at"], Value::Null);

    let ch = t.channel().await;
    ch.basic_publish(
        "".into(),
        "retry".into(),
        BasicPublishOptions::default(),
        b"job",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    let got = ch
        .basic_get("retry".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("a message");
    got.delivery
        .reject(BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    sync(&ch).await;
    let q = get(addr, "/api/queues/%2F/retry", GUEST).await.json();
    assert_eq!(q["type"], "quorum");
    assert_eq!(q["messages_delayed"], 1);
    // T0 (2026-01-01T00:00:00Z) plus the 30 s first retry.
    assert_eq!(q["next_delayed_at"], "2026-01-01T00:00:30.000Z");
}

#[tokio::test]
async fn a_vhost_shows_message_stats_octets_and_state() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    sync(&ch).await;
    let vhost = get(addr, "/api/vhosts/%2F", GUEST).await.json();
    assert_fields(
        &vhost,
        &[
            "message_stats",
            "messages_details",
            "messages_ready_details",
            "messages_unacknowledged_details",
            "recv_oct",
            "recv_oct_details",
            "send_oct",
            "send_oct_details",
            "cluster_state",
            "metadata",
        ],
    );
    assert_eq!(
        vhost["cluster_state"],
        json!({"dwellmq@localhost": "running"})
    );
    assert_eq!(vhost["metadata"]["description"], "");
    assert!(vhost["recv_oct"].as_u64().unwrap() > 0, "{vhost:#}");
    assert!(vhost["send_oct"].as_u64().unwrap() > 0, "{vhost:#}");
    assert!(vhost["message_stats"]["publish_details"]["rate"].is_number());
    let listed = get(addr, "/api/vhosts", GUEST).await.json();
    assert_fields(&listed[0], &["message_stats", "recv_oct", "cluster_state"]);
}

#[tokio::test]
async fn an_exchange_shows_incoming_outgoing_and_who_declared_it() {
    let (_t, addr) = start_api().await;
    let x = get(addr, "/api/exchanges/%2F/amq.direct", GUEST)
        .await
        .json();
    assert_eq!(x["incoming"], json!([]));
    assert_eq!(x["outgoing"], json!([]));
    assert_eq!(x["user_who_performed_action"], "rmq-internal");
    let reply = put(
        addr,
        "/api/exchanges/%2F/orders",
        GUEST,
        json!({"type": "topic"}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let all = get(addr, "/api/exchanges/%2F", GUEST).await.json();
    let declared_by = |name: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {all}"))["user_who_performed_action"]
            .clone()
    };
    for predeclared in ["", "amq.direct", "amq.fanout", "amq.topic", "amq.headers"] {
        assert_eq!(declared_by(predeclared), "rmq-internal", "{predeclared:?}");
    }
    // The others show who declared them (`exchange_declarer.rs` has the cases).
    assert_eq!(declared_by("orders"), "guest");
}

#[tokio::test]
async fn unauthenticated_requests_get_rabbitmqs_401_bodies() {
    let (_t, addr) = start_api().await;
    let reply = get(addr, "/api/overview", As::Nobody).await;
    assert_eq!(reply.status, 401);
    assert_eq!(
        reply.json(),
        json!({"error": "not_authorized", "reason": "Not_Authorized"})
    );
    assert_eq!(
        reply.header("www-authenticate"),
        Some("Basic realm=\"RabbitMQ Management\"")
    );
    let reply = get(addr, "/api/overview", As::User("guest", "wrong")).await;
    assert_eq!(
        reply.json(),
        json!({"error": "not_authorized", "reason": "Login failed"})
    );
}

#[tokio::test]
async fn deleting_a_vhost_closes_its_connections_and_drops_what_it_held() {
    let (t, addr) = start_api().await;
    assert_eq!(
        put(addr, "/api/vhosts/doomed", GUEST, json!({}))
            .await
            .status,
        201
    );
    let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
    put(addr, "/api/permissions/doomed/guest", GUEST, everything).await;
    let connection = lapin::Connection::connect(
        &format!("{}/doomed", t.broker.amqp_url()),
        lapin::ConnectionProperties::default(),
    )
    .await
    .expect("connects to doomed");
    let ch = connection.create_channel().await.unwrap();
    declare_queue(&ch, "inside").await;
    assert_eq!(
        get(addr, "/api/queues/doomed/inside", GUEST).await.status,
        200
    );
    // Another vhost's connection stays.
    let survivor = t.channel().await;

    let reply = delete(addr, "/api/vhosts/doomed", GUEST).await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    get(addr, "/api/vhosts/doomed", GUEST).await.error(404);
    get(addr, "/api/queues/doomed/inside", GUEST)
        .await
        .error(404);
    get(addr, "/api/permissions/doomed/guest", GUEST)
        .await
        .error(404);
    delete(addr, "/api/vhosts/doomed", GUEST).await.error(404);
    // The vhost's connection is closed by the server: its channel takes nothing more.
    ch.queue_declare(
        "after".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect_err("the connection is closed");
    assert!(!connection.status().connected());
    sync(&survivor).await;
    let mut doomed_connections = usize::MAX;
    for _ in 0..100 {
        let connections = get(addr, "/api/connections", GUEST).await.json();
        let list = connections.as_array().unwrap();
        doomed_connections = list.iter().filter(|c| c["vhost"] == "doomed").count();
        if doomed_connections == 0 {
            assert_eq!(list.len(), 1, "the survivor stays: {connections:#}");
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(doomed_connections, 0);
}

#[tokio::test]
async fn a_queue_shows_messages_waiting_for_their_ttl() {
    let (t, addr) = start_api().await;
    let reply = put(
        addr,
        "/api/queues/%2F/short",
        GUEST,
        json!({"arguments": {"x-message-ttl": 60000}}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let q = get(addr, "/api/queues/%2F/short", GUEST).await.json();
    assert_eq!(q["messages_expiring"], 0);
    assert_eq!(q["next_expiry_at"], Value::Null);
    let ch = t.channel().await;
    ch.basic_publish(
        "".into(),
        "short".into(),
        BasicPublishOptions::default(),
        b"soon gone",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    sync(&ch).await;
    let q = get(addr, "/api/queues/%2F/short", GUEST).await.json();
    assert_eq!(q["messages_expiring"], 1);
    assert_eq!(q["next_expiry_at"], "2026-01-01T00:01:00.000Z");
}
