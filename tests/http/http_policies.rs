//! Policies over HTTP and in definitions, and the dead-letter counters in /metrics.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use crate::http_client::*;
use dwellmq::BrokerConfig;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::json;

async fn start_api() -> (TestBroker, SocketAddr) {
    let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let broker = start_with(config).await;
    let addr = broker.broker.http_addr().expect("HTTP on");
    (broker, addr)
}

#[tokio::test]
async fn a_policy_is_set_listed_applied_and_deleted_over_http() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    declare_queue(&ch, "logs.app").await;
    let body = json!({
        "pattern": "^logs\\.",
        "apply-to": "queues",
        "priority": 1,
        "definition": {"max-length": 1},
    });
    let created = put(addr, "/api/policies/%2F/cap", GUEST, body.clone()).await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(
        put(addr, "/api/policies/%2F/cap", GUEST, body).await.status,
        204
    );
    let shown = get(addr, "/api/policies/%2F/cap", GUEST).await.json();
    assert_eq!(shown["pattern"], "^logs\\.");
    assert_eq!(shown["apply-to"], "queues");
    assert_eq!(shown["definition"], json!({"max-length": 1}));
    assert_eq!(
        get(addr, "/api/policies", GUEST).await.json()[0]["name"],
        "cap"
    );
    for body in ["a", "b"] {
        ch.basic_publish(
            "".into(),
            "logs.app".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    sync(&ch).await;
    assert_eq!(
        passive_declare(&ch, "logs.app")
            .await
            .unwrap()
            .message_count(),
        1
    );
    let refused = put(
        addr,
        "/api/policies/%2F/bad",
        GUEST,
        json!({"pattern": ".*", "definition": {"message-ttl": -1}}),
    )
    .await;
    assert_eq!(
        refused.error(400),
        "Validation failed: -1 is not a valid message-ttl"
    );
    assert_eq!(
        delete(addr, "/api/policies/%2F/cap", GUEST).await.status,
        204
    );
    assert_eq!(
        delete(addr, "/api/policies/%2F/cap", GUEST).await.status,
        404
    );
    assert!(t.broker.policies("/").is_empty());
}

#[tokio::test]
async fn policies_travel_in_definitions() {
    let (t, addr) = start_api().await;
    let imported = post(
        addr,
        "/api/definitions",
        GUEST,
        json!({
            "policies": [{
                "vhost": "/",
                "name": "delayed-retry",
                "pattern": "^orders\\.",
                "apply-to": "quorum_queues",
                "priority": 0,
                "definition": {
                    "delivery-limit": 20,
                    "delayed-retry-type": "failed",
                    "delayed-retry-min": 30000,
                    "delayed-retry-max": 120000
                }
            }]
        }),
    )
    .await;
    assert_eq!(imported.status, 204, "{}", imported.text());
    assert_eq!(t.broker.policies("/").len(), 1);
    let exported = get(addr, "/api/definitions", GUEST).await.json();
    let policy = &exported["policies"][0];
    assert_eq!(policy["name"], "delayed-retry");
    assert_eq!(policy["vhost"], "/");
    assert_eq!(policy["definition"]["delayed-retry-max"], 120_000);
}

#[tokio::test]
async fn metrics_count_dead_lettered_discarded_and_expired_messages() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    declare_queue(&ch, "dead").await;
    let mut args = FieldTable::default();
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(10));
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString("dead".into()),
    );
    ch.queue_declare("work".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    let mut ttl_only = FieldTable::default();
    ttl_only.insert("x-message-ttl".into(), AMQPValue::LongInt(10));
    ch.queue_declare("lossy".into(), QueueDeclareOptions::default(), ttl_only)
        .await
        .unwrap();
    for queue in ["work", "lossy"] {
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            b"m",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    sync(&ch).await;
    t.broker.advance(Duration::from_millis(10));
    let text = get(addr, "/metrics", As::Nobody).await.text();
    for line in [
        "dwellmq_dead_lettered_total{reason=\"expired\"} 1",
        "dwellmq_discarded_total{reason=\"expired\"} 1",
        "dwellmq_dead_lettered_total{reason=\"rejected\"} 0",
        "dwellmq_expired_total 2",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "{line} missing from\n{text}"
        );
    }
}
