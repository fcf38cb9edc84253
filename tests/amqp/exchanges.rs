//! Exchange types, exchange-to-exchange bindings, alternate exchanges, auto-delete.

use crate::common::raw::RawClient;
use crate::common::*;
use bytes::BytesMut;
use dwellmq::codec::methods::{
    ExchangeBind, ExchangeDeclare, ExchangeDelete, ExchangeUnbind, QueueBind, QueueDeclare,
    QueueDelete, QueuePurge,
};
use dwellmq::codec::{encode_method, Method};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

async fn exchange(ch: &Channel, name: &str, kind: ExchangeKind, args: FieldTable) {
    ch.exchange_declare(name.into(), kind, ExchangeDeclareOptions::default(), args)
        .await
        .unwrap();
}

async fn bind(ch: &Channel, queue: &str, exchange: &str, key: &str, args: FieldTable) {
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        args,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn topic_patterns_route_as_rabbitmq() {
    let t = start().await;
    let ch = t.channel().await;
    exchange(&ch, "logs", ExchangeKind::Topic, FieldTable::default()).await;
    for (q, pattern) in [
        ("star", "app.*.error"),
        ("hash", "app.#"),
        ("exact", "app.web.error"),
    ] {
        declare_queue(&ch, q).await;
        bind(&ch, q, "logs", pattern, FieldTable::default()).await;
    }
    publish(&ch, "logs", "app.web.error", "1").await;
    publish(&ch, "logs", "app.db.pool.error", "2").await;
    publish(&ch, "logs", "app", "3").await;
    publish(&ch, "logs", "other.web.error", "4").await;
    assert_eq!(depth(&t, &ch, "star").await, 1);
    assert_eq!(depth(&t, &ch, "hash").await, 3);
    assert_eq!(depth(&t, &ch, "exact").await, 1);
}

#[tokio::test]
async fn fanout_and_direct_and_predeclared_exchanges() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "f1").await;
    declare_queue(&ch, "f2").await;
    bind(&ch, "f1", "amq.fanout", "", FieldTable::default()).await;
    bind(&ch, "f2", "amq.fanout", "ignored", FieldTable::default()).await;
    bind(&ch, "f1", "amq.direct", "k1", FieldTable::default()).await;
    publish(&ch, "amq.fanout", "whatever", "x").await;
    publish(&ch, "amq.direct", "k1", "y").await;
    publish(&ch, "amq.direct", "k2", "z").await;
    assert_eq!(depth(&t, &ch, "f1").await, 2);
    assert_eq!(depth(&t, &ch, "f2").await, 1);
}

#[tokio::test]
async fn headers_exchange_all_and_any() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "all").await;
    declare_queue(&ch, "any").await;
    let mut all = FieldTable::default();
    all.insert("x-match".into(), AMQPValue::LongString("all".into()));
    all.insert("format".into(), AMQPValue::LongString("pdf".into()));
    all.insert("type".into(), AMQPValue::LongString("report".into()));
    let mut any = all.clone();
    any.insert("x-match".into(), AMQPValue::LongString("any".into()));
    bind(&ch, "all", "amq.headers", "", all).await;
    bind(&ch, "any", "amq.headers", "", any).await;
    let mut both = FieldTable::default();
    both.insert("format".into(), AMQPValue::LongString("pdf".into()));
    both.insert("type".into(), AMQPValue::LongString("report".into()));
    let mut one = FieldTable::default();
    one.insert("format".into(), AMQPValue::LongString("pdf".into()));
    publish_with(
        &ch,
        "amq.headers",
        "",
        b"both",
        BasicProperties::default().with_headers(both),
    )
    .await;
    publish_with(
        &ch,
        "amq.headers",
        "",
        b"one",
        BasicProperties::default().with_headers(one),
    )
    .await;
    assert_eq!(depth(&t, &ch, "all").await, 1);
    assert_eq!(depth(&t, &ch, "any").await, 2);
}

