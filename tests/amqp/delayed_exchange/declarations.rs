//! Declaring delayed exchanges: the plugin's errors, redeclaration and type mismatch texts.

use std::time::Duration;

use super::{publish_delayed, setup};
use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};

async fn declare_delayed_with(ch: &Channel, name: &str, inner: Option<&str>) -> lapin::Result<()> {
    let mut args = FieldTable::default();
    if let Some(inner) = inner {
        args.insert("x-delayed-type".into(), AMQPValue::LongString(inner.into()));
    }
    ch.exchange_declare(
        name.into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions::default(),
        args,
    )
    .await
}

#[tokio::test]
async fn bad_declarations_get_the_plugins_errors() {
    let t = start_manual().await;
    let channel_errors = [
        (None, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"),
        (Some("x-delayed-message"), "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"),
    ];
    for (inner, expected) in channel_errors {
        let ch = t.channel().await;
        let err = declare_delayed_with(&ch, "bad", inner).await.unwrap_err();
        assert_eq!(amqp_error(&err), (406, expected.to_string()));
    }
    // The plugin checks the name with RabbitMQ's own `check_type`: a connection error.
    let connection_errors = [
        (
            "nonexistent",
            "COMMAND_INVALID - unknown exchange type 'nonexistent'",
        ),
        ("x-foo", "COMMAND_INVALID - unknown exchange type 'x-foo'"),
        ("", "COMMAND_INVALID - invalid exchange type ''"),
    ];
    for (inner, expected) in connection_errors {
        let connection = connect(&t.broker).await;
        let ch = connection.create_channel().await.unwrap();
        let err = declare_delayed_with(&ch, "bad", Some(inner))
            .await
            .unwrap_err();
        assert_eq!(amqp_error(&err), (503, expected.to_string()), "{inner:?}");
        assert!(!connection.status().connected(), "{inner:?}");
    }
    assert!(!t.broker.exchange_names("/").contains(&"bad".to_string()));
}

#[tokio::test]
async fn redeclaring_ignores_x_delayed_type() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    // Checked only at creation, never compared: another type, none, or even a bad one.
    for inner in [
        Some("fanout"),
        None,
        Some("nonexistent"),
        Some("x-delayed-message"),
    ] {
        declare_delayed_with(&ch, "delayed", inner)
            .await
            .unwrap_or_else(|e| panic!("redeclare with {inner:?}: {e}"));
    }
    // Still routes as direct.
    publish_delayed(&ch, "delayed", "other", "m", Some(AMQPValue::LongInt(10))).await;
    publish_delayed(&ch, "delayed", "k", "m", Some(AMQPValue::LongInt(10))).await;
    sync(&ch).await;
    t.broker.advance(Duration::from_millis(10));
    assert_eq!(ready(&t, "out"), 1);
}

#[tokio::test]
async fn type_mismatch_texts_quote_the_delayed_type_as_erlang_does() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let err = ch
        .exchange_declare(
            "delayed".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'delayed' in vhost '/': \
             received 'direct' but current is ''x-delayed-message''"
                .into()
        )
    );
    let ch = t.channel().await;
    ch.exchange_declare(
        "plain".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let err = declare_delayed_with(&ch, "plain", Some("direct"))
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'plain' in vhost '/': \
             received ''x-delayed-message'' but current is 'direct'"
                .into()
        )
    );
}
