//! `queue.declare` of a stream (`x-queue-type: stream`), as RabbitMQ 4 validates it:
//! `rabbit_amqqueue:check_declare_arguments/2` with the stream type's arguments, then
//! `rabbit_stream_queue:declare/2`'s own checks.

use dwellmq_codec::FieldTable;

use super::declared::QueueErrors;
use super::families::dead_letter_exchange_type;
use super::keys::is_foreign_key;
use super::max_age::parse_max_age;
use super::types::QueueKind;
use super::values::{non_neg_int_arg, non_zero, string_arg};
use crate::error::BrokerError;

/// The largest `x-stream-max-segment-size-bytes` RabbitMQ accepts (`?MAX_STREAM_MAX_SEGMENT_SIZE`,
/// 3 GB).
pub const MAX_STREAM_SEGMENT_SIZE_BYTES: u64 = 3_000_000_000;

/// A stream's declare arguments after validation. The cluster-only ones
/// (`x-initial-cluster-size`, `x-queue-leader-locator`) and `x-stream-filter-size-bytes` are
/// checked and have no effect on one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamArguments {
    /// `x-max-length-bytes`: whole segments are dropped from the head while the log is larger.
    pub max_length_bytes: Option<u64>,
    /// `x-max-age` in ms: whole segments whose newest message is older are dropped.
    pub max_age_ms: Option<u64>,
    /// `x-stream-max-segment-size-bytes`: the size at which the log starts a new segment.
    pub max_segment_size_bytes: Option<u64>,
}

/// Validates a stream's `queue.declare` and parses its arguments, as RabbitMQ 4 does; the first
/// refusal wins (all 406 PRECONDITION_FAILED), in RabbitMQ's order:
/// 1. `x-dead-letter-exchange` must be a long string (the channel's check);
/// 2. the stream's own arguments, in `declare_args/0` order: `x-max-length-bytes`
///    (`{value_negative,-1}`), `x-max-age` (`invalid_max_age`, `{unacceptable_type,long}`),
///    `x-stream-max-segment-size-bytes`, `x-stream-filter-size-bytes`,
///    `x-initial-cluster-size` (`{value_zero,0}`), `x-queue-leader-locator`
///    (`invalid_queue_locator_arg`), each as
///    `invalid arg 'x-max-age' for queue 'q' in vhost '/': invalid_max_age`;
/// 3. an argument of another queue type, in the table's order:
///    `invalid arg 'x-message-ttl' for queue 'q' in vhost '/' of queue type rabbit_stream_queue`
///    (TTL, dead-lettering, overflow, priorities, length in messages, single active consumer,
///    delivery limits...);
/// 4. `invalid property 'auto-delete' for queue 'q' in vhost '/'`, then `'exclusive-owner'`,
///    then `'non-durable'`;
/// 5. `Exceeded max value for x-stream-max-segment-size-bytes` (over 3 GB);
/// 6. `Invalid value for  x-stream-filter-size-bytes` (outside 16 to 255; RabbitMQ's text has
///    the two spaces).
///
/// Unknown arguments are accepted and ignored. Call it when [`QueueKind::of_arguments`] says
/// [`QueueKind::Stream`]; a declare with an empty name is refused before, with
/// [`super::server_named_refused`].
pub fn parse_stream_arguments(
    queue: &str,
    vhost: &str,
    args: &FieldTable,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
) -> Result<StreamArguments, BrokerError> {
    let errors = QueueErrors { queue, vhost };
    dead_letter_exchange_type(args, &errors)?;
    let read = |key: &str, check: &dyn Fn(&dwellmq_codec::FieldValue) -> Result<u64, String>| {
        args.get(key)
            .map(|v| check(v).map_err(|reason| errors.invalid_arg(key, &reason)))
            .transpose()
    };
    let parsed = StreamArguments {
        max_length_bytes: read("x-max-length-bytes", &non_neg_int_arg)?,
        max_age_ms: read("x-max-age", &|v| {
            string_arg(v).and_then(|text| parse_max_age(text).ok_or("invalid_max_age".to_owned()))
        })?,
        max_segment_size_bytes: read("x-stream-max-segment-size-bytes", &non_neg_int_arg)?,
    };
    let filter_size = read("x-stream-filter-size-bytes", &non_neg_int_arg)?;
    read("x-initial-cluster-size", &|v| {
        non_neg_int_arg(v).and_then(non_zero)
    })?;
    read("x-queue-leader-locator", &|v| match string_arg(v)? {
        b"client-local" | b"balanced" | b"random" | b"least-leaders" => Ok(0),
        _ => Err("invalid_queue_locator_arg".to_owned()),
    })?;
    if let Some((key, _)) = args
        .iter()
        .find(|(key, _)| is_foreign_key(QueueKind::Stream, key))
    {
        return Err(errors.foreign_arg(key, QueueKind::Stream));
    }
    stream_properties(&errors, durable, exclusive, auto_delete)?;
    if parsed
        .max_segment_size_bytes
        .is_some_and(|n| n > MAX_STREAM_SEGMENT_SIZE_BYTES)
    {
        return Err(BrokerError::PreconditionFailed(
            "Exceeded max value for x-stream-max-segment-size-bytes".to_owned(),
        ));
    }
    if filter_size.is_some_and(|n| !(16..=255).contains(&n)) {
        return Err(BrokerError::PreconditionFailed(
            "Invalid value for  x-stream-filter-size-bytes".to_owned(),
        ));
    }
    Ok(parsed)
}

/// A stream is durable, and neither auto-delete nor exclusive (`rabbit_queue_type_util`'s
/// checks, in this order).
fn stream_properties(
    errors: &QueueErrors<'_>,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
) -> Result<(), BrokerError> {
    let refused = if auto_delete {
        "auto-delete"
    } else if exclusive {
        "exclusive-owner"
    } else if !durable {
        "non-durable"
    } else {
        return Ok(());
    };
    Err(errors.invalid_property(refused))
}