#[tokio::test]
async fn exchange_to_exchange_bindings_forward_messages() {
    let t = start().await;
    let ch = t.channel().await;
    exchange(&ch, "front", ExchangeKind::Topic, FieldTable::default()).await;
    exchange(&ch, "back", ExchangeKind::Fanout, FieldTable::default()).await;
    ch.exchange_bind(
        "back".into(),
        "front".into(),
        "orders.*".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare_queue(&ch, "e2e").await;
    bind(&ch, "e2e", "back", "", FieldTable::default()).await;
    publish(&ch, "front", "orders.new", "yes").await;
    publish(&ch, "front", "users.new", "no").await;
    assert_eq!(depth(&t, &ch, "e2e").await, 1);
    ch.exchange_unbind(
        "back".into(),
        "front".into(),
        "orders.*".into(),
        ExchangeUnbindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish(&ch, "front", "orders.new", "no longer").await;
    assert_eq!(depth(&t, &ch, "e2e").await, 1);
}

#[tokio::test]
async fn unroutable_messages_go_to_the_alternate_exchange() {
    let t = start().await;
    let ch = t.channel().await;
    exchange(&ch, "ae", ExchangeKind::Fanout, FieldTable::default()).await;
    declare_queue(&ch, "unrouted").await;
    bind(&ch, "unrouted", "ae", "", FieldTable::default()).await;
    let mut args = FieldTable::default();
    args.insert(
        "alternate-exchange".into(),
        AMQPValue::LongString("ae".into()),
    );
    exchange(&ch, "main", ExchangeKind::Direct, args).await;
    declare_queue(&ch, "routed").await;
    bind(&ch, "routed", "main", "known", FieldTable::default()).await;
    publish(&ch, "main", "known", "a").await;
    publish(&ch, "main", "unknown", "b").await;
    assert_eq!(depth(&t, &ch, "routed").await, 1);
    assert_eq!(depth(&t, &ch, "unrouted").await, 1);
}

/// `alternate-exchange` as the argument of `exchange`.
fn with_alternate(exchange: &str) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "alternate-exchange".into(),
        AMQPValue::LongString(exchange.into()),
    );
    args
}

