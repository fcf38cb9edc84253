//! `parse_queue_arguments` against RabbitMQ's texts and order.

use bytes::Bytes;
use dwellmq_codec::{FieldTable, FieldValue};

use super::*;
use crate::error::BrokerError;

fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
    entries.iter().cloned().collect()
}

fn classic(entries: &[(&str, FieldValue)]) -> Result<QueueArguments, BrokerError> {
    parse_queue_arguments("q", "/", &table(entries), false, false, false)
}

fn quorum(entries: &[(&str, FieldValue)]) -> Result<QueueArguments, BrokerError> {
    let mut t = table(entries);
    t.insert("x-queue-type", "quorum");
    parse_queue_arguments("q", "/", &t, true, false, false)
}

fn text(r: Result<QueueArguments, BrokerError>) -> String {
    match r {
        Err(BrokerError::PreconditionFailed(t)) => t,
        other => panic!("expected 406, got {other:?}"),
    }
}

#[test]
fn empty_arguments_give_defaults() {
    let a = classic(&[]).unwrap();
    assert_eq!(a, QueueArguments::default());
    assert_eq!(a.effective_delivery_limit(None), None);
}

#[test]
fn parses_every_classic_argument() {
    let a = classic(&[
        ("x-message-ttl", FieldValue::I32(1000)),
        ("x-expires", FieldValue::U32(60000)),
        ("x-max-length", FieldValue::I16(10)),
        ("x-max-length-bytes", FieldValue::I64(1 << 20)),
        ("x-overflow", "reject-publish-dlx".into()),
        ("x-dead-letter-exchange", "dlx".into()),
        ("x-dead-letter-routing-key", "dead".into()),
        ("x-single-active-consumer", true.into()),
        ("x-max-priority", FieldValue::U8(10)),
        ("x-queue-mode", "lazy".into()),
        ("x-queue-version", FieldValue::I8(2)),
        ("x-some-plugin-arg", "ignored".into()),
    ])
    .unwrap();
    assert_eq!(a.message_ttl, Some(1000));
    assert_eq!(a.expires, Some(60000));
    assert_eq!(a.max_length, Some(10));
    assert_eq!(a.max_length_bytes, Some(1 << 20));
    assert_eq!(a.overflow, Overflow::RejectPublishDlx);
    assert_eq!(a.dead_letter_exchange.as_deref(), Some("dlx"));
    assert_eq!(a.dead_letter_routing_key.as_deref(), Some("dead"));
    assert!(a.single_active_consumer);
    assert_eq!(a.max_priority, Some(10));
    assert_eq!(a.queue_type, QueueType::Classic);
}

#[test]
fn ttl_errors_match_rabbitmq() {
    assert_eq!(
        text(classic(&[("x-message-ttl", FieldValue::I32(-1))])),
        "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"
    );
    assert_eq!(
        text(classic(&[("x-message-ttl", "1000".into())])),
        "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': \"expected integer, got longstr\""
    );
    assert_eq!(
        text(classic(&[(
            "x-message-ttl",
            FieldValue::I64(315_360_000_001)
        )])),
        "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_too_large,315360000001}"
    );
    assert_eq!(
        text(classic(&[("x-message-ttl", FieldValue::F64(1.0))])),
        "invalid arg 'x-message-ttl' for queue 'q' in vhost '/': \"expected integer, got double\""
    );
    assert_eq!(
        classic(&[("x-message-ttl", FieldValue::I8(0))])
            .unwrap()
            .message_ttl,
        Some(0)
    );
}

#[test]
fn expires_errors_match_rabbitmq() {
    assert_eq!(
        text(classic(&[("x-expires", FieldValue::I32(0))])),
        "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}"
    );
    assert_eq!(
        text(classic(&[("x-expires", FieldValue::I32(-5))])),
        "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_negative,-5}"
    );
    assert_eq!(
        text(classic(&[("x-expires", FieldValue::Timestamp(5))])),
        "invalid arg 'x-expires' for queue 'q' in vhost '/': \"expected integer, got timestamp\""
    );
}

#[test]
fn the_first_failing_argument_in_rabbitmq_order_wins() {
    // x-expires is checked before x-message-ttl whatever the table order.
    assert_eq!(
        text(classic(&[
            ("x-message-ttl", FieldValue::I32(-1)),
            ("x-expires", FieldValue::I32(0)),
        ])),
        "invalid arg 'x-expires' for queue 'q' in vhost '/': {value_zero,0}"
    );
}

