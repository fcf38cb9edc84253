//! The argument keys each queue type knows, as RabbitMQ 4 lists them: what a redeclare
//! compares, and what another type's queue refuses.

use super::types::QueueKind;

/// Argument keys RabbitMQ 4 knows per queue type (`capabilities/0` of each queue type module).
const CLASSIC_KEYS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-queue-master-locator",
    "x-queue-leader-locator",
];

const QUORUM_KEYS: &[&str] = &[
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-expires",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-overflow",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-delivery-limit",
    // RabbitMQ 4.3's delayed retries: quorum-only, so a classic queue declared with them is
    // refused (as with x-delivery-limit), and a redeclare with other values is inequivalent.
    "x-delayed-retry-type",
    "x-delayed-retry-min",
    "x-delayed-retry-max",
    "x-message-ttl",
    "x-queue-leader-locator",
];

const STREAM_KEYS: &[&str] = &[
    "x-max-length-bytes",
    "x-queue-type",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
    "x-queue-leader-locator",
    "x-stream-filter-size-bytes",
];

/// The consumer argument keys RabbitMQ 4 knows per queue type (`consumer_arguments` of
/// `capabilities/0`): a consumer of another type's queue is refused one of them.
const CLASSIC_CONSUMER_KEYS: &[&str] = &["x-priority"];
const STREAM_CONSUMER_KEYS: &[&str] = &[
    "x-stream-offset",
    "x-stream-filter",
    "x-stream-match-unfiltered",
];

/// The arguments a queue of `kind` takes (and compares on redeclare), in RabbitMQ's order.
pub(crate) fn kind_keys(kind: QueueKind) -> &'static [&'static str] {
    match kind {
        QueueKind::Classic => CLASSIC_KEYS,
        QueueKind::Quorum => QUORUM_KEYS,
        QueueKind::Stream => STREAM_KEYS,
    }
}

/// Whether `key` belongs to another queue kind and not to `kind` (RabbitMQ refuses those).
pub(super) fn is_foreign_key(kind: QueueKind, key: &str) -> bool {
    let own = kind_keys(kind);
    !own.contains(&key)
        && (CLASSIC_KEYS.contains(&key) || QUORUM_KEYS.contains(&key) || STREAM_KEYS.contains(&key))
}

/// The consumer arguments a consumer of a queue of `kind` takes.
pub(super) fn consumer_keys(kind: QueueKind) -> &'static [&'static str] {
    match kind {
        QueueKind::Classic | QueueKind::Quorum => CLASSIC_CONSUMER_KEYS,
        QueueKind::Stream => STREAM_CONSUMER_KEYS,
    }
}

/// Whether `key` is a consumer argument of another queue kind and not of `kind`.
pub(super) fn is_foreign_consumer_key(kind: QueueKind, key: &str) -> bool {
    !consumer_keys(kind).contains(&key)
        && (CLASSIC_CONSUMER_KEYS.contains(&key) || STREAM_CONSUMER_KEYS.contains(&key))
}
