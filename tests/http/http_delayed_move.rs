//! `POST /api/delayed/{vhost}/{exchange}/messages/{id}/move`: a held message released now or
//! given a new due time over HTTP (as the page's buttons do), its new id answered; unknown
//! ids, wrong exchanges and bad due times get a clear 4xx.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use crate::http_client::*;
use dwellmq::{Broker, BrokerConfig, BrokerHandle};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};
use serde_json::{json, Value};

const TEN_YEARS_MS: u64 = 315_360_000_000;

/// A broker with the manual clock and HTTP, a delayed exchange `later` bound to `q` (durable
/// or not: a durable one holds its later messages on disk, with a data directory), and a
/// channel to it.
async fn start_api(data_dir: Option<&DataDir>) -> (BrokerHandle, SocketAddr, Connection, Channel) {
    let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
    config.data_dir = data_dir.map(|d| d.path().to_path_buf());
    let (broker, addr) = start_http(config).await;
    let durable = data_dir.is_some();
    let declared = put(
        addr,
        "/api/exchanges/%2F/later",
        GUEST,
        json!({"type": "x-delayed-message", "durable": durable,
               "arguments": {"x-delayed-type": "direct"}}),
    )
    .await;
    assert_eq!(declared.status, 201, "{}", declared.text());
    put(
        addr,
        "/api/queues/%2F/q",
        GUEST,
        json!({"durable": durable}),
    )
    .await;
    post(
        addr,
        "/api/bindings/%2F/e/later/q/q",
        GUEST,
        json!({"routing_key": "k"}),
    )
    .await;
    let connection = connect(&broker).await;
    let ch = connection.create_channel().await.expect("channel");
    (broker, addr, connection, ch)
}

async fn publish(ch: &Channel, body: &str, delay_ms: i64) {
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
    sync(ch).await;
}

/// The held messages' ids and due times, in due order.
async fn held(addr: SocketAddr) -> Vec<(String, u64)> {
    let reply = get(addr, "/api/delayed/%2F/later", GUEST).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let page = reply.json();
    let items = page["items"].as_array().expect("items");
    let item = |m: &Value| {
        (
            m["id"].as_str().unwrap().to_string(),
            m["due_ms"].as_u64().unwrap(),
        )
    };
    items.iter().map(item).collect()
}

async fn move_to(addr: SocketAddr, id: &str, body: Value) -> Reply {
    let path = format!("/api/delayed/%2F/later/messages/{id}/move");
    post(addr, &path, GUEST, body).await
}

/// The bodies `q` holds, taken out.
async fn taken(ch: &Channel) -> Vec<String> {
    drain_with_get(ch, "q")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect()
}