#[test]
fn length_priority_and_mode_errors() {
    assert_eq!(
        text(classic(&[("x-max-length", FieldValue::I32(-1))])),
        "invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}"
    );
    assert_eq!(
        text(classic(&[("x-max-length-bytes", FieldValue::Bool(true))])),
        "invalid arg 'x-max-length-bytes' for queue 'q' in vhost '/': \"expected integer, got bool\""
    );
    assert_eq!(
        text(classic(&[("x-max-priority", FieldValue::I32(256))])),
        "invalid arg 'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,256}"
    );
    assert_eq!(
        text(classic(&[("x-queue-mode", "fast".into())])),
        "invalid arg 'x-queue-mode' for queue 'q' in vhost '/': \"unsupported queue mode 'fast'\""
    );
    assert_eq!(
        text(classic(&[("x-queue-version", FieldValue::I32(3))])),
        "invalid arg 'x-queue-version' for queue 'q' in vhost '/': \"unsupported queue version '3'\""
    );
}

#[test]
fn overflow_errors() {
    assert_eq!(
        text(classic(&[("x-overflow", "drop-tail".into())])),
        "invalid arg 'x-overflow' for queue 'q' in vhost '/': invalid_overflow"
    );
    assert_eq!(
        text(classic(&[("x-overflow", FieldValue::I32(1))])),
        "invalid arg 'x-overflow' for queue 'q' in vhost '/': {unacceptable_type,signedint}"
    );
    assert_eq!(
        classic(&[("x-overflow", "reject-publish".into())])
            .unwrap()
            .overflow,
        Overflow::RejectPublish
    );
}

#[test]
fn dead_letter_errors() {
    assert_eq!(
        text(classic(&[("x-dead-letter-routing-key", "rk".into())])),
        "invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost '/': routing_key_but_no_dlx_defined"
    );
    assert_eq!(
        text(classic(&[("x-dead-letter-exchange", FieldValue::I64(1))])),
        "invalid type 'long' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"
    );
    assert_eq!(
        text(classic(&[
            ("x-dead-letter-exchange", "dlx".into()),
            ("x-dead-letter-routing-key", FieldValue::I8(1)),
        ])),
        "invalid arg 'x-dead-letter-routing-key' for queue 'q' in vhost '/': {unacceptable_type,byte}"
    );
    // An empty DLX name is the default exchange, and valid.
    let a = classic(&[("x-dead-letter-exchange", "".into())]).unwrap();
    assert_eq!(a.dead_letter_exchange.as_deref(), Some(""));
}

#[test]
fn single_active_consumer_must_be_bool() {
    assert_eq!(
        text(classic(&[("x-single-active-consumer", "true".into())])),
        "invalid arg 'x-single-active-consumer' for queue 'q' in vhost '/': {unacceptable_type,longstr}"
    );
}

#[test]
fn queue_type_errors() {
    assert_eq!(
        text(classic(&[("x-queue-type", "stream".into())])),
        "invalid arg 'x-queue-type' for queue 'q' in vhost '/': \"unsupported queue type 'stream'\""
    );
    assert_eq!(
        text(classic(&[("x-queue-type", FieldValue::I32(1))])),
        "invalid arg 'x-queue-type' for queue 'q' in vhost '/': {unacceptable_type,signedint}"
    );
    assert_eq!(
        classic(&[("x-queue-type", "classic".into())])
            .unwrap()
            .queue_type,
        QueueType::Classic
    );
}

#[test]
fn quorum_properties_are_checked_in_rabbitmq_order() {
    let t = table(&[("x-queue-type", "quorum".into())]);
    let err = |d, e, a| text(parse_queue_arguments("q", "/", &t, d, e, a));
    assert_eq!(
        err(false, true, true),
        "invalid property 'auto-delete' for queue 'q' in vhost '/'"
    );
    assert_eq!(
        err(false, true, false),
        "invalid property 'exclusive-owner' for queue 'q' in vhost '/'"
    );
    assert_eq!(
        err(false, false, false),
        "invalid property 'non-durable' for queue 'q' in vhost '/'"
    );
    assert!(parse_queue_arguments("q", "/", &t, true, false, false).is_ok());
}

#[test]
fn arguments_of_other_queue_types_are_refused() {
    assert_eq!(
        text(quorum(&[("x-max-priority", FieldValue::I32(5))])),
        "invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue"
    );
    assert_eq!(
        text(classic(&[("x-delivery-limit", FieldValue::I32(5))])),
        "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"
    );
    assert_eq!(
        text(classic(&[("x-max-age", "1D".into())])),
        "invalid arg 'x-max-age' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"
    );
    // RabbitMQ 4.3: the delayed-retry arguments are the quorum type's only.
    for (key, value) in [
        ("x-delayed-retry-type", FieldValue::from("failed")),
        ("x-delayed-retry-min", FieldValue::I32(1000)),
        ("x-delayed-retry-max", FieldValue::I64(8000)),
    ] {
        assert_eq!(
            text(classic(&[(key, value)])),
            format!(
                "invalid arg '{key}' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"
            )
        );
    }
}

