//! Publishing over HTTP takes the same steps as `basic.publish` (`broker::publish`): `BCC`
//! routes and leaves the message, a malformed `CC` is refused, an `x-delay` a standard exchange
//! cannot read is ignored, an unroutable message is counted as dropped and the exchange counts
//! what it was given.

use std::net::SocketAddr;

use crate::common::*;
use crate::http_client::*;
use dwellmq::BrokerConfig;
use lapin::options::{BasicGetOptions, QueueBindOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::BasicProperties;
use serde_json::json;

async fn start_api() -> (TestBroker, SocketAddr) {
    let mut config = BrokerConfig::ephemeral();
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let broker = start_with(config).await;
    let addr = broker.broker.http_addr().expect("HTTP on");
    (broker, addr)
}

async fn publish_over_http(addr: SocketAddr, headers: serde_json::Value) -> Reply {
    post(
        addr,
        "/api/exchanges/%2F/amq.direct/publish",
        GUEST,
        json!({"properties": {"headers": headers}, "routing_key": "a",
               "payload": "hello", "payload_encoding": "string"}),
    )
    .await
}

#[tokio::test]
async fn http_publish_follows_basic_publish_for_cc_bcc_and_x_delay() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    for queue in ["a", "b"] {
        declare_queue(&ch, queue).await;
        let bind = ch.queue_bind(
            queue.into(),
            "amq.direct".into(),
            queue.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        );
        bounded("queue.bind", bind).await.unwrap();
    }
    let get = |queue: &'static str| {
        let ch = ch.clone();
        async move {
            let get = ch.basic_get(queue.into(), BasicGetOptions { no_ack: true });
            bounded("basic.get", get).await.unwrap().expect("a message")
        }
    };

    // BCC routes to "b" too, and neither copy carries it.
    let reply = publish_over_http(addr, json!({"BCC": ["b"]})).await;
    assert_eq!(reply.json(), json!({"routed": true}));
    for queue in ["a", "b"] {
        let got = get(queue).await;
        let headers = got.properties.headers().clone().unwrap_or_default();
        assert!(
            !headers.inner().contains_key("BCC"),
            "{queue} got the BCC header"
        );
    }

    // A CC header that is not an array is refused, as basic.publish refuses it.
    let reply = publish_over_http(addr, json!({"CC": "b"})).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    assert!(
        reply.text().contains("406 PRECONDITION_FAILED"),
        "{}",
        reply.text()
    );

    // A standard exchange ignores an x-delay it cannot read (a delayed exchange would refuse).
    let reply = publish_over_http(addr, json!({"x-delay": "soon"})).await;
    assert_eq!(reply.json(), json!({"routed": true}));
    assert_eq!(get("a").await.delivery.data, b"hello");
}

#[tokio::test]
async fn an_unroutable_message_with_an_x_delay_on_a_standard_exchange_counts_as_dropped_either_way_in(
) {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    declare_queue(&ch, "a").await;
    let bind = ch.queue_bind(
        "a".into(),
        "amq.direct".into(),
        "a".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    );
    bounded("queue.bind", bind).await.unwrap();
    // No delayed exchange holds it: unroutable now, whatever its x-delay says.
    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), AMQPValue::LongInt(5000));
    let properties = BasicProperties::default().with_headers(headers);
    publish_with(&ch, "amq.direct", "nowhere", b"by amqp", properties).await;
    sync(&ch).await;
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.direct/publish",
        GUEST,
        json!({"properties": {"headers": {"x-delay": 5000}}, "routing_key": "nowhere",
               "payload": "by http", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(reply.json(), json!({"routed": false}));
    let reply = publish_over_http(addr, json!({})).await;
    assert_eq!(reply.json(), json!({"routed": true}));

    let overview = get(addr, "/api/overview", GUEST).await.json();
    let stats = &overview["message_stats"];
    assert_eq!(stats["publish"], 3, "{stats}");
    assert_eq!(stats["drop_unroutable"], 2, "{stats}");
    // RabbitMQ publishes an HTTP message through a channel: the exchange counts it as well.
    let exchange = get(addr, "/api/exchanges/%2F/amq.direct", GUEST)
        .await
        .json();
    let stats = &exchange["message_stats"];
    assert_eq!(stats["publish_in"], 3, "{stats}");
    assert_eq!(stats["publish_out"], 1, "{stats}");
}

/// Direct reply-to over HTTP takes the pipeline's steps as `basic.publish` does: a request
/// asking for a direct reply is refused (an HTTP publisher has no reply consumer), as RabbitMQ
/// refuses it on a channel without one; a reply to a reply address reaches its consumer.
#[tokio::test]
async fn http_publish_takes_direct_reply_to_as_basic_publish_does() {
    let (t, addr) = start_api().await;
    let client = t.channel().await;
    declare_queue(&client, "rpc").await;

    let request = post(
        addr,
        "/api/exchanges/%2F/amq.default/publish",
        GUEST,
        json!({"properties": {"reply_to": "amq.rabbitmq.reply-to"}, "routing_key": "rpc",
               "payload": "ping", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(request.status, 400, "{}", request.text());
    assert!(
        request
            .text()
            .contains("fast reply consumer does not exist"),
        "{}",
        request.text()
    );

    let mut replies = consume(&client, "amq.rabbitmq.reply-to", "replies", true).await;
    let properties = BasicProperties::default().with_reply_to("amq.rabbitmq.reply-to".into());
    publish_with(&client, "", "rpc", b"ping", properties).await;
    let get = client.basic_get("rpc".into(), BasicGetOptions { no_ack: true });
    let got = bounded("basic.get", get)
        .await
        .unwrap()
        .expect("the request");
    let address = got
        .delivery
        .properties
        .reply_to()
        .clone()
        .expect("reply_to");
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.default/publish",
        GUEST,
        json!({"properties": {}, "routing_key": address.as_str(),
               "payload": "pong", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(reply.json(), json!({"routed": true}));
    let delivered = next_delivery(&mut replies).await;
    assert_eq!(delivered.data, b"pong");
}
