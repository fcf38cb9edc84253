//! A stream's declare and consume against RabbitMQ's texts and order.

use dwellmq_codec::{FieldTable, FieldValue};

use super::*;
use crate::arguments::check_queue_equivalence;
use crate::error::BrokerError;

fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
    let mut t: FieldTable = [("x-queue-type", FieldValue::from("stream"))]
        .into_iter()
        .collect();
    for (k, v) in entries {
        t.insert(*k, v.clone());
    }
    t
}

fn stream(entries: &[(&str, FieldValue)]) -> Result<StreamArguments, BrokerError> {
    parse_stream_arguments("q", "/", &table(entries), true, false, false)
}

fn text(r: Result<impl std::fmt::Debug, BrokerError>) -> String {
    match r {
        Err(BrokerError::PreconditionFailed(t)) => t,
        other => panic!("expected 406, got {other:?}"),
    }
}

#[test]
fn a_stream_takes_its_arguments_and_the_cluster_ones() {
    let t = table(&[
        ("x-max-length-bytes", FieldValue::I64(2_000_000)),
        ("x-max-age", "10D".into()),
        (
            "x-stream-max-segment-size-bytes",
            FieldValue::I32(5_000_000),
        ),
        ("x-stream-filter-size-bytes", FieldValue::I8(32)),
        ("x-initial-cluster-size", FieldValue::I8(3)),
        ("x-queue-leader-locator", "balanced".into()),
        ("x-some-plugin-arg", "ignored".into()),
    ]);
    assert_eq!(QueueKind::of_arguments(&t), QueueKind::Stream);
    assert_eq!(
        parse_stream_arguments("q", "/", &t, true, false, false),
        Ok(StreamArguments {
            max_length_bytes: Some(2_000_000),
            max_age_ms: Some(10 * 86_400_000),
            max_segment_size_bytes: Some(5_000_000),
        })
    );
    assert_eq!(stream(&[]), Ok(StreamArguments::default()));
}

#[test]
fn stream_argument_values_are_refused_as_rabbitmq_words_it() {
    for (entry, reason) in [
        (
            ("x-max-age", FieldValue::from("1A")),
            "invalid arg 'x-max-age' for queue 'q' in vhost '/': invalid_max_age",
        ),
        (
            ("x-max-age", FieldValue::I32(60)),
            "invalid arg 'x-max-age' for queue 'q' in vhost '/': {unacceptable_type,signedint}",
        ),
        (
            ("x-max-length-bytes", FieldValue::I32(-1)),
            "invalid arg 'x-max-length-bytes' for queue 'q' in vhost '/': {value_negative,-1}",
        ),
        (
            ("x-stream-max-segment-size-bytes", FieldValue::from("big")),
            "invalid arg 'x-stream-max-segment-size-bytes' for queue 'q' in vhost '/': \"expected integer, got longstr\"",
        ),
        (
            ("x-initial-cluster-size", FieldValue::I32(0)),
            "invalid arg 'x-initial-cluster-size' for queue 'q' in vhost '/': {value_zero,0}",
        ),
        (
            ("x-queue-leader-locator", FieldValue::from("nearest")),
            "invalid arg 'x-queue-leader-locator' for queue 'q' in vhost '/': invalid_queue_locator_arg",
        ),
    ] {
        assert_eq!(text(stream(&[entry])), reason);
    }
}

#[test]
fn arguments_a_stream_does_not_take_are_refused() {
    for key in [
        "x-overflow",
        "x-message-ttl",
        "x-expires",
        "x-max-length",
        "x-max-priority",
        "x-single-active-consumer",
        "x-delivery-limit",
        "x-dead-letter-strategy",
        "x-queue-mode",
    ] {
        assert_eq!(
            text(stream(&[(key, FieldValue::I32(1))])),
            format!(
                "invalid arg '{key}' for queue 'q' in vhost '/' of queue type rabbit_stream_queue"
            )
        );
    }
    // Dead-lettering: refused as another type's argument once its type is right.
    assert_eq!(
        text(stream(&[("x-dead-letter-exchange", "dlx".into())])),
        "invalid arg 'x-dead-letter-exchange' for queue 'q' in vhost '/' of queue type rabbit_stream_queue"
    );
    assert_eq!(
        text(stream(&[("x-dead-letter-exchange", FieldValue::I64(1))])),
        "invalid type 'long' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"
    );
}

#[test]
fn a_stream_is_durable_and_neither_exclusive_nor_auto_delete() {
    let t = table(&[]);
    let err = |d, e, a| text(parse_stream_arguments("q", "/", &t, d, e, a));
    assert_eq!(
        err(true, true, true),
        "invalid property 'auto-delete' for queue 'q' in vhost '/'"
    );
    assert_eq!(
        err(true, true, false),
        "invalid property 'exclusive-owner' for queue 'q' in vhost '/'"
    );
    assert_eq!(
        err(false, false, false),
        "invalid property 'non-durable' for queue 'q' in vhost '/'"
    );
}

