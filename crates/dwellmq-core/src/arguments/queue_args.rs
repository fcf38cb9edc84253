//! `queue.declare` arguments: validated as RabbitMQ 4 does, then parsed into [`QueueArguments`].

use dwellmq_codec::{FieldTable, FieldValue, ShortStr};

use crate::arguments::erlang_term::{p_string, type_name};
use crate::arguments::expiration::MAX_TTL_MS;
use crate::error::BrokerError;

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
fn is_foreign_key(t: QueueType, key: &str) -> bool {
    let own = type_keys(t);
    !own.contains(&key)
        && (CLASSIC_KEYS.contains(&key) || QUORUM_KEYS.contains(&key) || STREAM_KEYS.contains(&key))
}

/// Errors for one queue, with RabbitMQ's wording.
struct QueueErrors<'a> {
    queue: &'a str,
    vhost: &'a str,
}

impl QueueErrors<'_> {
    /// `invalid arg 'K' for queue 'Q' in vhost 'V': REASON` (`rabbit_amqqueue`).
    fn invalid_arg(&self, key: &str, reason: &str) -> BrokerError {
        BrokerError::PreconditionFailed(format!(
            "invalid arg '{key}' for queue '{}' in vhost '{}': {reason}",
            self.queue, self.vhost
        ))
    }

    fn foreign_arg(&self, key: &str, t: QueueType) -> BrokerError {
        BrokerError::PreconditionFailed(format!(
            "invalid arg '{key}' for queue '{}' in vhost '{}' of queue type {}",
            self.queue,
            self.vhost,
            t.module_name()
        ))
    }

    fn invalid_property(&self, property: &str) -> BrokerError {
        BrokerError::PreconditionFailed(format!(
            "invalid property '{property}' for queue '{}' in vhost '{}'",
            self.queue, self.vhost
        ))
    }
}

/// `{unacceptable_type,T}`.
fn unacceptable(v: &FieldValue) -> String {
    format!("{{unacceptable_type,{}}}", type_name(v))
}

/// `check_int_arg/2`: any integer type (not timestamp, not decimal).
pub(crate) fn int_arg(v: &FieldValue) -> Result<i64, String> {
    match v {
        FieldValue::I8(_)
        | FieldValue::U8(_)
        | FieldValue::I16(_)
        | FieldValue::U16(_)
        | FieldValue::I32(_)
        | FieldValue::U32(_)
        | FieldValue::I64(_) => v.as_integer().ok_or_else(|| unacceptable(v)),
        other => Err(p_string(&format!(
            "expected integer, got {}",
            type_name(other)
        ))),
    }
}

fn non_neg_int_arg(v: &FieldValue) -> Result<u64, String> {
    let n = int_arg(v)?;
    u64::try_from(n).map_err(|_| format!("{{value_negative,{n}}}"))
}

/// `rabbit_misc:check_expiry/1`.
fn expiry(n: i64) -> Result<u64, String> {
    if n < 0 {
        return Err(format!("{{value_negative,{n}}}"));
    }
    let v = n.unsigned_abs();
    if v > MAX_TTL_MS {
        return Err(format!("{{value_too_large,{n}}}"));
    }
    Ok(v)
}

fn string_arg(v: &FieldValue) -> Result<&[u8], String> {
    match v {
        FieldValue::LongStr(b) => Ok(b),
        other => Err(unacceptable(other)),
    }
}

fn short_str(b: &[u8]) -> ShortStr {
    ShortStr::from(String::from_utf8_lossy(b).into_owned())
}

