//! dwellmq's delayed-message endpoints and the Prometheus metrics, with the manual clock.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use crate::http_client::*;
use dwellmq::BrokerConfig;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use serde_json::{json, Value};

async fn start_api() -> (TestBroker, SocketAddr) {
    start_api_on(None).await
}

/// With a data directory: a durable delayed exchange holds its later messages on disk.
async fn start_api_on(data_dir: Option<std::path::PathBuf>) -> (TestBroker, SocketAddr) {
    let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.data_dir = data_dir;
    let broker = start_with(config).await;
    let addr = broker.broker.http_addr().expect("HTTP on");
    (broker, addr)
}

/// Declares the delayed exchange `later` over HTTP, bound to queue `q`.
async fn setup(addr: SocketAddr) {
    setup_as(addr, false).await
}

async fn setup_as(addr: SocketAddr, durable: bool) {
    let reply = put(
        addr,
        "/api/exchanges/%2F/later",
        GUEST,
        json!({
            "type": "x-delayed-message",
            "durable": durable,
            "arguments": {"x-delayed-type": "direct"}
        }),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    put(addr, "/api/queues/%2F/q", GUEST, json!({})).await;
    post(
        addr,
        "/api/bindings/%2F/e/later/q/q",
        GUEST,
        json!({"routing_key": "k"}),
    )
    .await;
}

async fn publish_delayed(ch: &Channel, body: &str, delay_ms: i64) {
    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), AMQPValue::LongLongInt(delay_ms));
    ch.basic_publish(
        "later".into(),
        "k".into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default().with_headers(headers),
    )
    .await
    .unwrap();
}