/// As RabbitMQ's `rabbit_exchange:route1/3` (`process_alternate`): each exchange on the walk
/// whose own bindings matched nothing hands the message to its alternate exchange; one that
/// matched a binding, even to an exchange that then routes nowhere, does not.
#[tokio::test]
async fn each_exchange_on_the_way_hands_what_it_cannot_route_to_its_own_alternate() {
    let t = start().await;
    let ch = t.channel().await;
    exchange(&ch, "front-ae", ExchangeKind::Fanout, FieldTable::default()).await;
    exchange(
        &ch,
        "middle-ae",
        ExchangeKind::Fanout,
        FieldTable::default(),
    )
    .await;
    exchange(
        &ch,
        "front",
        ExchangeKind::Direct,
        with_alternate("front-ae"),
    )
    .await;
    exchange(
        &ch,
        "middle",
        ExchangeKind::Direct,
        with_alternate("middle-ae"),
    )
    .await;
    exchange(&ch, "dead-end", ExchangeKind::Direct, FieldTable::default()).await;
    for (queue, source, key) in [
        ("direct", "front", "both"),
        ("front-fallback", "front-ae", ""),
        ("middle-fallback", "middle-ae", ""),
    ] {
        declare_queue(&ch, queue).await;
        bind(&ch, queue, source, key, FieldTable::default()).await;
    }
    for (destination, key) in [("middle", "both"), ("dead-end", "nowhere")] {
        ch.exchange_bind(
            destination.into(),
            "front".into(),
            key.into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    // front matches "direct" and middle; middle matches nothing: its alternate takes it.
    publish(&ch, "front", "both", "1").await;
    // front matches dead-end, which routes nowhere and has no alternate: dropped.
    publish(&ch, "front", "nowhere", "2").await;
    // front matches nothing: its alternate takes it.
    publish(&ch, "front", "unbound", "3").await;
    assert_eq!(depth(&t, &ch, "direct").await, 1);
    assert_eq!(depth(&t, &ch, "middle-fallback").await, 1);
    assert_eq!(depth(&t, &ch, "front-fallback").await, 1);
    let got = ch
        .basic_get("front-fallback".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(got.delivery.data, b"3");
}

#[tokio::test]
async fn exchange_delete_if_unused_and_auto_delete() {
    let t = start().await;
    let ch = t.channel().await;
    exchange(&ch, "used", ExchangeKind::Direct, FieldTable::default()).await;
    declare_queue(&ch, "uq").await;
    bind(&ch, "uq", "used", "k", FieldTable::default()).await;
    let err = ch
        .exchange_delete(
            "used".into(),
            ExchangeDeleteOptions {
                if_unused: true,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - exchange 'used' in vhost '/' in use".into()
        )
    );
    let ch = t.channel().await;
    ch.exchange_declare(
        "temp".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    bind(&ch, "uq", "temp", "k", FieldTable::default()).await;
    assert!(t.broker.exchange_names("/").contains(&"temp".to_string()));
    ch.queue_unbind(
        "uq".into(),
        "temp".into(),
        "k".into(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert!(!t.broker.exchange_names("/").contains(&"temp".to_string()));
}

#[tokio::test]
async fn unknown_exchange_type_closes_the_connection_with_503() {
    let t = start().await;
    let ch = t.channel().await;
    let err = ch
        .exchange_declare(
            "weird".into(),
            ExchangeKind::Custom("x-unknown".into()),
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            503,
            "COMMAND_INVALID - unknown exchange type 'x-unknown'".into()
        )
    );
    // The empty name is an atom Erlang knows, so RabbitMQ calls it invalid, not unknown.
    let ch = connect(&t.broker).await.create_channel().await.unwrap();
    let err = ch
        .exchange_declare(
            "weird".into(),
            ExchangeKind::Custom("".into()),
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (503, "COMMAND_INVALID - invalid exchange type ''".into())
    );
}

/// Sends `methods` on channel 1 of `client` in one write.
async fn send_all(client: &mut RawClient, methods: &[Method]) {
    let mut out = BytesMut::new();
    for method in methods {
        encode_method(&mut out, 1, method);
    }
    client.send_raw(&out).await;
}

#[tokio::test]
async fn no_wait_declares_binds_purges_and_deletes_take_effect_without_replies() {
    let t = start().await;
    let mut client = RawClient::open(t.broker.local_addr()).await;
    client.open_channel(1).await;
    send_all(
        &mut client,
        &[
            Method::ExchangeDeclare(ExchangeDeclare {
                exchange: "nw-front".into(),
                kind: "fanout".into(),
                no_wait: true,
                ..Default::default()
            }),
            Method::ExchangeDeclare(ExchangeDeclare {
                exchange: "nw-back".into(),
                kind: "direct".into(),
                no_wait: true,
                ..Default::default()
            }),
            Method::QueueDeclare(QueueDeclare {
                queue: "nw-q".into(),
                no_wait: true,
                ..Default::default()
            }),
            Method::ExchangeBind(ExchangeBind {
                destination: "nw-back".into(),
                source: "nw-front".into(),
                no_wait: true,
                ..Default::default()
            }),
            Method::QueueBind(QueueBind {
                queue: "nw-q".into(),
                exchange: "nw-back".into(),
                routing_key: "k".into(),
                no_wait: true,
                ..Default::default()
            }),
        ],
    )
    .await;
    // No -ok for any of them: the next reply is this declare's. They all took effect: a
    // publish to the front exchange reaches the queue through both bindings.
    assert_eq!(client.queue_depth(1, "nw-q").await, 0);
    client.publish(1, "nw-front", "k", b"routed").await;
    assert_eq!(client.queue_depth(1, "nw-q").await, 1);

    send_all(
        &mut client,
        &[
            Method::QueuePurge(QueuePurge {
                queue: "nw-q".into(),
                no_wait: true,
            }),
            Method::ExchangeUnbind(ExchangeUnbind {
                destination: "nw-back".into(),
                source: "nw-front".into(),
                no_wait: true,
                ..Default::default()
            }),
        ],
    )
    .await;
    assert_eq!(client.queue_depth(1, "nw-q").await, 0);
    client.publish(1, "nw-front", "k", b"unbound").await;
    assert_eq!(client.queue_depth(1, "nw-q").await, 0);

    send_all(
        &mut client,
        &[
            Method::QueueDelete(QueueDelete {
                queue: "nw-q".into(),
                no_wait: true,
                ..Default::default()
            }),
            Method::ExchangeDelete(ExchangeDelete {
                exchange: "nw-front".into(),
                no_wait: true,
                ..Default::default()
            }),
            Method::ExchangeDelete(ExchangeDelete {
                exchange: "nw-back".into(),
                no_wait: true,
                ..Default::default()
            }),
            Method::QueueDeclare(QueueDeclare {
                queue: "nw-q".into(),
                passive: true,
                ..Default::default()
            }),
        ],
    )
    .await;
    assert_eq!(
        client.expect_channel_close(1).await,
        (
            404,
            "NOT_FOUND - no queue 'nw-q' in vhost '/'".into(),
            50,
            10
        )
    );
    let names = t.broker.exchange_names("/");
    assert!(!names.iter().any(|n| n.starts_with("nw-")), "{names:?}");
}
