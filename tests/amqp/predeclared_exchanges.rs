//! Declaring the predeclared `amq.*` exchanges again, as RabbitMQ answers it: an existing
//! exchange is only compared (declare-ok when equivalent, 406 `inequivalent arg` otherwise);
//! the reserved-prefix refusal (403) is for names that do not exist yet. Code that redeclares
//! `amq.topic` before binding to it keeps its channel.

use std::future::Future;
use std::time::Duration;

use crate::common::*;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{Channel, ExchangeKind};

/// Every answer these tests wait for comes within this, or the test fails.
const ANSWER: Duration = Duration::from_secs(10);

async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(ANSWER, future)
        .await
        .unwrap_or_else(|_| panic!("no answer to {what} within {ANSWER:?}"))
}

async fn declare(
    ch: &Channel,
    name: &str,
    kind: ExchangeKind,
    options: ExchangeDeclareOptions,
) -> lapin::Result<()> {
    bounded(
        &format!("exchange.declare {name}"),
        ch.exchange_declare(name.into(), kind, options, FieldTable::default()),
    )
    .await
}

fn durable() -> ExchangeDeclareOptions {
    ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    }
}

fn kind_of(name: &str) -> ExchangeKind {
    match name {
        "amq.direct" => ExchangeKind::Direct,
        "amq.fanout" => ExchangeKind::Fanout,
        "amq.topic" => ExchangeKind::Topic,
        "amq.headers" | "amq.match" => ExchangeKind::Headers,
        other => panic!("not a predeclared exchange: {other}"),
    }
}

const PREDECLARED: [&str; 5] = [
    "amq.direct",
    "amq.fanout",
    "amq.topic",
    "amq.headers",
    "amq.match",
];

#[tokio::test]
async fn redeclaring_a_predeclared_exchange_as_it_is_answers_declare_ok() {
    let t = start().await;
    let ch = t.channel().await;
    for name in PREDECLARED {
        declare(&ch, name, kind_of(name), durable())
            .await
            .unwrap_or_else(|e| panic!("redeclaring {name} as it is: {e}"));
    }
    // The channel is still open and the exchange still routes: bind to it and publish.
    declare_queue(&ch, "topics").await;
    bounded(
        "queue.bind",
        ch.queue_bind(
            "topics".into(),
            "amq.topic".into(),
            "a.*".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .expect("bound to amq.topic");
    publish(&ch, "amq.topic", "a.b", "routed").await;
    let mut consumer = consume_no_ack(&ch, "topics").await;
    assert_eq!(next_body(&mut consumer).await, "routed");
}

#[tokio::test]
async fn redeclaring_a_predeclared_exchange_with_another_type_is_406() {
    let t = start().await;
    let cases = [
        ("amq.direct", ExchangeKind::Topic, "topic", "direct"),
        ("amq.topic", ExchangeKind::Direct, "direct", "topic"),
        ("amq.fanout", ExchangeKind::Headers, "headers", "fanout"),
        ("amq.headers", ExchangeKind::Fanout, "fanout", "headers"),
        ("amq.match", ExchangeKind::Direct, "direct", "headers"),
    ];
    for (name, kind, received, current) in cases {
        let ch = t.channel().await;
        let err = declare(&ch, name, kind, durable()).await.unwrap_err();
        assert_eq!(
            amqp_error(&err),
            (
                406,
                format!(
                    "PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{name}' in vhost '/': received '{received}' but current is '{current}'"
                )
            )
        );
    }
}

#[tokio::test]
async fn redeclaring_a_predeclared_exchange_as_transient_is_406_durable() {
    let t = start().await;
    let ch = t.channel().await;
    let err = declare(
        &ch,
        "amq.direct",
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'amq.direct' in vhost '/': received 'false' but current is 'true'".into()
        )
    );
}

#[tokio::test]
async fn a_new_amq_name_is_still_refused_with_403() {
    let t = start().await;
    let ch = t.channel().await;
    let err = declare(&ch, "amq.foo", ExchangeKind::Direct, durable())
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'".into()
        )
    );
}

#[tokio::test]
async fn passive_declares_find_predeclared_exchanges_and_refuse_the_default_one() {
    let t = start().await;
    let ch = t.channel().await;
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    // A passive declare compares nothing: the type sent does not matter.
    declare(&ch, "amq.direct", ExchangeKind::Fanout, passive)
        .await
        .expect("passive declare of amq.direct");
    // As rabbit_channel's check_not_default_exchange, passive or not.
    for options in [passive, durable()] {
        let ch = t.channel().await;
        let err = declare(&ch, "", ExchangeKind::Direct, options)
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
}