async fn page(addr: SocketAddr, query: &str) -> Value {
    let reply = get(addr, &format!("/api/delayed/%2F/later{query}"), GUEST).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn held_messages_are_listed_paged_filtered_cancelled_and_purged() {
    let (t, addr) = start_api().await;
    setup(addr).await;
    list_page_cancel_purge(t, addr).await;
}

#[tokio::test]
async fn messages_held_on_disk_are_listed_paged_filtered_cancelled_and_purged_alike() {
    let dir = std::env::temp_dir().join(format!("dwellmq-http-disk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (t, addr) = start_api_on(Some(dir.clone())).await;
    setup_as(addr, true).await;
    list_page_cancel_purge(t, addr).await;
    let _ = std::fs::remove_dir_all(&dir);
}

async fn list_page_cancel_purge(t: TestBroker, addr: SocketAddr) {
    let ch = t.channel().await;
    // Due at +1 s, +2 s, ... +5 s (the first beyond the wheel's horizon too).
    for i in 1..=5 {
        publish_delayed(&ch, &format!("m{i}"), i * 1000).await;
    }
    sync(&ch).await;
    let x = get(addr, "/api/exchanges/%2F/later", GUEST).await.json();
    assert_eq!(x["messages_delayed"], 5, "as the plugin reports it");
    assert_eq!(x["type"], "x-delayed-message");

    let all = page(addr, "").await;
    assert_eq!(all["messages_delayed"], 5);
    assert_eq!(all["bytes"], 10);
    assert_eq!(all["next_due_ms"], T0_MS + 1000);
    assert_eq!(all["next_page"], Value::Null);
    let first = &all["items"][0];
    assert_eq!(first["due_ms"], T0_MS + 1000);
    assert_eq!(first["due_in_ms"], 1000);
    assert_eq!(first["routing_key"], "k");
    assert_eq!(first["payload_bytes"], 2);
    // Held messages show their headers as published: the holder negates `x-delay` at release.
    assert_eq!(first["headers"], json!({"x-delay": 1000}));
    let all_ids = ids(&all);
    assert_eq!(all_ids.len(), 5);

    // Pages of two, following next_page.
    let p1 = page(addr, "?limit=2").await;
    assert_eq!(ids(&p1), all_ids[..2]);
    let after = p1["next_page"].as_str().unwrap().to_string();
    let p2 = page(addr, &format!("?limit=2&after={after}")).await;
    assert_eq!(ids(&p2), all_ids[2..4]);
    let after = p2["next_page"].as_str().unwrap().to_string();
    let p3 = page(addr, &format!("?limit=2&after={after}")).await;
    assert_eq!(ids(&p3), all_ids[4..]);
    assert_eq!(p3["next_page"], Value::Null);
    // A page that ends exactly at the last message has no next page either.
    let whole = page(addr, "?limit=5").await;
    assert_eq!(
        (ids(&whole), &whole["next_page"]),
        (all_ids.clone(), &Value::Null)
    );
    let p4 = page(addr, &format!("?limit=4&after={}", all_ids[0])).await;
    assert_eq!(
        (ids(&p4), &p4["next_page"]),
        (all_ids[1..].to_vec(), &Value::Null)
    );
    // Due range [+2 s, +4 s).
    let range = page(
        addr,
        &format!("?due_from={}&due_until={}", T0_MS + 2000, T0_MS + 4000),
    )
    .await;
    assert_eq!(ids(&range), all_ids[1..3]);

    // Cancel the second message; it is gone, and never delivered.
    let cancel = format!("/api/delayed/%2F/later/messages/{}", all_ids[1]);
    assert_eq!(delete(addr, &cancel, GUEST).await.status, 204);
    delete(addr, &cancel, GUEST).await.error(404);
    assert_eq!(page(addr, "").await["messages_delayed"], 4);
    let mut consumer = consume_no_ack(&ch, "q").await;
    t.broker.advance(Duration::from_millis(2500));
    assert_eq!(next_body(&mut consumer).await, "m1");
    // Purge the rest: nothing more arrives; m1 was the only delivery.
    let reply = delete(addr, "/api/delayed/%2F/later/contents", GUEST).await;
    assert_eq!(reply.json(), json!({"purged": 3}));
    assert_eq!(t.broker.advance(Duration::from_secs(10)), 0);
    assert_eq!(t.broker.delayed_total(), 0);
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn messages_are_addressed_through_their_exchange() {
    let (t, addr) = start_api().await;
    setup(addr).await;
    put(
        addr,
        "/api/exchanges/%2F/other",
        GUEST,
        json!({"type": "x-delayed-message", "arguments": {"x-delayed-type": "fanout"}}),
    )
    .await;
    let ch = t.channel().await;
    publish_delayed(&ch, "m", 60_000).await;
    sync(&ch).await;
    let id = ids(&page(addr, "").await)[0].clone();
    // Not through another exchange, not with a malformed id, not on a plain exchange.
    delete(
        addr,
        &format!("/api/delayed/%2F/other/messages/{id}"),
        GUEST,
    )
    .await
    .error(404);
    let reply = delete(addr, "/api/delayed/%2F/later/messages/nonsense", GUEST).await;
    assert!(reply.error(400).contains("<due_ms>-<sequence>"));
    get(addr, "/api/delayed/%2F/amq.direct", GUEST)
        .await
        .error(404);
    get(addr, "/api/delayed/nope/later", GUEST).await.error(404);
    assert_eq!(t.broker.delayed_count("/", "later"), 1);
    // Publishing over HTTP to a delayed exchange holds the message too.
    let reply = post(
        addr,
        "/api/exchanges/%2F/later/publish",
        GUEST,
        json!({
        "properties": {"headers": {"x-delay": 5000}}, "routing_key": "k",
        "payload": "via http", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(reply.json(), json!({"routed": true}));
    assert_eq!(t.broker.delayed_count("/", "later"), 2);
    let listed = get(addr, "/api/delayed", GUEST).await.json();
    assert_eq!(
        listed,
        json!([
            {"vhost": "/", "exchange": "later", "messages_delayed": 2, "bytes": 9, "next_due_ms": T0_MS + 5000},
            {"vhost": "/", "exchange": "other", "messages_delayed": 0, "bytes": 0, "next_due_ms": null},
        ])
    );
    drop(t); // shuts the broker down
}

/// The sample `name{labels}` in an exposition, as a number.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn metrics_expose_queues_connections_and_held_messages() {
    let (t, addr) = start_api().await;
    setup(addr).await;
    let ch = t.channel().await;
    publish_delayed(&ch, "abc", 30_000).await;
    ch.basic_publish(
        "".into(),
        "q".into(),
        BasicPublishOptions::default(),
        b"now",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    sync(&ch).await;
    // No credentials needed, as with rabbitmq_prometheus. Per object: `/metrics` sums over
    // queues, as RabbitMQ's does by default.
    let reply = get(addr, "/metrics/per-object", As::Nobody).await;
    assert_eq!(reply.status, 200);
    assert!(reply
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = reply.text();
    assert!(
        text.contains("# TYPE rabbitmq_queue_messages_ready gauge"),
        "{text}"
    );
    assert_eq!(sample(&text, "rabbitmq_connections"), Some(1.0));
    assert_eq!(sample(&text, "rabbitmq_queues"), Some(1.0));
    assert_eq!(
        sample(
            &text,
            "rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"q\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "rabbitmq_queue_messages_unacked{vhost=\"/\",queue=\"q\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "rabbitmq_queue_consumers{vhost=\"/\",queue=\"q\"}"),
        Some(0.0)
    );
    let later = "{vhost=\"/\",exchange=\"later\"}";
    assert_eq!(
        sample(&text, &format!("dwellmq_delayed_messages{later}")),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, &format!("dwellmq_delayed_bytes{later}")),
        Some(3.0)
    );
    assert_eq!(
        sample(&text, &format!("dwellmq_delayed_next_due_seconds{later}")),
        Some(30.0)
    );
    assert_eq!(sample(&text, "dwellmq_delayed_unroutable_total"), Some(0.0));
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn publish_counters_count_routed_dropped_and_returned_messages() {
    let (t, addr) = start_api().await;
    setup(addr).await;
    let ch = t.channel().await;
    let publish = |exchange: &'static str, key: &'static str, mandatory: bool| {
        ch.basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions {
                mandatory,
                ..Default::default()
            },
            b"x",
            BasicProperties::default(),
        )
    };
    publish("", "q", false).await.unwrap();
    publish("amq.direct", "nowhere", false).await.unwrap();
    publish("amq.direct", "nowhere", true).await.unwrap();
    sync(&ch).await;
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.direct/publish",
        GUEST,
        json!({
        "routing_key": "nowhere", "payload": "", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(reply.json(), json!({"routed": false}));
    let text = get(addr, "/metrics", As::Nobody).await.text();
    assert_eq!(
        sample(&text, "rabbitmq_channel_messages_published_total"),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "rabbitmq_channel_messages_unroutable_dropped_total"),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "rabbitmq_channel_messages_unroutable_returned_total"),
        Some(1.0)
    );
    let overview = get(addr, "/api/overview", GUEST).await.json();
    let stats = &overview["message_stats"];
    assert_eq!(stats["publish"], 4);
    assert_eq!(stats["drop_unroutable"], 2);
    assert_eq!(stats["return_unroutable"], 1);
    assert!(stats["publish_details"]["rate"].is_number(), "{stats}");
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn a_histogram_counts_held_messages_per_interval() {
    let (t, addr) = start_api().await;
    setup(addr).await;
    let ch = t.channel().await;
    // 5,000 messages due every 10 ms from +10 ms to +50 s: more than one chunk of the index,
    // and the first ones inside the timer wheel's horizon.
    for i in 1..=5000 {
        publish_delayed(&ch, "m", i * 10).await;
    }
    sync(&ch).await;
    let path = format!("/api/delayed/%2F/later/histogram?from={T0_MS}&bucket_ms=10000&buckets=6");
    let histogram = get(addr, &path, GUEST).await.json();
    assert_eq!(histogram["counts"], json!([999, 1000, 1000, 1000, 1000, 1]));
    assert_eq!(histogram["messages_delayed"], 5000);
    assert_eq!(histogram["from_ms"], T0_MS);
    assert_eq!(histogram["bucket_ms"], 10000);
    // Defaults: a minute per bucket for the hour from now.
    let hour = get(addr, "/api/delayed/%2F/later/histogram", GUEST)
        .await
        .json();
    let counts = hour["counts"].as_array().unwrap();
    assert_eq!(counts.len(), 60);
    assert_eq!(counts[0], 5000);
    // A window that starts later leaves out what is due before it.
    let later = format!(
        "/api/delayed/%2F/later/histogram?from={}&bucket_ms=1000&buckets=2",
        T0_MS + 49_000
    );
    assert_eq!(
        get(addr, &later, GUEST).await.json()["counts"],
        json!([100, 1])
    );
    // Released messages (due up to +20 s inclusive) are no longer counted; the next second's
    // are now in the timer wheel and still are.
    t.broker.advance(Duration::from_secs(20));
    let histogram = get(addr, &path, GUEST).await.json();
    assert_eq!(histogram["counts"], json!([0, 0, 999, 1000, 1000, 1]));
    get(addr, "/api/delayed/%2F/later/histogram?buckets=0", GUEST)
        .await
        .error(400);
    get(addr, "/api/delayed/%2F/later/histogram?bucket_ms=0", GUEST)
        .await
        .error(400);
    get(
        addr,
        "/api/delayed/%2F/later/histogram?buckets=100000",
        GUEST,
    )
    .await
    .error(400);
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn release_lateness_is_a_prometheus_histogram() {
    let (t, addr) = start_api().await;
    setup(addr).await;
    let ch = t.channel().await;
    publish_delayed(&ch, "a", 1000).await;
    publish_delayed(&ch, "b", 2000).await;
    sync(&ch).await;
    // The manual clock steps from deadline to deadline, so each is released on the dot.
    t.broker.advance(Duration::from_millis(2500));
    let text = get(addr, "/metrics", As::Nobody).await.text();
    let name = "dwellmq_delayed_release_lateness_seconds";
    assert!(text.contains(&format!("# TYPE {name} histogram")), "{text}");
    let bucket = |le: &str| sample(&text, &format!("{name}_bucket{{le=\"{le}\"}}"));
    assert_eq!(bucket("0.001"), Some(2.0), "both released on time");
    assert_eq!(bucket("0.5"), Some(2.0));
    assert_eq!(bucket("+Inf"), Some(2.0));
    assert_eq!(sample(&text, &format!("{name}_count")), Some(2.0));
    assert_eq!(sample(&text, &format!("{name}_sum")), Some(0.0));
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn messages_in_the_timer_wheel_are_listed_in_due_order_across_scan_chunks() {
    let (t, addr) = start_api().await;
    setup(addr).await;
    let ch = t.channel().await;
    // 5,000 messages all due within the next second, so all in the timer wheel (which is
    // scanned 4,096 entries at a time), in an order that differs from publish order.
    for i in 0..5000i64 {
        publish_delayed(&ch, "m", 200 + (i * 7) % 700).await;
    }
    sync(&ch).await;
    let mut seen: Vec<(u64, u64)> = Vec::new();
    let mut query = "?limit=1000".to_string();
    loop {
        let p = page(addr, &query).await;
        for item in p["items"].as_array().unwrap() {
            let (due, seq) = item["id"].as_str().unwrap().split_once('-').unwrap();
            seen.push((due.parse().unwrap(), seq.parse().unwrap()));
        }
        match p["next_page"].as_str() {
            Some(after) => query = format!("?limit=1000&after={after}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 5000);
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "due order, each once");
    assert_eq!(seen[0].0, T0_MS + 200);
    assert_eq!(page(addr, "").await["next_due_ms"], T0_MS + 200);
    let listed = get(addr, "/api/delayed", GUEST).await.json();
    assert_eq!(listed[0]["next_due_ms"], T0_MS + 200, "{listed}");
    let text = get(addr, "/metrics", As::Nobody).await.text();
    let series = "dwellmq_delayed_next_due_seconds{vhost=\"/\",exchange=\"later\"}";
    assert_eq!(sample(&text, series), Some(0.2));
    let path = format!("/api/delayed/%2F/later/histogram?from={T0_MS}&bucket_ms=100&buckets=10");
    let counts = get(addr, &path, GUEST).await.json()["counts"].clone();
    let counts: Vec<u64> = serde_json::from_value(counts).unwrap();
    assert_eq!(counts.iter().sum::<u64>(), 5000);
    assert_eq!(&counts[..2], &[0, 0], "nothing is due before +200 ms");
    drop(t); // shuts the broker down
}
