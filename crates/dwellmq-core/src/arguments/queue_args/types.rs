//! What `queue.declare` arguments become once validated: [`QueueArguments`] and the modes it
//! names (overflow, dead-letter strategy, queue type, delayed retries).

use dwellmq_codec::{FieldTable, FieldValue, ShortStr};

/// RabbitMQ's default `x-delivery-limit` for quorum queues (RabbitMQ 4).
pub const DEFAULT_DELIVERY_LIMIT: i64 = 20;

/// The highest `x-max-priority` RabbitMQ accepts (`?MAX_SUPPORTED_PRIORITY`).
pub const MAX_PRIORITY: i64 = 255;

/// What happens when a queue is full (`x-overflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Drop (or dead-letter with reason `maxlen`) the oldest message. The default.
    #[default]
    DropHead,
    /// Refuse the new message (`basic.nack` under confirms).
    RejectPublish,
    /// Refuse the new message and dead-letter it. Classic queues only.
    RejectPublishDlx,
}

impl Overflow {
    /// The argument value naming this mode.
    pub fn name(self) -> &'static str {
        match self {
            Overflow::DropHead => "drop-head",
            Overflow::RejectPublish => "reject-publish",
            Overflow::RejectPublishDlx => "reject-publish-dlx",
        }
    }

    /// The mode named by an argument or policy value.
    pub fn from_name(name: &[u8]) -> Option<Overflow> {
        match name {
            b"drop-head" => Some(Overflow::DropHead),
            b"reject-publish" => Some(Overflow::RejectPublish),
            b"reject-publish-dlx" => Some(Overflow::RejectPublishDlx),
            _ => None,
        }
    }
}

/// How a quorum queue dead-letters (`x-dead-letter-strategy`, policy `dead-letter-strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeadLetterStrategy {
    /// The dead copy is routed once; what no target takes is lost. The default.
    #[default]
    AtMostOnce,
    /// The source keeps the message until every target took it (only with overflow
    /// `reject-publish` and a dead-letter exchange; otherwise at most once, as in RabbitMQ).
    AtLeastOnce,
}

impl DeadLetterStrategy {
    /// The argument or policy value naming this strategy.
    pub fn name(self) -> &'static str {
        match self {
            DeadLetterStrategy::AtMostOnce => "at-most-once",
            DeadLetterStrategy::AtLeastOnce => "at-least-once",
        }
    }

    /// The strategy named by an argument or policy value.
    pub fn from_name(name: &[u8]) -> Option<DeadLetterStrategy> {
        match name {
            b"at-most-once" => Some(DeadLetterStrategy::AtMostOnce),
            b"at-least-once" => Some(DeadLetterStrategy::AtLeastOnce),
            _ => None,
        }
    }
}

/// The queue type (`x-queue-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueueType {
    /// A classic queue. The default.
    #[default]
    Classic,
    /// A quorum-style queue: durable, with delivery limits and delayed retries.
    Quorum,
}

impl QueueType {
    /// The argument value naming this type.
    pub fn name(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
        }
    }

    /// The Erlang module RabbitMQ names in errors about this type.
    pub fn module_name(self) -> &'static str {
        match self {
            QueueType::Classic => "rabbit_classic_queue",
            QueueType::Quorum => "rabbit_quorum_queue",
        }
    }

    /// The queue type that an existing queue's arguments declare.
    pub fn of_arguments(args: &FieldTable) -> QueueType {
        match args.get("x-queue-type") {
            Some(FieldValue::LongStr(b)) if b.as_ref() == b"quorum" => QueueType::Quorum,
            _ => QueueType::Classic,
        }
    }
}

/// The kind of queue a declare asks for (`x-queue-type`), streams included.
///
/// [`QueueType`] names the kinds the queue state machine runs (classic and quorum); a stream
/// is another machine ([`crate::stream::StreamState`]). A shell dispatches a declare on this:
/// [`super::parse_stream_arguments`] for a stream, [`super::parse_queue_arguments`] otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueKind {
    /// A classic queue (also when `x-queue-type` is absent or not a known name).
    Classic,
    /// A quorum queue.
    Quorum,
    /// A stream (`x-queue-type: stream`, RabbitMQ 3.9+).
    Stream,
}

impl QueueKind {
    /// The kind `x-queue-type` names in `args`. Anything but `quorum` or `stream` reads as
    /// classic here; [`super::parse_queue_arguments`] refuses unknown names.
    pub fn of_arguments(args: &FieldTable) -> QueueKind {
        match args.get("x-queue-type") {
            Some(FieldValue::LongStr(b)) if b.as_ref() == b"quorum" => QueueKind::Quorum,
            Some(FieldValue::LongStr(b)) if b.as_ref() == b"stream" => QueueKind::Stream,
            _ => QueueKind::Classic,
        }
    }

    /// The Erlang module RabbitMQ names in errors about this kind.
    pub fn module_name(self) -> &'static str {
        match self {
            QueueKind::Classic => "rabbit_classic_queue",
            QueueKind::Quorum => "rabbit_quorum_queue",
            QueueKind::Stream => "rabbit_stream_queue",
        }
    }

    /// Whether a queue of this kind may be server-named (`capabilities/0`'s `server_named`):
    /// only classic queues. A declare of another kind with an empty name is refused with
    /// [`server_named_refused`].
    pub fn allows_server_named(self) -> bool {
        self == QueueKind::Classic
    }
}