/// Validates `queue.declare` arguments for a new queue and parses them, as RabbitMQ 4 does.
///
/// Checks run in RabbitMQ's order and the first failure is returned (all 406
/// PRECONDITION_FAILED):
/// 1. `x-dead-letter-exchange` must be a long string (the channel's check):
///    `invalid type 'long' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'`;
/// 2. `x-queue-type` must be `classic` or `quorum`: `... "unsupported queue type 'stream'"`;
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

    if let Some(v) = args.get("x-dead-letter-exchange") {
        if !matches!(v, FieldValue::LongStr(_)) {
            return Err(BrokerError::PreconditionFailed(format!(
                "invalid type '{}' for arg 'x-dead-letter-exchange' in queue '{queue}' in vhost '{vhost}'",
                type_name(v)
            )));
        }
    }

    let queue_type = match args.get("x-queue-type") {
        None => QueueType::Classic,
        Some(v) => {
            let name = string_arg(v).map_err(|r| errors.invalid_arg("x-queue-type", &r))?;
            match name {
                b"classic" => QueueType::Classic,
                b"quorum" => QueueType::Quorum,
                other => {
                    let reason = p_string(&format!(
                        "unsupported queue type '{}'",
                        String::from_utf8_lossy(other)
                    ));
                    return Err(errors.invalid_arg("x-queue-type", &reason));
                }
            }
        }
    };
    let quorum = queue_type == QueueType::Quorum;
    let classic = !quorum;

    let mut parsed = QueueArguments {
        queue_type,
        ..QueueArguments::default()
    };

    // Validators in the order of rabbit_amqqueue:declare_args/0, each only for its types.
    let get = |key: &str| args.get(key);
    let check =
        |key: &'static str, r: Result<(), String>| r.map_err(|e| errors.invalid_arg(key, &e));

    if let Some(v) = get("x-expires") {
        let ms = int_arg(v).and_then(|n| {
            if n == 0 {
                Err("{value_zero,0}".to_owned())
            } else {
                expiry(n)
            }
        });
        parsed.expires = Some(ms.map_err(|e| errors.invalid_arg("x-expires", &e))?);
    }
    if let Some(v) = get("x-message-ttl") {
        let ms = int_arg(v).and_then(expiry);
        parsed.message_ttl = Some(ms.map_err(|e| errors.invalid_arg("x-message-ttl", &e))?);
    }
    if let Some(v) = get("x-dead-letter-exchange") {
        let name = string_arg(v).map_err(|e| errors.invalid_arg("x-dead-letter-exchange", &e))?;
        parsed.dead_letter_exchange = Some(short_str(name));
    }
    if let Some(v) = get("x-dead-letter-routing-key") {
        let key = string_arg(v).and_then(|k| {
            if args.contains_key("x-dead-letter-exchange") {
                Ok(k)
            } else {
                Err("routing_key_but_no_dlx_defined".to_owned())
            }
        });
        let key = key.map_err(|e| errors.invalid_arg("x-dead-letter-routing-key", &e))?;
        parsed.dead_letter_routing_key = Some(short_str(key));
    }
    if quorum {
        if let Some(v) = get("x-dead-letter-strategy") {
            let strategy = string_arg(v).and_then(|s| {
                DeadLetterStrategy::from_name(s).ok_or_else(|| "invalid_dlx_strategy".to_owned())
            });
            parsed.dead_letter_strategy =
                Some(strategy.map_err(|e| errors.invalid_arg("x-dead-letter-strategy", &e))?);
        }
    }
    if let Some(v) = get("x-max-length") {
        let n = non_neg_int_arg(v).map_err(|e| errors.invalid_arg("x-max-length", &e))?;
        parsed.max_length = Some(n);
    }
    if let Some(v) = get("x-max-length-bytes") {
        let n = non_neg_int_arg(v).map_err(|e| errors.invalid_arg("x-max-length-bytes", &e))?;
        parsed.max_length_bytes = Some(n);
    }
    if quorum {
        for key in ["x-max-in-memory-length", "x-max-in-memory-bytes"] {
            if let Some(v) = get(key) {
                non_neg_int_arg(v).map_err(|e| errors.invalid_arg(key, &e))?;
            }
        }
    }
    if classic {
        if let Some(v) = get("x-max-priority") {
            let n = non_neg_int_arg(v)
                .and_then(|n| u8::try_from(n).map_err(|_| format!("{{max_value_exceeded,{n}}}")));
            parsed.max_priority = Some(n.map_err(|e| errors.invalid_arg("x-max-priority", &e))?);
        }
    }
    if let Some(v) = get("x-overflow") {
        let mode = string_arg(v)
            .and_then(|s| Overflow::from_name(s).ok_or_else(|| "invalid_overflow".to_owned()))
            .map_err(|e| errors.invalid_arg("x-overflow", &e))?;
        // RabbitMQ's quorum queues log "Invalid overflow strategy" and use drop-head.
        parsed.overflow = match (quorum, mode) {
            (true, Overflow::RejectPublishDlx) => Overflow::DropHead,
            (_, m) => m,
        };
    }
    if classic {
        if let Some(v) = get("x-queue-mode") {
            check(
                "x-queue-mode",
                string_arg(v).and_then(|s| match s {
                    b"default" | b"lazy" => Ok(()),
                    other => Err(p_string(&format!(
                        "unsupported queue mode '{}'",
                        String::from_utf8_lossy(other)
                    ))),
                }),
            )?;
        }
        if let Some(v) = get("x-queue-version") {
            check(
                "x-queue-version",
                non_neg_int_arg(v).and_then(|n| match n {
                    1 | 2 => Ok(()),
                    n => Err(p_string(&format!("unsupported queue version '{n}'"))),
                }),
            )?;
        }
    }
    if let Some(v) = get("x-single-active-consumer") {
        match v {
            FieldValue::Bool(b) => parsed.single_active_consumer = *b,
            other => {
                return Err(errors.invalid_arg("x-single-active-consumer", &unacceptable(other)))
            }
        }
    }
    if quorum {
        if let Some(v) = get("x-quorum-initial-group-size") {
            check(
                "x-quorum-initial-group-size",
                non_neg_int_arg(v).and_then(|n| {
                    if n == 0 {
                        Err("{value_zero,0}".to_owned())
                    } else {
                        Ok(())
                    }
                }),
            )?;
        }
    }
    if let Some(v) = get("x-queue-leader-locator") {
        check(
            "x-queue-leader-locator",
            string_arg(v).and_then(|s| match s {
                b"client-local" | b"balanced" | b"random" | b"least-leaders" => Ok(()),
                _ => Err("invalid_queue_locator_arg".to_owned()),
            }),
        )?;
    }
    if quorum {
        if let Some(v) = get("x-delivery-limit") {
            let n = int_arg(v).map_err(|e| errors.invalid_arg("x-delivery-limit", &e))?;
            parsed.delivery_limit = Some(n);
        }
        parsed.delayed_retry = parse_delayed_retry(args);
    }

    for (key, _) in args.iter() {
        if is_foreign_key(queue_type, key) {
            return Err(errors.foreign_arg(key, queue_type));
        }
    }

    if quorum {
        if auto_delete {
            return Err(errors.invalid_property("auto-delete"));
        }
        if exclusive {
            return Err(errors.invalid_property("exclusive-owner"));
        }
        if !durable {
            return Err(errors.invalid_property("non-durable"));
        }
    }

    Ok(parsed)
}

