//! The test double over HTTP, as a test in another language uses it: the clock, inspection,
//! counters, awaitable conditions and reset, with lapin as the application under test.

use std::net::SocketAddr;

use crate::common::*;
use crate::http_client::*;
use dwellmq::BrokerConfig;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use serde_json::{json, Value};

const DAY_MS: u64 = 24 * 3600 * 1000;

async fn start_api(config: BrokerConfig) -> (TestBroker, SocketAddr) {
    let mut config = config;
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let broker = start_with(config).await;
    let addr = broker.broker.http_addr().expect("HTTP on");
    (broker, addr)
}

/// A delayed exchange `reminders` (direct) bound to queue `due` with key `r`.
async fn reminders(ch: &Channel) {
    ch.exchange_declare(
        "reminders".into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions::default(),
        table(&[("x-delayed-type", long_str("direct"))]),
    )
    .await
    .unwrap();
    declare_queue(ch, "due").await;
    ch.queue_bind(
        "due".into(),
        "reminders".into(),
        "r".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

async fn publish_delayed(ch: &Channel, body: &str, delay_ms: u64) {
    let headers = table(&[("x-delay", AMQPValue::LongLongInt(delay_ms as i64))]);
    publish_with(
        ch,
        "reminders",
        "r",
        body.as_bytes(),
        BasicProperties::default().with_headers(headers),
    )
    .await;
}

async fn ok_json(reply: Reply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

#[tokio::test]
async fn a_day_long_delay_is_delivered_by_advancing_the_clock_over_http() {
    let (t, addr) = start_api(BrokerConfig::ephemeral().with_manual_clock(T0_MS)).await;
    let ch = t.channel().await;
    reminders(&ch).await;
    let mut consumer = consume_no_ack(&ch, "due").await;
    publish_delayed(&ch, "call mum", DAY_MS).await;
    sync(&ch).await;

    let clock = ok_json(get(addr, "/test/clock", GUEST).await).await;
    assert_eq!(clock["manual"], true);
    assert_eq!(clock["now_ms"], T0_MS);
    assert_eq!(clock["now"], "2026-01-01T00:00:00.000Z");

    let held = ok_json(get(addr, "/test/exchanges/%2F/reminders/held", GUEST).await).await;
    assert_eq!(held["count"], 1);
    assert_eq!(held["next_due_ms"], T0_MS + DAY_MS);
    assert_eq!(held["messages"][0]["due"], "2026-01-02T00:00:00.000Z");

    // Not yet: a millisecond short of the day.
    let moved = post(
        addr,
        "/test/clock/advance",
        GUEST,
        json!({"ms": DAY_MS - 1}),
    )
    .await;
    assert_eq!(ok_json(moved).await["released"], 0);
    let moved = post(
        addr,
        "/test/clock/advance",
        GUEST,
        json!({"to": "2026-01-02T00:00:00Z"}),
    )
    .await;
    let moved = ok_json(moved).await;
    assert_eq!(moved["released"], 1);
    assert_eq!(moved["now_ms"], T0_MS + DAY_MS);
    // The advance answered once the delivery was written to the socket.
    assert_eq!(next_body(&mut consumer).await, "call mum");
}

#[tokio::test]
async fn the_clock_is_refused_without_a_manual_clock_and_never_goes_back() {
    let (_t, addr) = start_api(BrokerConfig::ephemeral()).await;
    let clock = ok_json(get(addr, "/test/clock", GUEST).await).await;
    assert_eq!(clock["manual"], false);
    let refused = post(addr, "/test/clock/advance", GUEST, json!({"ms": 1000})).await;
    assert_eq!(refused.status, 409, "{}", refused.text());
    assert_eq!(refused.json()["error"], "no_manual_clock");

    let (_t, addr) = start_api(BrokerConfig::ephemeral().with_manual_clock(T0_MS)).await;
    let back = post(addr, "/test/clock/advance", GUEST, json!({"to": 0})).await;
    assert_eq!(back.status, 400);
    assert!(back.json()["reason"]
        .as_str()
        .unwrap()
        .contains("never goes back"));
    let bad = post(
        addr,
        "/test/clock/advance",
        GUEST,
        json!({"to": "tomorrow"}),
    )
    .await;
    assert_eq!(bad.status, 400);
    let both = post(
        addr,
        "/test/clock/advance",
        GUEST,
        json!({"ms": 1, "to": 5}),
    )
    .await;
    assert_eq!(both.status, 400);
    let anonymous = post(addr, "/test/clock/advance", As::Nobody, json!({"ms": 1})).await;
    assert_eq!(anonymous.status, 401);
}

#[tokio::test]
async fn a_queue_shows_its_counts_held_messages_and_a_peek_with_x_death() {
    let (t, addr) = start_api(BrokerConfig::ephemeral().with_manual_clock(T0_MS)).await;
    let ch = t.channel().await;
    // `short` expires its messages into `dead` after a second.
    declare_queue(&ch, "dead").await;
    declare_with(
        &ch,
        "short",
        QueueDeclareOptions::default(),
        table(&[
            ("x-message-ttl", AMQPValue::LongLongInt(1000)),
            ("x-dead-letter-exchange", long_str("")),
            ("x-dead-letter-routing-key", long_str("dead")),
        ]),
    )
    .await
    .unwrap();
    let headers = table(&[("app", long_str("billing"))]);
    publish_with(
        &ch,
        "",
        "short",
        b"invoice",
        BasicProperties::default()
            .with_headers(headers)
            .with_content_type("text/plain".into()),
    )
    .await;
    sync(&ch).await;

    let short = ok_json(get(addr, "/test/queues/%2F/short", GUEST).await).await;
    assert_eq!(short["ready"], 1);
    assert_eq!(short["held"]["ttl"], 1);
    assert_eq!(short["next_due_ms"]["ttl"], T0_MS + 1000);
    assert_eq!(short["messages"][0]["payload"], "invoice");
    assert_eq!(
        short["messages"][0]["properties"]["headers"]["app"],
        "billing"
    );
    assert_eq!(short["messages"][0]["expires_in_ms"], 1000);

    ok_json(post(addr, "/test/clock/advance", GUEST, json!({"ms": 1000})).await).await;
    let dead = ok_json(get(addr, "/test/queues/%2F/dead?peek=5", GUEST).await).await;
    assert_eq!(dead["ready"], 1);
    let death = &dead["messages"][0]["properties"]["headers"]["x-death"][0];
    assert_eq!(death["queue"], "short");
    assert_eq!(death["reason"], "expired");
    assert_eq!(death["count"], 1);
    // Peeking leaves the message where it was; Rust sees the same.
    assert_eq!(ready(&t, "dead"), 1);
    let peeked = t.broker.peek_messages("/", "dead", 10);
    assert_eq!(peeked.len(), 1);
    assert_eq!(peeked[0].body, b"invoice");
    assert!(peeked[0]
        .properties
        .headers
        .as_ref()
        .unwrap()
        .contains_key("x-death"));

    let counters = ok_json(get(addr, "/test/counters", GUEST).await).await;
    assert_eq!(counters["published"], 1);
    assert_eq!(counters["routed"], 1);
    assert_eq!(counters["expired"], 1);
    assert_eq!(counters["dead_lettered"]["expired"], 1);

    assert_eq!(get(addr, "/test/queues/%2F/nope", GUEST).await.status, 404);
    assert_eq!(
        get(addr, "/test/exchanges/%2F/amq.direct/held", GUEST)
            .await
            .status,
        404,
        "only delayed exchanges hold messages"
    );
}

#[tokio::test]
async fn counters_count_confirms_returns_unroutables_and_redeliveries() {
    let (t, addr) = start_api(BrokerConfig::ephemeral()).await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for key in ["q", "q", "nowhere"] {
        ch.basic_publish(
            "".into(),
            key.into(),
            BasicPublishOptions::default(),
            b"m",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    ch.basic_publish(
        "".into(),
        "nowhere".into(),
        BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        },
        b"m",
        BasicProperties::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    // One message delivered, rejected with requeue, delivered again.
    let consumer_ch = t.channel().await;
    let mut consumer = consume(&consumer_ch, "q", "c", false).await;
    let first = next_delivery(&mut consumer).await;
    first
        .reject(BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    let again = loop {
        let d = next_delivery(&mut consumer).await;
        if d.redelivered {
            break d;
        }
    };
    again.ack(BasicAckOptions::default()).await.unwrap();
    sync(&consumer_ch).await;

    let c = ok_json(get(addr, "/test/counters", GUEST).await).await;
    assert_eq!(c["published"], 4);
    assert_eq!(c["routed"], 2);
    assert_eq!(c["unroutable"], 1);
    assert_eq!(c["returned"], 1);
    assert_eq!(c["confirmed"], 4);
    assert_eq!(c["nacked"], 0);
    assert_eq!(c["redelivered"], 1);
    assert_eq!(t.broker.counters().redelivered, 1);
}

#[tokio::test]
async fn wait_answers_when_the_condition_holds_or_says_what_it_saw() {
    let (t, addr) = start_api(BrokerConfig::ephemeral()).await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    fill(&ch, "q", &["a", "b"]).await;
    let ok = post(
        addr,
        "/test/wait",
        GUEST,
        json!({"condition": "ready", "queue": "q", "count": 2, "timeout_ms": 1000}),
    )
    .await;
    assert_eq!(ok_json(ok).await["seen"], "2 ready");
    let idle = post(addr, "/test/wait", GUEST, json!({"condition": "idle"})).await;
    assert_eq!(idle.status, 200, "{}", idle.text());

    let timeout = post(
        addr,
        "/test/wait",
        GUEST,
        json!({"condition": "consumers", "queue": "q", "count": 1, "timeout_ms": 20}),
    )
    .await;
    assert_eq!(timeout.status, 408, "{}", timeout.text());
    let reason = timeout.json()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("last seen: 0 consumers"), "{reason}");

    let missing = post(
        addr,
        "/test/wait",
        GUEST,
        json!({"condition": "ready", "queue": "gone", "count": 0, "timeout_ms": 10}),
    )
    .await;
    assert!(missing.json()["reason"]
        .as_str()
        .unwrap()
        .contains("no queue 'gone'"));
    let unknown = post(addr, "/test/wait", GUEST, json!({"condition": "sunny"})).await;
    assert_eq!(unknown.status, 400);
}

#[tokio::test]
async fn reset_empties_the_broker_or_restores_the_fixture() {
    let dir = std::env::temp_dir().join(format!("dwellmq-reset-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fixture = dir.join("defs.json");
    std::fs::write(
        &fixture,
        json!({
            "queues": [{"name": "orders", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}}],
            "exchanges": [{"name": "shop", "vhost": "/", "type": "topic", "durable": true, "auto_delete": false, "internal": false, "arguments": {}}],
            "bindings": [{"source": "shop", "vhost": "/", "destination": "orders", "destination_type": "queue", "routing_key": "order.*", "arguments": {}}]
        })
        .to_string(),
    )
    .unwrap();
    let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
    config.definitions = Some(fixture);
    let (t, addr) = start_api(config).await;
    let ch = t.channel().await;
    declare_queue(&ch, "scratch").await;
    reminders(&ch).await;
    publish_delayed(&ch, "later", 60_000).await;
    publish(&ch, "shop", "order.new", "o1").await;
    sync(&ch).await;
    assert_eq!(t.broker.delayed_total(), 1);
    assert_eq!(ready(&t, "orders"), 1);

    let reset = ok_json(post(addr, "/test/reset", GUEST, json!({})).await).await;
    assert_eq!(reset["fixture"], true);
    assert_eq!(t.broker.queue_names("/"), vec!["orders".to_string()]);
    assert_eq!(ready(&t, "orders"), 0, "the fixture's queue starts empty");
    assert_eq!(t.broker.delayed_total(), 0);
    assert!(!t
        .broker
        .exchange_names("/")
        .contains(&"reminders".to_string()));
    assert_eq!(t.broker.counters().published, 0);
    // The fixture's binding is back.
    publish(&ch, "shop", "order.paid", "o2").await;
    sync(&ch).await;
    assert_eq!(ready(&t, "orders"), 1);

    let reset = ok_json(post(addr, "/test/reset", GUEST, json!({"to": "empty"})).await).await;
    assert_eq!(reset["queues_removed"], 1);
    assert!(t.broker.queue_names("/").is_empty());
    assert!(t
        .broker
        .exchange_names("/")
        .iter()
        .all(|x| x.is_empty() || x.starts_with("amq.")));
    assert_eq!(
        post(addr, "/test/reset", GUEST, json!({"to": "yesterday"}))
            .await
            .status,
        400
    );
    // The broker is still usable afterwards, on the same connection.
    t.broker.reset().unwrap();
    assert_eq!(t.broker.queue_names("/"), vec!["orders".to_string()]);
    std::fs::remove_dir_all(&dir).unwrap();
}
