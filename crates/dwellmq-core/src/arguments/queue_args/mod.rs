//! `queue.declare` arguments: validated as RabbitMQ 4 does, then parsed into [`QueueArguments`]
//! (classic and quorum queues) or [`StreamArguments`] (streams).
//!
//! `types` holds what they become, `keys` which belong to which queue type, `values` how one
//! value is read, `declared` the arguments of one declare with RabbitMQ's error texts, and
//! `families` the validators, one per family of arguments. A stream's declare is `stream`,
//! its consumers' arguments and refusals `stream_consume`, `x-stream-offset` `stream_offset`,
//! and durations (`x-max-age`) `max_age`.

mod declared;
mod delayed_retry;
mod families;
mod keys;
mod max_age;
mod stream;
mod stream_consume;
mod stream_offset;
mod types;
mod values;

use dwellmq_codec::FieldTable;

use crate::error::BrokerError;
use declared::{Declared, QueueErrors};

pub use delayed_retry::parse_delayed_retry;
pub(crate) use keys::kind_keys;
pub use max_age::parse_max_age;
pub use stream::{parse_stream_arguments, StreamArguments, MAX_STREAM_SEGMENT_SIZE_BYTES};
pub use stream_consume::{
    check_consumer_arguments, check_stream_consume, stream_get_refused, stream_purge_refused,
    StreamConsume,
};
pub use stream_offset::{parse_stream_offset, OffsetSpec};
pub use types::{
    server_named_refused, DeadLetterStrategy, DelayedRetry, Overflow, QueueArguments, QueueKind,
    QueueType, RetryKind, DEFAULT_DELIVERY_LIMIT, MAX_PRIORITY,
};
pub(crate) use values::int_arg;

/// Validates `queue.declare` arguments for a new queue and parses them, as RabbitMQ 4 does.
///
/// Checks run in RabbitMQ's order and the first failure is returned (all 406
/// PRECONDITION_FAILED):
/// 1. `x-dead-letter-exchange` must be a long string (the channel's check):
///    `invalid type 'long' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'`;
/// 2. `x-queue-type` must be `classic` or `quorum`: `... "unsupported queue type 'stream'"`
///    (a stream's declare goes to [`parse_stream_arguments`]: see [`QueueKind`]);
/// 3. each known argument of the queue's type, e.g.
///    `invalid arg 'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}`,
///    `... "expected integer, got longstr"` (RabbitMQ 3.9+ wording), `{value_zero,0}` for
///    `x-expires`, `invalid_overflow`, `routing_key_but_no_dlx_defined`,
///    `{max_value_exceeded,256}` for `x-max-priority`, `{unacceptable_type,long}`;
/// 4. an argument of another queue type is refused:
///    `invalid arg 'x-max-priority' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue`;
/// 5. a quorum queue must not be auto-delete, exclusive or non-durable:
///    `invalid property 'auto-delete' for queue 'q' in vhost '/'` (then `'exclusive-owner'`,
///    `'non-durable'`).
///
/// Unknown arguments are accepted and ignored. The `x-delayed-retry-*` arguments are never an
/// error: an invalid value disables the feature. `x-delivery-limit` must be an integer (RabbitMQ
/// does not check it at all).
pub fn parse_queue_arguments(
    queue: &str,
    vhost: &str,
    args: &FieldTable,
    durable: bool,
    exclusive: bool,
    auto_delete: bool,
) -> Result<QueueArguments, BrokerError> {
    let errors = QueueErrors { queue, vhost };
    families::dead_letter_exchange_type(args, &errors)?;
    let queue_type = families::queue_type(args, &errors)?;
    let declared = Declared {
        args,
        errors,
        queue_type,
    };
    let mut parsed = QueueArguments {
        queue_type,
        ..QueueArguments::default()
    };
    // In the order of rabbit_amqqueue:declare_args/0: the first refusal wins.
    families::expiry_and_ttl(&declared, &mut parsed)?;
    families::dead_lettering(&declared, &mut parsed)?;
    families::length_limits(&declared, &mut parsed)?;
    families::max_priority(&declared, &mut parsed)?;
    families::overflow(&declared, &mut parsed)?;
    families::classic_storage(&declared)?;
    families::single_active_consumer(&declared, &mut parsed)?;
    families::placement(&declared)?;
    families::quorum_retries(&declared, &mut parsed)?;
    families::foreign_keys(&declared)?;
    families::quorum_properties(&declared, durable, exclusive, auto_delete)?;
    Ok(parsed)
}

#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;