/// A positive integer of milliseconds, or `None`.
fn positive_ms(v: Option<&FieldValue>) -> Option<u64> {
    v.and_then(FieldValue::as_integer)
        .and_then(|n| u64::try_from(n).ok())
        .filter(|&n| n > 0)
}

/// Reads `x-delayed-retry-type`, `-min` and `-max` without ever failing: an invalid type,
/// a missing or invalid minimum, or a maximum below the minimum disables delayed retries.
pub fn parse_delayed_retry(args: &FieldTable) -> DelayedRetry {
    let kind = match args.get("x-delayed-retry-type") {
        Some(FieldValue::LongStr(s)) => RetryKind::from_name(s).unwrap_or_default(),
        _ => RetryKind::Disabled,
    };
    let min_ms = positive_ms(args.get("x-delayed-retry-min")).unwrap_or(0);
    let max_ms = match args.get("x-delayed-retry-max") {
        None => Some(min_ms),
        v => positive_ms(v),
    };
    match max_ms {
        Some(max_ms) if max_ms >= min_ms => DelayedRetry {
            kind: if min_ms == 0 {
                RetryKind::Disabled
            } else {
                kind
            },
            min_ms,
            max_ms,
        },
        _ => DelayedRetry {
            kind: RetryKind::Disabled,
            min_ms,
            max_ms: min_ms,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

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
            text(classic(&[("x-message-ttl", FieldValue::I64(315_360_000_001))])),
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
}