#[test]
fn the_stream_checks_come_last_in_rabbitmq_order() {
    // A bad value beats a foreign argument, which beats the properties.
    let t = table(&[
        ("x-overflow", "drop-head".into()),
        ("x-max-age", "1A".into()),
    ]);
    assert!(
        text(parse_stream_arguments("q", "/", &t, false, true, true)).contains("invalid_max_age")
    );
    let t = table(&[("x-overflow", "drop-head".into())]);
    assert!(text(parse_stream_arguments("q", "/", &t, false, true, true)).contains("x-overflow"));
    assert_eq!(
        text(stream(&[(
            "x-stream-max-segment-size-bytes",
            FieldValue::I64(3_000_000_001)
        )])),
        "Exceeded max value for x-stream-max-segment-size-bytes"
    );
    assert!(stream(&[(
        "x-stream-max-segment-size-bytes",
        FieldValue::I64(3_000_000_000)
    )])
    .is_ok());
    for size in [256, 15] {
        assert_eq!(
            text(stream(&[(
                "x-stream-filter-size-bytes",
                FieldValue::I32(size)
            )])),
            "Invalid value for  x-stream-filter-size-bytes"
        );
    }
}

#[test]
fn a_stream_cannot_be_server_named_and_classic_queues_refuse_stream_arguments() {
    assert!(!QueueKind::Stream.allows_server_named());
    assert_eq!(
        server_named_refused(QueueKind::Stream).to_string(),
        "PRECONDITION_FAILED - Cannot declare a server-named queue for type rabbit_stream_queue"
    );
    let classic: FieldTable = [("x-stream-max-segment-size-bytes", FieldValue::I32(10))]
        .into_iter()
        .collect();
    assert_eq!(
        text(parse_queue_arguments("q", "/", &classic, true, false, false)),
        "invalid arg 'x-stream-max-segment-size-bytes' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"
    );
}

#[test]
fn a_redeclared_stream_compares_its_own_arguments() {
    let current = table(&[("x-max-age", "7D".into())]);
    assert!(check_queue_equivalence("q", "/", &current, &current).is_ok());
    assert_eq!(
        check_queue_equivalence("q", "/", &current, &table(&[("x-max-age", "1D".into())]))
            .unwrap_err()
            .to_string(),
        "PRECONDITION_FAILED - inequivalent arg 'x-max-age' for queue 'q' in vhost '/': received '1D' but current is '7D'"
    );
    assert_eq!(
        check_queue_equivalence("q", "/", &current, &FieldTable::new())
            .unwrap_err()
            .to_string(),
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received none but current is the value 'stream' of type 'longstr'"
    );
}

fn consume(
    args: &[(&str, FieldValue)],
    prefetch: u32,
    no_ack: bool,
    global_qos: bool,
) -> Result<OffsetSpec, BrokerError> {
    let args: FieldTable = args.iter().cloned().collect();
    check_stream_consume(
        "q",
        "/",
        &args,
        StreamConsume {
            prefetch,
            no_ack,
            global_qos,
        },
    )
}

#[test]
fn a_stream_consumer_needs_a_prefetch_and_manual_acks() {
    assert_eq!(consume(&[], 10, false, false), Ok(OffsetSpec::Next));
    assert_eq!(
        consume(&[("x-stream-offset", "first".into())], 10, false, false),
        Ok(OffsetSpec::First)
    );
    assert_eq!(
        text(consume(&[], 0, false, false)),
        "consumer prefetch count is not set for stream queue 'q' in vhost '/'"
    );
    // No prefetch comes first, as in RabbitMQ.
    assert_eq!(
        text(consume(&[], 0, true, false)),
        "consumer prefetch count is not set for stream queue 'q' in vhost '/'"
    );
    let auto_ack = consume(&[], 5, true, false).unwrap_err();
    assert_eq!(auto_ack.reply_code(), 540);
    assert!(auto_ack.is_connection_error());
    assert_eq!(
        auto_ack.to_string(),
        "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queue 'q' in vhost '/'"
    );
    assert_eq!(
        consume(&[], 5, false, true).unwrap_err().to_string(),
        "NOT_IMPLEMENTED - queue 'q' in vhost '/' does not support global qos"
    );
}

#[test]
fn consumer_arguments_are_checked_before_the_prefetch() {
    assert_eq!(
        text(consume(&[("x-stream-offset", "soon".into())], 0, false, false)),
        "invalid arg 'x-stream-offset' for queue 'q' in vhost '/': {invalid_stream_offset_arg,{longstr,<<\"soon\">>}}"
    );
    assert_eq!(
        text(consume(
            &[("x-priority", FieldValue::I64(10))],
            0,
            false,
            false
        )),
        "invalid arg 'x-priority' for queue 'q' in vhost '/' of queue type rabbit_stream_queue"
    );
    let on_classic: FieldTable = [("x-stream-offset", FieldValue::from("first"))]
        .into_iter()
        .collect();
    assert_eq!(
        text(check_consumer_arguments("q", "/", QueueKind::Quorum, &on_classic)),
        "invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue"
    );
}

#[test]
fn basic_get_and_purge_are_not_implemented_for_streams() {
    let get = stream_get_refused("q", "/");
    assert_eq!(get.reply_code(), 540);
    assert_eq!(
        get.to_string(),
        "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 'q' in vhost '/'"
    );
    assert_eq!(
        stream_purge_refused("q", "/").to_string(),
        "NOT_IMPLEMENTED - queue.purge not supported by stream queues queue 'q' in vhost '/'"
    );
}
