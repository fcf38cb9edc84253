//! What RabbitMQ clients' own test suites (aio-pika, amqp091-go, amqplib) expect of the broker,
//! as RabbitMQ 3.10 does it: unbind of what does not exist, auto-delete cascades, the default
//! exchange, and sender-selected distribution (`CC` / `BCC`).

use std::time::Duration;

use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldArray, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

async fn exchange(ch: &Channel, name: &str, kind: ExchangeKind, auto_delete: bool) {
    ch.exchange_declare(
        name.into(),
        kind,
        ExchangeDeclareOptions {
            auto_delete,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
}

async fn bind(ch: &Channel, queue: &str, exchange: &str, key: &str) {
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

async fn bind_exchange(ch: &Channel, destination: &str, source: &str, key: &str) {
    ch.exchange_bind(
        destination.into(),
        source.into(),
        key.into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

fn exchanges(t: &TestBroker) -> Vec<String> {
    t.broker.exchange_names("/")
}

fn ready(t: &TestBroker, queue: &str) -> usize {
    t.broker.queue_info("/", queue).unwrap().messages
}

// ---------------------------------------------------------------------------------------------
// Unbind, auto-delete, the default exchange

#[tokio::test]
async fn unbind_answers_ok_when_the_queue_the_exchange_or_the_binding_is_missing() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    let none = FieldTable::default;
    ch.queue_unbind("no-queue".into(), "amq.direct".into(), "k".into(), none())
        .await
        .expect("missing queue");
    ch.queue_unbind("q".into(), "no-exchange".into(), "k".into(), none())
        .await
        .expect("missing exchange");
    ch.queue_unbind(
        "q".into(),
        "amq.direct".into(),
        "never-bound".into(),
        none(),
    )
    .await
    .expect("missing binding");
    ch.exchange_unbind(
        "no-destination".into(),
        "amq.fanout".into(),
        "".into(),
        ExchangeUnbindOptions::default(),
        none(),
    )
    .await
    .expect("missing destination exchange");
    ch.exchange_unbind(
        "amq.direct".into(),
        "no-source".into(),
        "".into(),
        ExchangeUnbindOptions::default(),
        none(),
    )
    .await
    .expect("missing source exchange");
    // The default exchange is still refused, whatever exists.
    let err = ch
        .queue_unbind("no-queue".into(), "".into(), "k".into(), none())
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - operation not permitted on the default exchange".into()
        )
    );
}

#[tokio::test]
async fn unbinding_another_connections_exclusive_queue_is_still_405() {
    let t = start().await;
    let ch = t.channel().await;
    ch.queue_declare(
        "mine".into(),
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    let other = connect(&t.broker).await;
    let other_ch = other.create_channel().await.unwrap();
    let err = other_ch
        .queue_unbind(
            "mine".into(),
            "amq.direct".into(),
            "k".into(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(amqp_error(&err).0, 405);
}

#[tokio::test]
async fn auto_delete_exchanges_that_lose_their_last_binding_to_a_deletion_go_too() {
    let t = start().await;
    let ch = t.channel().await;
    // front --> middle --> q, both auto-delete: deleting q empties middle, which empties front.
    declare_queue(&ch, "q").await;
    exchange(&ch, "middle", ExchangeKind::Direct, true).await;
    exchange(&ch, "front", ExchangeKind::Fanout, true).await;
    bind(&ch, "q", "middle", "k").await;
    bind_exchange(&ch, "middle", "front", "").await;
    ch.queue_delete("q".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    assert!(!exchanges(&t).contains(&"middle".to_string()));
    assert!(!exchanges(&t).contains(&"front".to_string()));

    // An exchange destination deleted: the auto-delete source bound only to it goes.
    exchange(&ch, "target", ExchangeKind::Fanout, false).await;
    exchange(&ch, "source", ExchangeKind::Fanout, true).await;
    bind_exchange(&ch, "target", "source", "").await;
    ch.exchange_delete("target".into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
    assert!(!exchanges(&t).contains(&"source".to_string()));

    // One that keeps another binding stays.
    declare_queue(&ch, "q1").await;
    declare_queue(&ch, "q2").await;
    exchange(&ch, "kept", ExchangeKind::Fanout, true).await;
    bind(&ch, "q1", "kept", "").await;
    bind(&ch, "q2", "kept", "").await;
    ch.queue_delete("q1".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    assert!(exchanges(&t).contains(&"kept".to_string()));
}

#[tokio::test]
async fn a_passive_declare_of_the_default_exchange_is_403() {
    let t = start().await;
    let ch = t.channel().await;
    let err = ch
        .exchange_declare(
            "".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - operation not permitted on the default exchange".into()
        )
    );
    assert!(t.connection.status().connected(), "a channel error only");
}

// ---------------------------------------------------------------------------------------------
// Sender-selected distribution

fn keys(names: &[&str]) -> AMQPValue {
    AMQPValue::FieldArray(FieldArray::from(
        names
            .iter()
            .map(|n| AMQPValue::LongString((*n).into()))
            .collect::<Vec<_>>(),
    ))
}

fn cc_bcc(cc: &[&str], bcc: &[&str]) -> BasicProperties {
    let mut headers = FieldTable::default();
    if !cc.is_empty() {
        headers.insert("CC".into(), keys(cc));
    }
    if !bcc.is_empty() {
        headers.insert("BCC".into(), keys(bcc));
    }
    headers.insert("other".into(), AMQPValue::LongString("kept".into()));
    BasicProperties::default().with_headers(headers)
}

async fn publish(ch: &Channel, exchange: &str, key: &str, properties: BasicProperties) {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        b"m",
        properties,
    )
    .await
    .unwrap();
}

/// Queues `one` .. `four` bound to `exchange` with their names as keys.
async fn four_queues(ch: &Channel, exchange: &str) {
    for q in ["one", "two", "three", "four"] {
        declare_queue(ch, q).await;
        if !exchange.is_empty() {
            bind(ch, q, exchange, q).await;
        }
    }
}

#[tokio::test]
async fn cc_and_bcc_add_routing_keys_and_bcc_is_not_delivered() {
    let t = start().await;
    let ch = t.channel().await;
    exchange(&ch, "cc", ExchangeKind::Direct, false).await;
    four_queues(&ch, "cc").await;
    for _ in 0..10 {
        publish(&ch, "cc", "one", cc_bcc(&["two", "three"], &["four"])).await;
    }
    sync(&ch).await;
    for q in ["one", "two", "three", "four"] {
        assert_eq!(ready(&t, q), 10, "{q}");
    }
    let mut consumer = consume_no_ack(&ch, "four").await;
    let delivery = next_delivery(&mut consumer).await;
    let headers = delivery.properties.headers().clone().unwrap();
    assert_eq!(headers.inner().get("CC"), Some(&keys(&["two", "three"])));
    assert_eq!(headers.inner().get("BCC"), None, "BCC is stripped");
    assert_eq!(
        headers.inner().get("other"),
        Some(&AMQPValue::LongString("kept".into()))
    );
    assert_eq!(delivery.routing_key.as_str(), "one");
}

#[tokio::test]
async fn cc_works_for_topic_and_the_default_exchange_and_delivers_once() {
    let t = start().await;
    let ch = t.channel().await;
    exchange(&ch, "topics", ExchangeKind::Topic, false).await;
    declare_queue(&ch, "eu").await;
    declare_queue(&ch, "us").await;
    bind(&ch, "eu", "topics", "orders.eu.*").await;
    bind(&ch, "us", "topics", "orders.us.#").await;
    // The own key and a CC key both match `eu`: delivered once.
    publish(
        &ch,
        "topics",
        "orders.eu.new",
        cc_bcc(&["orders.eu.old", "orders.us.x.y"], &[]),
    )
    .await;
    sync(&ch).await;
    assert_eq!((ready(&t, "eu"), ready(&t, "us")), (1, 1));

    // The default exchange routes each key to the queue of that name.
    four_queues(&ch, "").await;
    publish(
        &ch,
        "",
        "one",
        cc_bcc(&["two"], &["three", "no-such-queue"]),
    )
    .await;
    sync(&ch).await;
    let depths: Vec<usize> = ["one", "two", "three", "four"]
        .iter()
        .map(|q| ready(&t, q))
        .collect();
    assert_eq!(depths, [1, 1, 1, 0]);

    // Fanout ignores keys: one copy, whatever CC says.
    exchange(&ch, "fan", ExchangeKind::Fanout, false).await;
    declare_queue(&ch, "f").await;
    bind(&ch, "f", "fan", "").await;
    publish(&ch, "fan", "", cc_bcc(&["a", "b"], &["c"])).await;
    sync(&ch).await;
    assert_eq!(ready(&t, "f"), 1);
}

#[tokio::test]
async fn mandatory_counts_cc_routes() {
    let t = start().await;
    let ch = t.channel().await;
    exchange(&ch, "cc", ExchangeKind::Direct, false).await;
    four_queues(&ch, "cc").await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "cc".into(),
            "nobody".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"m",
            cc_bcc(&[], &["two"]),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.take_message().is_none(), "routed by BCC: no return");
    assert_eq!(ready(&t, "two"), 1);
}

#[tokio::test]
async fn a_cc_header_that_is_not_an_array_is_406() {
    let t = start().await;
    let ch = t.channel().await;
    let mut headers = FieldTable::default();
    headers.insert("CC".into(), AMQPValue::LongString("two".into()));
    let (code, text) = publish_error(
        &ch,
        "amq.direct",
        "one",
        BasicProperties::default().with_headers(headers),
    )
    .await;
    assert_eq!(
        (code, text.as_str()),
        (
            406,
            "PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,\"CC\",longstr}"
        )
    );
}

#[tokio::test]
async fn a_delayed_message_is_released_to_its_cc_and_bcc_keys_without_bcc() {
    let t = start_manual().await;
    let ch = t.channel().await;
    let mut args = FieldTable::default();
    args.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("direct".into()),
    );
    ch.exchange_declare(
        "later".into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions::default(),
        args,
    )
    .await
    .unwrap();
    four_queues(&ch, "later").await;
    let mut properties = cc_bcc(&["two"], &["three"]);
    let mut headers = properties.headers().clone().unwrap();
    headers.insert("x-delay".into(), AMQPValue::LongInt(100));
    properties = properties.with_headers(headers);
    publish(&ch, "later", "one", properties).await;
    sync(&ch).await;
    assert_eq!(t.broker.delayed_count("/", "later"), 1);
    let mut consumer = consume_no_ack(&ch, "three").await;
    t.broker.advance(Duration::from_millis(100));
    let delivery = next_delivery(&mut consumer).await;
    let headers = delivery.properties.headers().clone().unwrap();
    assert_eq!(headers.inner().get("BCC"), None);
    assert_eq!(
        headers.inner().get("x-delay"),
        Some(&AMQPValue::LongInt(-100))
    );
    let depths: Vec<usize> = ["one", "two", "four"]
        .iter()
        .map(|q| ready(&t, q))
        .collect();
    assert_eq!(depths, [1, 1, 0]);
}