impl From<QueueType> for QueueKind {
    fn from(t: QueueType) -> Self {
        match t {
            QueueType::Classic => QueueKind::Classic,
            QueueType::Quorum => QueueKind::Quorum,
        }
    }
}

/// RabbitMQ's refusal of a declare with an empty name for a queue kind that cannot be
/// server-named (`rabbit_channel`'s `queue.declare`): 406
/// `Cannot declare a server-named queue for type rabbit_stream_queue`.
pub fn server_named_refused(kind: QueueKind) -> crate::error::BrokerError {
    crate::error::BrokerError::PreconditionFailed(format!(
        "Cannot declare a server-named queue for type {}",
        kind.module_name()
    ))
}

/// Which returns of a message to its queue are delayed (`x-delayed-retry-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryKind {
    /// No delayed retries. The default, and the result of any invalid argument.
    #[default]
    Disabled,
    /// Every return is delayed.
    All,
    /// Returns that incremented the delivery count (`basic.reject`, consumer gone).
    Failed,
    /// Returns that did not (`basic.nack`, `basic.recover`, cancel with requeue).
    Returned,
}

impl RetryKind {
    /// The argument or policy value naming this kind.
    pub fn name(self) -> &'static str {
        match self {
            RetryKind::Disabled => "disabled",
            RetryKind::All => "all",
            RetryKind::Failed => "failed",
            RetryKind::Returned => "returned",
        }
    }

    /// The kind named by an argument or policy value.
    pub fn from_name(name: &[u8]) -> Option<RetryKind> {
        match name {
            b"disabled" => Some(RetryKind::Disabled),
            b"all" => Some(RetryKind::All),
            b"failed" => Some(RetryKind::Failed),
            b"returned" => Some(RetryKind::Returned),
            _ => None,
        }
    }
}

/// Delayed-retry settings from the `x-delayed-retry-*` arguments.
///
/// A returned message is ready again at `now + min(min_ms × max(1, delivery_count), max_ms)`.
/// `min_ms` and `max_ms` are kept even when `kind` is [`RetryKind::Disabled`] because no type
/// argument was given, so that a policy supplying the type can combine with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DelayedRetry {
    /// Which returns are delayed.
    pub kind: RetryKind,
    /// `x-delayed-retry-min` in ms; 0 when absent or invalid.
    pub min_ms: u64,
    /// `x-delayed-retry-max` in ms; defaults to `min_ms`.
    pub max_ms: u64,
}

/// A queue's arguments after validation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueArguments {
    /// `x-message-ttl` in ms.
    pub message_ttl: Option<u64>,
    /// `x-expires` in ms (at least 1).
    pub expires: Option<u64>,
    /// `x-max-length` in messages.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes` (message bodies only).
    pub max_length_bytes: Option<u64>,
    /// `x-overflow`. For a quorum queue, `reject-publish-dlx` is accepted and behaves as
    /// `drop-head` (RabbitMQ logs a warning and does the same).
    pub overflow: Overflow,
    /// `x-dead-letter-exchange` (may name an exchange that does not exist).
    pub dead_letter_exchange: Option<ShortStr>,
    /// `x-dead-letter-routing-key`.
    pub dead_letter_routing_key: Option<ShortStr>,
    /// `x-dead-letter-strategy` (quorum queues only; `None` when absent).
    pub dead_letter_strategy: Option<DeadLetterStrategy>,
    /// `x-queue-type`.
    pub queue_type: QueueType,
    /// `x-delivery-limit` exactly as given (quorum queues only; `None` when absent). A negative
    /// value means no limit. Use [`QueueArguments::effective_delivery_limit`], which applies
    /// the default of [`DEFAULT_DELIVERY_LIMIT`] and combines with a policy as RabbitMQ does.
    pub delivery_limit: Option<i64>,
    /// `x-delayed-retry-type`, `-min`, `-max` (quorum queues only; never an error).
    pub delayed_retry: DelayedRetry,
    /// `x-single-active-consumer`.
    pub single_active_consumer: bool,
    /// `x-max-priority` (classic queues only).
    pub max_priority: Option<u8>,
}

impl QueueArguments {
    /// The delivery limit in force: `None` for no limit (classic queues, or a negative value).
    ///
    /// As RabbitMQ's `resolve_delivery_limit/2`: argument and policy combine by the lower of the
    /// two, unless one is negative, in which case the higher wins; when neither is set a quorum
    /// queue gets [`DEFAULT_DELIVERY_LIMIT`].
    pub fn effective_delivery_limit(&self, policy: Option<i64>) -> Option<u64> {
        if self.queue_type != QueueType::Quorum {
            return None;
        }
        let limit = match (policy, self.delivery_limit) {
            (None, None) => DEFAULT_DELIVERY_LIMIT,
            (Some(v), None) | (None, Some(v)) => v,
            (Some(p), Some(a)) if p < 0 || a < 0 => p.max(a),
            (Some(p), Some(a)) => p.min(a),
        };
        u64::try_from(limit).ok()
    }
}
