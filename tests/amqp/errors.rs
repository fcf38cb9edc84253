//! Channel and connection errors: RabbitMQ's reply codes and texts, and that a channel error
//! leaves the connection (and other connections) working.

use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};

#[tokio::test]
async fn passive_declare_of_missing_queue_is_404_and_only_closes_the_channel() {
    let t = start().await;
    let ch = t.channel().await;
    let err = passive_declare(&ch, "nope").await.unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (404, "NOT_FOUND - no queue 'nope' in vhost '/'".into())
    );
    // The connection survives: a new channel works.
    let ch2 = t.channel().await;
    declare_queue(&ch2, "fine").await;
}

#[tokio::test]
async fn publish_to_missing_exchange_is_404() {
    let t = start().await;
    let ch = t.channel().await;
    let error = publish_error(&ch, "no-such-x", "k", BasicProperties::default()).await;
    assert_eq!(
        error,
        (
            404,
            "NOT_FOUND - no exchange 'no-such-x' in vhost '/'".into()
        )
    );
}

#[tokio::test]
async fn redeclare_with_different_durability_or_arguments_is_406() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "eq").await;
    let err = ch
        .queue_declare(
            "eq".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'eq' in vhost '/': received 'true' but current is 'false'".into()
        )
    );
    let ch = t.channel().await;
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongInt(10));
    let err = ch
        .queue_declare("eq".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap_err();
    let (code, text) = amqp_error(&err);
    assert_eq!(code, 406);
    assert!(
        text.starts_with("PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'eq'"),
        "{text}"
    );
}

#[tokio::test]
async fn exchange_redeclare_with_another_type_is_406() {
    let t = start().await;
    let ch = t.channel().await;
    ch.exchange_declare(
        "x1".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let err = ch
        .exchange_declare(
            "x1".into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'x1' in vhost '/': received 'fanout' but current is 'direct'".into()
        )
    );
}

#[tokio::test]
async fn reserved_amq_names_are_refused_with_403() {
    let t = start().await;
    let ch = t.channel().await;
    let err = ch
        .exchange_declare(
            "amq.mine".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'".into()
        )
    );
    let ch = t.channel().await;
    let err = ch
        .queue_declare(
            "amq.q".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'".into()
        )
    );
}

#[tokio::test]
async fn acking_an_unknown_delivery_tag_is_406() {
    let t = start().await;
    let ch = t.channel().await;
    let error = error_after(&ch, ch.basic_ack(42, BasicAckOptions::default())).await;
    assert_eq!(
        error,
        (406, "PRECONDITION_FAILED - unknown delivery tag 42".into())
    );
}

#[tokio::test]
async fn exclusive_queue_is_locked_to_its_connection_and_deleted_with_it() {
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
    let och = other.create_channel().await.unwrap();
    let err = och
        .basic_consume(
            "mine".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    let (code, text) = amqp_error(&err);
    assert_eq!(code, 405);
    assert!(
        text.starts_with(
            "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'mine' in vhost '/'"
        ),
        "{text}"
    );
    t.connection.close(200, "bye".into()).await.unwrap();
    let och = other.create_channel().await.unwrap();
    let err = passive_declare(&och, "mine").await.unwrap_err();
    assert_eq!(amqp_error(&err).0, 404);
}

#[tokio::test]
async fn queue_delete_if_empty_and_if_unused_refuse_with_406() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "busy").await;
    ch.basic_publish(
        "".into(),
        "busy".into(),
        BasicPublishOptions::default(),
        b"x",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    let err = ch
        .queue_delete(
            "busy".into(),
            QueueDeleteOptions {
                if_empty: true,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - queue 'busy' in vhost '/' not empty".into()
        )
    );
    let ch = t.channel().await;
    let _consumer = consume_no_ack(&ch, "busy").await;
    let ch2 = t.channel().await;
    let err = ch2
        .queue_delete(
            "busy".into(),
            QueueDeleteOptions {
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
            "PRECONDITION_FAILED - queue 'busy' in vhost '/' in use".into()
        )
    );
}

#[tokio::test]
async fn wrong_password_is_refused_with_403() {
    let t = start().await;
    let url = t
        .broker
        .amqp_url()
        .replace("amqp://", "amqp://guest:wrong@");
    let err = lapin::Connection::connect(&format!("{url}/%2f"), Default::default())
        .await
        .expect_err("login refused");
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
             For details see the broker logfile."
                .into()
        )
    );
}

#[tokio::test]
async fn unknown_vhost_is_refused_with_530() {
    let t = start().await;
    let err = lapin::Connection::connect(
        &format!("{}/nowhere", t.broker.amqp_url()),
        Default::default(),
    )
    .await
    .expect_err("vhost refused");
    assert_eq!(
        amqp_error(&err),
        (530, "NOT_ALLOWED - vhost nowhere not found".into())
    );
}

#[tokio::test]
async fn a_message_above_max_message_size_is_406_with_rabbitmqs_text() {
    let mut config = dwellmq::BrokerConfig::ephemeral();
    config.limits.max_message_size = 100;
    let t = start_with(config).await;
    let ch = t.channel().await;
    declare_queue(&ch, "sized").await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let at_limit = [b'a'; 100];
    let over = [b'b'; 101];
    let mut confirms = Vec::new();
    for body in [&at_limit[..], &over[..]] {
        let confirm = ch
            .basic_publish(
                "".into(),
                "sized".into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default(),
            )
            .await
            .expect("publish sent");
        confirms.push(confirm);
    }
    let over = confirms.pop().unwrap().await.unwrap_err();
    // The limit itself is allowed.
    let at_limit = confirms.pop().unwrap().await.unwrap();
    assert!(at_limit.is_ack(), "{at_limit:?}");
    assert_eq!(
        amqp_error(&over),
        (
            406,
            "PRECONDITION_FAILED - message size 101 is larger than configured max size 100".into()
        )
    );
    assert_eq!(t.broker.queue_info("/", "sized").unwrap().messages, 1);
}

#[tokio::test]
async fn publishing_to_an_internal_exchange_is_403() {
    let t = start().await;
    let ch = t.channel().await;
    ch.exchange_declare(
        "inner".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            internal: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    let ch = t.channel().await;
    assert_eq!(
        publish_error(&ch, "inner", "k", BasicProperties::default()).await,
        (
            403,
            "ACCESS_REFUSED - cannot publish to internal exchange 'inner' in vhost '/'".into()
        )
    );
}