#[tokio::test]
async fn a_held_message_is_released_now_or_moved_later_or_sooner_and_its_new_id_answered() {
    let (broker, addr, _connection, ch) = start_api(None).await;
    for (body, delay) in [("a", 1_000), ("b", 2_000), ("c", 3_000), ("d", 4_000)] {
        publish(&ch, body, delay).await;
    }
    let ids: Vec<String> = held(addr).await.into_iter().map(|(id, _)| id).collect();

    // Now: released before the answer comes (the manual clock serves it at once).
    let reply = move_to(addr, &ids[3], json!({"now": true})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let moved = reply.json();
    assert_eq!(moved["due_ms"], T0_MS);
    assert!(moved["id"]
        .as_str()
        .unwrap()
        .starts_with(&format!("{T0_MS}-")));
    assert_eq!(moved["due"], "2026-01-01T00:00:00.000Z");
    assert_eq!(taken(&ch).await, ["d"]);
    // By delay from now, by RFC 3339 time, by milliseconds since 1970.
    let reply = move_to(addr, &ids[0], json!({"delay_ms": 10_000})).await;
    let a = reply.json();
    assert_eq!(
        (reply.status, a["due_ms"].as_u64()),
        (200, Some(T0_MS + 10_000))
    );
    let reply = move_to(addr, &ids[1], json!({"due": "2026-01-01T00:00:00.500Z"})).await;
    assert_eq!(
        (reply.status, reply.json()["due_ms"].as_u64()),
        (200, Some(T0_MS + 500))
    );
    let reply = move_to(addr, &ids[2], json!({"due": T0_MS + 20_000})).await;
    assert_eq!(
        (reply.status, reply.json()["due_ms"].as_u64()),
        (200, Some(T0_MS + 20_000))
    );
    let dues: Vec<u64> = held(addr).await.into_iter().map(|(_, due)| due).collect();
    assert_eq!(dues, [T0_MS + 500, T0_MS + 10_000, T0_MS + 20_000]);
    assert_eq!(held(addr).await[1].0, a["id"].as_str().unwrap());

    assert_eq!(broker.advance(Duration::from_millis(500)), 1);
    assert_eq!(taken(&ch).await, ["b"]);
    assert_eq!(broker.advance(Duration::from_millis(9_500)), 1);
    assert_eq!(taken(&ch).await, ["a"]);
    assert_eq!(broker.advance(Duration::from_millis(10_000)), 1);
    assert_eq!(taken(&ch).await, ["c"]);
    assert_eq!(broker.advance(Duration::from_secs(3_600)), 0);
}

#[tokio::test]
async fn a_move_answers_404_for_what_is_not_held_and_400_for_a_bad_due_time() {
    let (broker, addr, _connection, ch) = start_api(None).await;
    publish(&ch, "m", 5_000).await;
    let (id, _) = held(addr).await.remove(0);
    broker.advance(Duration::from_millis(100));
    let now = T0_MS + 100;

    let unknown = format!("{T0_MS}-999999");
    assert_eq!(
        move_to(addr, &unknown, json!({"now": true})).await.status,
        404
    );
    let elsewhere = format!("/api/delayed/%2F/nowhere/messages/{id}/move");
    assert_eq!(
        post(addr, &elsewhere, GUEST, json!({"now": true}))
            .await
            .status,
        404
    );
    let reason = move_to(addr, &id, json!({"due": now - 1})).await.error(400);
    assert!(reason.contains("in the past"), "{reason}");
    let reason = move_to(addr, &id, json!({"delay_ms": TEN_YEARS_MS + 1}))
        .await
        .error(400);
    assert!(reason.contains("ten years"), "{reason}");
    let reason = move_to(addr, &id, json!({"due": now + TEN_YEARS_MS + 1}))
        .await
        .error(400);
    assert!(reason.contains("ten years"), "{reason}");
    for bad in [
        json!({}),
        json!({"now": false}),
        json!({"now": true, "delay_ms": 5}),
        json!({"due": "tomorrow"}),
        json!({"later": 5}),
    ] {
        let reply = move_to(addr, &id, bad.clone()).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.text());
    }
    assert_eq!(
        move_to(addr, "not-an-id", json!({"now": true}))
            .await
            .status,
        400
    );
    // State-changing: JSON only, as every POST.
    let path = format!("/api/delayed/%2F/later/messages/{id}/move");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n\r\n"
    );
    assert_eq!(
        send_exact(addr, &head, b"{\"now\":true}\n").await.status,
        415
    );

    // Nothing of that changed the message; it moves, and the old id is gone.
    assert_eq!(held(addr).await, [(id.clone(), T0_MS + 5_000)]);
    let reply = move_to(addr, &id, json!({"delay_ms": TEN_YEARS_MS})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(move_to(addr, &id, json!({"now": true})).await.status, 404);
    assert_eq!(taken(&ch).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_message_held_on_disk_moves_over_http_and_keeps_its_new_time_across_a_restart() {
    let dir = DataDir::new("http-move");
    let (broker, addr, connection, ch) = start_api(Some(&dir)).await;
    let day = 86_400_000;
    publish(&ch, "tomorrow", day).await;
    publish(&ch, "soon", 500).await;
    let ids: Vec<String> = held(addr).await.into_iter().map(|(id, _)| id).collect();
    // On disk to soon; from the wheel to the day after tomorrow (onto disk).
    let reply = move_to(addr, &ids[1], json!({"delay_ms": 2_000})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = move_to(addr, &ids[0], json!({"delay_ms": 2 * day})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS + 1_000)
    };
    let broker = Broker::start(config).await.expect("restarts");
    let connection = connect(&broker).await;
    let ch = connection.create_channel().await.expect("channel");
    let dues: Vec<u64> = broker
        .delayed_messages("/", "later", 10)
        .iter()
        .map(|m| m.due_ms)
        .collect();
    assert_eq!(dues, [T0_MS + 2_000, T0_MS + 2 * day as u64]);
    assert_eq!(broker.advance(Duration::from_millis(999)), 0);
    assert_eq!(broker.advance(Duration::from_millis(1)), 1);
    assert_eq!(taken(&ch).await, ["tomorrow"]);
    assert_eq!(broker.advance(Duration::from_millis(day as u64)), 0);
    assert_eq!(broker.advance(Duration::from_millis(day as u64)), 1);
    assert_eq!(taken(&ch).await, ["soon"]);
    assert_eq!(broker.advance(Duration::from_millis(7 * day as u64)), 0);
    assert_eq!(broker.delayed_count("/", "later"), 0);
    broker.shutdown().await;
}
