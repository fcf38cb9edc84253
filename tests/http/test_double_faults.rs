//! Fault injection, from Rust (`BrokerHandle`) and over HTTP (`/test/faults/...`): what a
//! client sees when the broker closes its connection or channel with a chosen code, nacks its
//! confirms, or holds deliveries to a queue back.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::*;
use crate::http_client::*;
use dwellmq::{BrokerConfig, FaultError};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, Event};
use serde_json::json;

async fn start_api(config: BrokerConfig) -> (TestBroker, SocketAddr) {
    let mut config = config;
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let broker = start_with(config).await;
    let addr = broker.broker.http_addr().expect("HTTP on");
    (broker, addr)
}

/// A connection the client names `name` (the `connection_name` property).
async fn named(t: &TestBroker, name: &str) -> Connection {
    Connection::connect(
        &format!("{}/%2f", t.broker.amqp_url()),
        ConnectionProperties::default().with_connection_name(name.into()),
    )
    .await
    .expect("client connects")
}

/// The code and text of the error a connection's events end with.
async fn connection_error(
    mut events: impl futures_lite::Stream<Item = Event> + Unpin,
) -> (u16, String) {
    let error = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(Event::Error(e)) = events.next().await {
                return e;
            }
        }
    })
    .await
    .expect("the connection fails");
    amqp_error(&error)
}

#[tokio::test]
async fn the_broker_closes_a_named_connection_with_the_chosen_code() {
    let t = start().await;
    let victim = named(&t, "worker-1").await;
    let bystander = named(&t, "worker-2").await;
    let errors = tokio::spawn(connection_error(Box::pin(victim.events_listener())));
    round_trip(&victim, "warm").await;
    let closed = t
        .broker
        .close_connection(Some("worker-1"), 320, "maintenance")
        .unwrap();
    assert_eq!(closed, 1);
    let (code, text) = errors.await.unwrap();
    assert_eq!(code, 320);
    assert_eq!(text, "CONNECTION_FORCED - maintenance");
    assert!(bystander.status().connected());
    assert_eq!(
        t.broker.close_connection(Some("nobody"), 320, "x"),
        Err(FaultError::NoConnection("nobody".into()))
    );
    assert_eq!(
        t.broker.close_connection(None, 200, "x"),
        Err(FaultError::ReplyCode(200))
    );
}

#[tokio::test]
async fn the_broker_closes_a_channel_over_http_and_the_connection_stays() {
    let (t, addr) = start_api(BrokerConfig::ephemeral()).await;
    let app = named(&t, "app").await;
    let ch = app.create_channel().await.unwrap();
    declare_queue(&ch, "jobs").await;
    let mut consumer = consume(&ch, "jobs", "c", false).await;
    let reply = post(
        addr,
        "/test/faults/close-channel",
        GUEST,
        json!({"connection": "app", "channel": ch.id(), "code": 406, "text": "injected"}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["closed"], 1);
    let ended = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .expect("the consumer ends");
    match ended {
        Some(Err(error)) => assert_eq!(
            amqp_error(&error),
            (406, "PRECONDITION_FAILED - injected".to_string())
        ),
        other => panic!("expected the channel's error, got {other:?}"),
    }
    eventually("the channel is closed", || !ch.status().connected()).await;
    // The connection is still good.
    round_trip(&app, "still-there").await;

    let no_channel = post(
        addr,
        "/test/faults/close-channel",
        GUEST,
        json!({"code": 406}),
    )
    .await;
    assert_eq!(no_channel.status, 400);
    let unknown = post(
        addr,
        "/test/faults/close-connection",
        GUEST,
        json!({"connection": "ghost"}),
    )
    .await;
    assert_eq!(unknown.status, 404);
    let bad_code = post(
        addr,
        "/test/faults/close-connection",
        GUEST,
        json!({"code": 999}),
    )
    .await;
    assert_eq!(bad_code.status, 400);
    let everyone = post(
        addr,
        "/test/faults/close-connection",
        GUEST,
        json!({"code": 320, "text": "bye"}),
    )
    .await;
    assert_eq!(everyone.json()["closed"], 2);
    assert_connection_closed(&app).await;
}

#[tokio::test]
async fn the_next_confirms_are_nacked_and_then_acked_again() {
    let (t, addr) = start_api(BrokerConfig::ephemeral()).await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let reply = post(
        addr,
        "/test/faults/nack-confirms",
        GUEST,
        json!({"count": 2}),
    )
    .await;
    assert_eq!(reply.json()["pending"], 2);
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let confirm = ch
            .basic_publish(
                "".into(),
                "q".into(),
                BasicPublishOptions::default(),
                b"m",
                BasicProperties::default(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        outcomes.push(confirm.is_ack());
    }
    assert_eq!(outcomes, [false, false, true]);
    // Nacked or not, the messages were routed.
    assert_eq!(ready(&t, "q"), 3);
    let counters = t.broker.counters();
    assert_eq!((counters.nacked, counters.confirmed), (2, 1));

    t.broker.nack_next_confirms(1);
    let confirm = ch
        .basic_publish(
            "".into(),
            "q".into(),
            BasicPublishOptions::default(),
            b"m",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_nack());
}

#[tokio::test]
async fn deliveries_to_a_queue_are_held_back_in_broker_time() {
    let (t, addr) = start_api(BrokerConfig::ephemeral().with_manual_clock(T0_MS)).await;
    let ch = t.channel().await;
    declare_queue(&ch, "slow").await;
    declare_queue(&ch, "fast").await;
    ch.queue_bind(
        "slow".into(),
        "amq.fanout".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        "fast".into(),
        "amq.fanout".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let reply = put(
        addr,
        "/test/faults/delay/%2F/slow",
        GUEST,
        json!({"ms": 5000}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let mut consumer = consume_no_ack(&ch, "slow").await;
    publish(&ch, "amq.fanout", "", "late").await;
    sync(&ch).await;
    assert_eq!(ready(&t, "fast"), 1, "other queues are not affected");
    let slow = get(addr, "/test/queues/%2F/slow", GUEST).await.json();
    assert_eq!(slow["held"]["delayed"], 1);
    assert_eq!(slow["delivery_delay_ms"], 5000);

    t.broker.advance(Duration::from_millis(4999));
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.queue_info("/", "slow").unwrap().messages, 0);
    let moved = post(addr, "/test/clock/advance", GUEST, json!({"ms": 1})).await;
    assert_eq!(moved.status, 200, "{}", moved.text());
    assert_eq!(next_body(&mut consumer).await, "late");
    let slow = get(addr, "/test/queues/%2F/slow", GUEST).await.json();
    assert_eq!(slow["held"]["delayed"], 0);

    // Removed: deliveries are immediate again.
    let cleared = delete(addr, "/test/faults/delay/%2F/slow", GUEST).await;
    assert_eq!(cleared.status, 204);
    publish(&ch, "amq.fanout", "", "prompt").await;
    assert_eq!(next_body(&mut consumer).await, "prompt");

    // From Rust, and refused for a queue that does not exist.
    t.broker
        .delay_deliveries("/", "fast", Duration::from_secs(1))
        .unwrap();
    assert!(matches!(
        t.broker
            .delay_deliveries("/", "missing", Duration::from_secs(1)),
        Err(FaultError::NoQueue { .. })
    ));
    let missing = put(
        addr,
        "/test/faults/delay/%2F/missing",
        GUEST,
        json!({"ms": 1}),
    )
    .await;
    assert_eq!(missing.status, 404);
}
