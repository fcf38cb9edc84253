//! Arguments that belong to quorum queues only, declared on a classic queue through a real
//! client: refused as RabbitMQ 4.3 refuses them (its classic type's `queue_arguments` omit them
//! and `check_arguments_key` refuses the difference).

use crate::common::*;
use lapin::options::QueueDeclareOptions;
use lapin::types::AMQPValue;

#[tokio::test]
async fn a_classic_queue_refuses_the_quorum_only_arguments_with_406() {
    let t = start().await;
    for (key, value) in [
        ("x-delivery-limit", AMQPValue::LongInt(5)),
        ("x-delayed-retry-type", long_str("failed")),
        ("x-delayed-retry-min", AMQPValue::LongInt(1_000)),
        ("x-delayed-retry-max", AMQPValue::LongLongInt(8_000)),
    ] {
        let ch = t.channel().await;
        let declared = ch
            .queue_declare(
                "q".into(),
                QueueDeclareOptions::default(),
                table(&[(key, value)]),
            )
            .await;
        assert_eq!(
            channel_error(declared),
            (
                406,
                format!(
                    "PRECONDITION_FAILED - invalid arg '{key}' for queue 'q' in vhost '/' of \
                     queue type rabbit_classic_queue"
                )
            ),
            "{key}"
        );
    }
    // Nothing was declared; the same arguments on a quorum queue are its own.
    let ch = t.channel().await;
    assert!(
        passive_declare(&ch, "q").await.is_err(),
        "q was not declared"
    );
    let ch = t.channel().await;
    ch.queue_declare(
        "q".into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        table(&[
            ("x-queue-type", long_str("quorum")),
            ("x-delayed-retry-type", long_str("failed")),
            ("x-delayed-retry-min", AMQPValue::LongInt(1_000)),
            ("x-delayed-retry-max", AMQPValue::LongLongInt(8_000)),
        ]),
    )
    .await
    .expect("a quorum queue takes them");
}

#[tokio::test]
async fn a_quorum_queue_redeclared_with_another_retry_delay_is_inequivalent() {
    let t = start().await;
    let declare = |min: i32| {
        let t = &t;
        async move {
            let ch = t.channel().await;
            ch.queue_declare(
                "retrying".into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                table(&[
                    ("x-queue-type", long_str("quorum")),
                    ("x-delayed-retry-type", long_str("all")),
                    ("x-delayed-retry-min", AMQPValue::LongInt(min)),
                ]),
            )
            .await
        }
    };
    declare(1_000).await.expect("declared");
    declare(1_000).await.expect("the same arguments again");
    assert_eq!(
        channel_error(declare(2_000).await),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'x-delayed-retry-min' for queue 'retrying' in \
             vhost '/': received '2000' but current is '1000'"
                .into()
        )
    );
}
