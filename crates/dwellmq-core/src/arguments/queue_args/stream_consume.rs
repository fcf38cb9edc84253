//! What a stream refuses of its consumers and of the methods it does not implement, with
//! RabbitMQ's texts (`rabbit_amqqueue:check_consume_arguments/3`,
//! `rabbit_stream_queue:consume/3`, `dequeue/5`, and `rabbit_channel`'s `queue.purge`).

use dwellmq_codec::FieldTable;

use super::declared::QueueErrors;
use super::keys::is_foreign_consumer_key;
use super::stream_offset::{parse_stream_offset, OffsetSpec};
use super::types::QueueKind;
use crate::error::BrokerError;

/// How a `basic.consume` on a stream asks to consume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConsume {
    /// The channel's per-consumer prefetch (`basic.qos` with global=false) when it subscribes.
    pub prefetch: u32,
    /// `no_ack` (automatic acknowledgement).
    pub no_ack: bool,
    /// The channel has a global prefetch (`basic.qos` with global=true and a count above 0).
    pub global_qos: bool,
}

/// Checks a `basic.consume` on a stream and reads where it starts; the first refusal wins, in
/// RabbitMQ's order:
/// 1. the consumer arguments ([`check_consumer_arguments`]): an invalid `x-stream-offset`
///    (406 `invalid arg 'x-stream-offset' for queue 'q' in vhost '/':
///    {invalid_stream_offset_arg,{longstr,<<"soon">>}}`), an argument of another queue type
///    (406 `invalid arg 'x-priority' for queue 'q' in vhost '/' of queue type
///    rabbit_stream_queue`);
/// 2. no prefetch: 406 `consumer prefetch count is not set for stream queue 'q' in vhost '/'`
///    (also for a no-ack consumer without one, as in RabbitMQ);
/// 3. automatic acknowledgement: 540 `automatic acknowledgement not supported by stream queue
///    'q' in vhost '/'` (a hard error: RabbitMQ closes the connection);
/// 4. a global prefetch: 540 `queue 'q' in vhost '/' does not support global qos`.
pub fn check_stream_consume(
    queue: &str,
    vhost: &str,
    args: &FieldTable,
    consume: StreamConsume,
) -> Result<OffsetSpec, BrokerError> {
    let spec = check_consumer_arguments(queue, vhost, QueueKind::Stream, args)?
        .unwrap_or(OffsetSpec::Next);
    let name = format!("queue '{queue}' in vhost '{vhost}'");
    if consume.prefetch == 0 {
        return Err(BrokerError::PreconditionFailed(format!(
            "consumer prefetch count is not set for stream {name}"
        )));
    }
    if consume.no_ack {
        return Err(BrokerError::NotImplemented(format!(
            "automatic acknowledgement not supported by stream {name}"
        )));
    }
    if consume.global_qos {
        return Err(BrokerError::NotImplemented(format!(
            "{name} does not support global qos"
        )));
    }
    Ok(spec)
}

/// Checks the consumer arguments of a `basic.consume` on a queue of `kind`, as RabbitMQ 4 does
/// for every queue type: its own arguments' values (a stream's `x-stream-offset`, read and
/// returned), then any consumer argument another type takes, in the table's order (406
/// `invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type
/// rabbit_classic_queue`, `invalid arg 'x-priority' ... of queue type rabbit_stream_queue`).
/// A classic or quorum queue's `x-priority` value is read by
/// [`crate::arguments::parse_consumer_priority`].
pub fn check_consumer_arguments(
    queue: &str,
    vhost: &str,
    kind: QueueKind,
    args: &FieldTable,
) -> Result<Option<OffsetSpec>, BrokerError> {
    let errors = QueueErrors { queue, vhost };
    let spec = match kind {
        QueueKind::Stream => Some(
            parse_stream_offset(args.get("x-stream-offset"))
                .map_err(|reason| errors.invalid_arg("x-stream-offset", &reason))?,
        ),
        QueueKind::Classic | QueueKind::Quorum => None,
    };
    match args
        .iter()
        .find(|(key, _)| is_foreign_consumer_key(kind, key))
    {
        Some((key, _)) => Err(errors.foreign_arg(key, kind)),
        None => Ok(spec),
    }
}

/// `basic.get` on a stream: 540 `basic.get not supported by stream queues queue 'q' in vhost
/// '/'` (RabbitMQ's text, "queues" and all; a hard error).
pub fn stream_get_refused(queue: &str, vhost: &str) -> BrokerError {
    BrokerError::NotImplemented(format!(
        "basic.get not supported by stream queues queue '{queue}' in vhost '{vhost}'"
    ))
}

/// `queue.purge` of a stream: 540 `queue.purge not supported by stream queues queue 'q' in
/// vhost '/'` (a hard error).
pub fn stream_purge_refused(queue: &str, vhost: &str) -> BrokerError {
    BrokerError::NotImplemented(format!(
        "queue.purge not supported by stream queues queue '{queue}' in vhost '{vhost}'"
    ))
}
