//! The Rust example from README.md, kept compiling and passing so the README stays true.

use std::time::Duration;

use dwellmq::{Broker, BrokerConfig};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};

#[tokio::test]
async fn reminder_fires_after_a_day() {
    // In memory, on a free port, with time that moves only when the test says so.
    let broker = Broker::start(BrokerConfig::ephemeral().with_manual_clock(0))
        .await
        .unwrap();
    let conn = Connection::connect(
        &format!("{}/%2f", broker.amqp_url()),
        ConnectionProperties::default(),
    )
    .await
    .unwrap();
    let ch = conn.create_channel().await.unwrap();

    let mut args = FieldTable::default();
    args.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("direct".into()),
    );
    ch.exchange_declare(
        "reminders".into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions::default(),
        args,
    )
    .await
    .unwrap();
    ch.queue_declare(
        "due".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        "due".into(),
        "reminders".into(),
        "user.42".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();

    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), AMQPValue::LongLongInt(24 * 3600 * 1000));
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    ch.basic_publish(
        "reminders".into(),
        "user.42".into(),
        BasicPublishOptions::default(),
        b"call mum",
        BasicProperties::default().with_headers(headers),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 1);

    let mut consumer = ch
        .basic_consume(
            "due".into(),
            "".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    broker.advance(Duration::from_secs(24 * 3600)); // releases everything due, in due order
    let delivery = consumer.next().await.unwrap().unwrap();
    assert_eq!(delivery.data, b"call mum");
    broker.shutdown().await;
}
