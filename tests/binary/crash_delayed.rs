//! The delayed-message part of the SIGKILL crash test (`durability_crash.rs`): a publisher to a
//! durable delayed exchange with confirms, and an operator moving held messages over HTTP
//! (released now, or given a new due time) while the broker is killed. A move is one store
//! commit: after every restart each confirmed message is delivered exactly once, whether its
//! move happened or not (a half-done move would lose it or deliver it twice).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::crash_support::{connect, exists, Ledger, Rng};

/// A durable `x-delayed-message` exchange, bound to `DUE` with key `d`.
pub const DELAYED: &str = "crash-delayed";
/// Where the delayed messages go when due; taken only at the start of a round.
pub const DUE: &str = "crash-due";
/// A persistent publish with a confirm here, after taking from `DUE`: its commit carries (or
/// follows) the removals of what was taken, so those cannot come back after the next kill.
const BARRIER: &str = "crash-barrier";

/// Publishes `d-round-i` messages to the delayed exchange with confirms until the connection
/// dies: every other one due within the round (10-300 ms), the others held past the kill
/// (1-3 s), so that they fall due in a later round or after the final start.
pub async fn delayed_publisher(url: String, round: u64, seed: u64, ledger: Arc<Mutex<Ledger>>) {
    let mut rng = Rng(seed ^ (round + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let connection = connect(&url).await;
    let Ok(ch) = connection.create_channel().await else {
        return;
    };
    if ch
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .is_err()
    {
        return;
    }
    for i in 0.. {
        let body = format!("d-{round}-{i}");
        let delay = if i % 2 == 0 {
            10 + rng.below(290)
        } else {
            1_000 + rng.below(2_000)
        };
        let mut headers = FieldTable::default();
        headers.insert("x-delay".into(), AMQPValue::LongLongInt(delay as i64));
        let Ok(confirm) = ch
            .basic_publish(
                DELAYED.into(),
                "d".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                // Persistent, so that the queue it reaches keeps it too (the exchange keeps
                // what it holds whatever the mode).
                BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_headers(headers),
            )
            .await
        else {
            return;
        };
        match confirm.await {
            Ok(c) if c.is_ack() => {
                ledger.lock().unwrap().delayed.insert(body);
            }
            _ => return,
        }
    }
}

/// Declares the delayed exchange, its queue and the barrier queue (all durable; idempotent).
async fn declare_delayed(ch: &Channel) {
    let mut args = FieldTable::default();
    args.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("direct".into()),
    );
    ch.exchange_declare(
        DELAYED.into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .unwrap();
    for queue in [DUE, BARRIER] {
        ch.queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    ch.queue_bind(
        DUE.into(),
        DELAYED.into(),
        "d".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

/// Takes everything in `DUE` (without ack), then makes that taking durable with a confirmed
/// publish to `BARRIER`. Only the first round declares: after a restart every definition must
/// be there already (declared passively: a lost one fails instead of being made again).
pub async fn take_due(url: &str, first: bool) -> Vec<String> {
    let connection = connect(url).await;
    let ch = connection.create_channel().await.unwrap();
    if first {
        declare_delayed(&ch).await;
    } else {
        for queue in [DUE, BARRIER] {
            assert!(exists(&connection, queue).await, "queue {queue} lost");
        }
        ch.exchange_declare(
            DELAYED.into(),
            ExchangeKind::Custom("x-delayed-message".into()),
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("the delayed exchange survived");
    }
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(DUE.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        out.push(String::from_utf8_lossy(&m.delivery.data).to_string());
    }
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "".into(),
            BARRIER.into(),
            BasicPublishOptions::default(),
            b"barrier",
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack(), "the barrier is confirmed");
    let _ = connection.close(200, "bye".into()).await;
    out
}

/// Counts delayed messages taken from `DUE`: each at most once over the whole run.
pub fn count_delivered(delivered: &mut HashMap<String, u32>, taken: Vec<String>, seed: u64) {
    for body in taken {
        let n = delivered.entry(body.clone()).or_default();
        *n += 1;
        assert_eq!(
            *n, 1,
            "delayed message {body} delivered twice (seed {seed})"
        );
    }
}

/// One HTTP request as guest that tolerates a broker dying meanwhile: its status and body, or
/// `None` if it was not answered.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Option<(u16, Value)> {
    let body = body.map(|b| b.to_string());
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n"
    );
    if let Some(body) = &body {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    head.push_str(body.as_deref().unwrap_or(""));
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok()?;
    let text = String::from_utf8_lossy(&response);
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(Value::Null);
    Some((status, json))
}

/// Moves held messages of the delayed exchange over HTTP until the broker dies, as an operator
/// would: one of the first few listed released now, or given a new due time up to 2 s away
/// (sooner or later than its own, within the 3 s the final wait allows). A move the broker
/// answered is counted; one that found its message released meanwhile (404) is not.
pub async fn mover(http: SocketAddr, round: u64, seed: u64, ledger: Arc<Mutex<Ledger>>) {
    let mut rng = Rng(seed ^ (round + 7).wrapping_mul(0xbf58_476d_1ce4_e5b9) | 1);
    let list = format!("/api/delayed/%2F/{DELAYED}?limit=20");
    loop {
        let Some((200, page)) = request(http, "GET", &list, None).await else {
            return;
        };
        let ids: Vec<String> = page["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|m| Some(m["id"].as_str()?.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        if ids.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        let id = &ids[rng.below(ids.len() as u64) as usize];
        let to = match rng.below(3) {
            0 => json!({"now": true}),
            _ => json!({"delay_ms": rng.below(2_000)}),
        };
        let path = format!("/api/delayed/%2F/{DELAYED}/messages/{id}/move");
        match request(http, "POST", &path, Some(to)).await {
            Some((200, _)) => ledger.lock().unwrap().moved += 1,
            Some((404, _)) => {}
            Some((status, body)) => panic!("a move answered {status}: {body}"),
            None => return,
        }
    }
}