#[test]
fn quorum_delivery_limit() {
    let a = quorum(&[]).unwrap();
    assert_eq!(a.delivery_limit, None);
    assert_eq!(a.effective_delivery_limit(None), Some(20));
    assert_eq!(a.effective_delivery_limit(Some(50)), Some(50));
    assert_eq!(a.effective_delivery_limit(Some(-1)), None);

    let a = quorum(&[("x-delivery-limit", FieldValue::I64(5))]).unwrap();
    assert_eq!(a.effective_delivery_limit(None), Some(5));
    assert_eq!(a.effective_delivery_limit(Some(3)), Some(3));
    assert_eq!(a.effective_delivery_limit(Some(-1)), Some(5));

    let a = quorum(&[("x-delivery-limit", FieldValue::I64(-1))]).unwrap();
    assert_eq!(a.effective_delivery_limit(None), None);
    assert_eq!(a.effective_delivery_limit(Some(7)), Some(7));

    assert_eq!(
        text(quorum(&[("x-delivery-limit", "5".into())])),
        "invalid arg 'x-delivery-limit' for queue 'q' in vhost '/': \"expected integer, got longstr\""
    );
}

#[test]
fn quorum_overflow_reject_publish_dlx_becomes_drop_head() {
    let a = quorum(&[("x-overflow", "reject-publish-dlx".into())]).unwrap();
    assert_eq!(a.overflow, Overflow::DropHead);
    let a = quorum(&[("x-overflow", "reject-publish".into())]).unwrap();
    assert_eq!(a.overflow, Overflow::RejectPublish);
}

#[test]
fn quorum_only_arguments() {
    assert_eq!(
        text(quorum(&[(
            "x-quorum-initial-group-size",
            FieldValue::I32(0)
        )])),
        "invalid arg 'x-quorum-initial-group-size' for queue 'q' in vhost '/': {value_zero,0}"
    );
    assert_eq!(
        text(quorum(&[("x-dead-letter-strategy", "sometimes".into())])),
        "invalid arg 'x-dead-letter-strategy' for queue 'q' in vhost '/': invalid_dlx_strategy"
    );
    assert!(quorum(&[
        ("x-dead-letter-strategy", "at-least-once".into()),
        ("x-quorum-initial-group-size", FieldValue::I32(3)),
        ("x-max-in-memory-length", FieldValue::I32(3)),
    ])
    .is_ok());
}

#[test]
fn delayed_retry_is_never_an_error() {
    let a = quorum(&[
        ("x-delayed-retry-type", "failed".into()),
        ("x-delayed-retry-min", FieldValue::I32(1000)),
        ("x-delayed-retry-max", FieldValue::I32(8000)),
    ])
    .unwrap();
    assert_eq!(
        a.delayed_retry,
        DelayedRetry {
            kind: RetryKind::Failed,
            min_ms: 1000,
            max_ms: 8000
        }
    );
    // max defaults to min
    let r = parse_delayed_retry(&table(&[
        ("x-delayed-retry-type", "all".into()),
        ("x-delayed-retry-min", FieldValue::I64(500)),
    ]));
    assert_eq!((r.kind, r.min_ms, r.max_ms), (RetryKind::All, 500, 500));
    // invalid values disable
    for bad in [
        table(&[
            ("x-delayed-retry-type", "sometimes".into()),
            ("x-delayed-retry-min", FieldValue::I64(5)),
        ]),
        table(&[("x-delayed-retry-type", "all".into())]),
        table(&[
            ("x-delayed-retry-type", "all".into()),
            ("x-delayed-retry-min", "5".into()),
        ]),
        table(&[
            ("x-delayed-retry-type", "all".into()),
            ("x-delayed-retry-min", FieldValue::I64(-5)),
        ]),
        table(&[
            ("x-delayed-retry-type", "all".into()),
            ("x-delayed-retry-min", FieldValue::I64(500)),
            ("x-delayed-retry-max", FieldValue::I64(100)),
        ]),
        table(&[(
            "x-delayed-retry-type",
            FieldValue::Bytes(Bytes::from_static(b"all")),
        )]),
    ] {
        assert_eq!(
            parse_delayed_retry(&bad).kind,
            RetryKind::Disabled,
            "{bad:?}"
        );
        assert!(quorum(
            &bad.iter()
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect::<Vec<_>>()
        )
        .is_ok());
    }
    // Classic queues do not have delayed retries: RabbitMQ 4.3 refuses the arguments there
    // (`arguments_of_other_queue_types_are_refused`).
    assert!(classic(&[
        ("x-delayed-retry-type", "all".into()),
        ("x-delayed-retry-min", FieldValue::I64(500)),
    ])
    .is_err());
}

#[test]
fn queue_type_of_existing_arguments() {
    assert_eq!(
        QueueType::of_arguments(&FieldTable::new()),
        QueueType::Classic
    );
    assert_eq!(
        QueueType::of_arguments(&table(&[("x-queue-type", "quorum".into())])),
        QueueType::Quorum
    );
}
