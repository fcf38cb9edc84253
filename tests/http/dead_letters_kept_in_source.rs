//! What at-least-once dead-lettering keeps in its quorum source queue counts as RabbitMQ counts
//! it: in the queue's total (`messages`, with `messages_dlx`, never ready) and toward its
//! `x-max-length`, so that the `reject-publish` source refuses new messages meanwhile.

use std::net::SocketAddr;

use crate::common::*;
use crate::http_client::*;
use dwellmq::BrokerConfig;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

async fn publish_confirmed(ch: &Channel, body: &str) -> bool {
    ch.basic_publish(
        "".into(),
        "src".into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default(),
    )
    .await
    .expect("published")
    .await
    .expect("confirm")
    .is_ack()
}

#[tokio::test]
async fn kept_dead_letters_count_in_the_total_and_toward_the_length_limit() {
    let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let t = start_with(config).await;
    let addr = t.broker.http_addr().expect("HTTP on");
    let ch = t.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut args = FieldTable::default();
    for (key, value) in [
        ("x-queue-type", "quorum"),
        ("x-dead-letter-exchange", "dlx"),
        ("x-dead-letter-strategy", "at-least-once"),
        ("x-overflow", "reject-publish"),
    ] {
        args.insert(key.into(), AMQPValue::LongString(value.into()));
    }
    args.insert("x-max-length".into(), AMQPValue::LongInt(1));
    ch.queue_declare(
        "src".into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .unwrap();
    assert!(publish_confirmed(&ch, "m1").await);
    let got = ch
        .basic_get("src".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("m1");
    got.delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .unwrap();
    sync(&ch).await;

    let queue = get(addr, "/api/queues/%2F/src", GUEST).await.json();
    assert_eq!(
        (
            &queue["messages"],
            &queue["messages_ready"],
            &queue["messages_dlx"],
            &queue["message_bytes_dlx"]
        ),
        (&1.into(), &0.into(), &1.into(), &2.into()),
        "{queue}"
    );
    assert!(
        !publish_confirmed(&ch, "m2").await,
        "full with the kept dead letter: refused"
    );

    ch.queue_declare(
        "dead".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "src".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert!(
        publish_confirmed(&ch, "m3").await,
        "room again once it left"
    );
    let queue = get(addr, "/api/queues/%2F/src", GUEST).await.json();
    assert_eq!(
        (&queue["messages"], &queue["messages_dlx"]),
        (&1.into(), &0.into()),
        "{queue}"
    );
}
