//! The argument keys each queue type knows, as RabbitMQ 4 lists them: what a redeclare
//! compares, and what another type's queue refuses.

use super::types::QueueType;

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

/// The arguments RabbitMQ checks on redeclare for a queue of this type, in its order.
pub(crate) fn type_keys(t: QueueType) -> &'static [&'static str] {
    match t {
        QueueType::Classic => CLASSIC_KEYS,
        QueueType::Quorum => QUORUM_KEYS,
    }
}

/// Whether `key` belongs to another queue type and not to `t` (RabbitMQ refuses those).
pub(super) fn is_foreign_key(t: QueueType, key: &str) -> bool {
    let own = type_keys(t);
    !own.contains(&key)
        && (CLASSIC_KEYS.contains(&key) || QUORUM_KEYS.contains(&key) || STREAM_KEYS.contains(&key))
}
