//! The `x-delayed-retry-*` arguments (RabbitMQ 4.3), which are never an error.

use dwellmq_codec::{FieldTable, FieldValue};

use super::types::{DelayedRetry, RetryKind};

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
