//! Redeclare equivalence of arguments (`rabbit_misc:assert_args_equivalence/4`).

use dwellmq_codec::{FieldTable, FieldValue};

use crate::arguments::erlang_term::{erl_eq, erl_exact_eq, type_class, type_name, write_ts_or_tp};
use crate::arguments::queue_args::{kind_keys, QueueKind};
use crate::error::BrokerError;

/// One argument whose redeclared value differs from the current one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgMismatch {
    /// The argument's name.
    pub key: &'static str,
    /// How RabbitMQ describes the received value (`the value '2000' of type 'signedint'`,
    /// `'2000'`, or `none`).
    pub received: String,
    /// How RabbitMQ describes the current value, in the same forms.
    pub current: String,
}

impl ArgMismatch {
    /// The 406 for this mismatch on `kind` (`queue` or `exchange`) `name` in `vhost`:
    /// `inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received the value
    /// '2000' of type 'signedint' but current is the value '1000' of type 'signedint'`.
    pub fn to_error(&self, kind: &str, name: &str, vhost: &str) -> BrokerError {
        BrokerError::PreconditionFailed(format!(
            "inequivalent arg '{}' for {kind} '{name}' in vhost '{vhost}': received {} but current is {}",
            self.key, self.received, self.current
        ))
    }
}

/// `val/1` of `rabbit_misc`, for a value present on one side only.
fn describe_typed(v: Option<&FieldValue>) -> String {
    match v {
        None => "none".to_owned(),
        Some(v) => {
            let mut s = String::from("the value '");
            write_ts_or_tp(&mut s, v);
            s.push_str("' of type '");
            s.push_str(type_name(v));
            s.push('\'');
            s
        }
    }
}

/// `val/1` of `rabbit_misc`, for a bare value (both sides present).
fn describe_bare(v: &FieldValue) -> String {
    let mut s = String::from("'");
    write_ts_or_tp(&mut s, v);
    s.push('\'');
    s
}

/// Compares one argument as `assert_args_equivalence1/4` does.
fn compare(
    key: &'static str,
    current: &FieldTable,
    received: &FieldTable,
) -> Result<(), ArgMismatch> {
    match (current.get(key), received.get(key)) {
        (None, None) => Ok(()),
        (Some(c), Some(r)) => {
            let same = type_name(c) == type_name(r) && erl_exact_eq(c, r);
            let same_class = type_class(c) == type_class(r) && erl_eq(c, r);
            // With differing types RabbitMQ still accepts identical terms (e.g. a long string
            // and a byte array holding the same bytes, or a long and a timestamp).
            if same || same_class || erl_exact_eq(c, r) {
                Ok(())
            } else {
                Err(ArgMismatch {
                    key,
                    received: describe_bare(r),
                    current: describe_bare(c),
                })
            }
        }
        (c, r) => {
            let classic = |v: Option<&FieldValue>| matches!(v, Some(FieldValue::LongStr(b)) if b.as_ref() == b"classic");
            // rabbitmq-common#341: a classic queue need not carry x-queue-type.
            if key == "x-queue-type" && (classic(c) || classic(r)) {
                return Ok(());
            }
            Err(ArgMismatch {
                key,
                received: describe_typed(r),
                current: describe_typed(c),
            })
        }
    }
}

/// Checks the arguments of a redeclared queue against the current ones, as RabbitMQ 4 does:
/// only the arguments its queue type knows (e.g. `x-message-ttl`, `x-expires`,
/// `x-max-length`, `x-overflow`, `x-dead-letter-exchange`, `x-queue-type`, and
/// `x-max-priority` for classic queues, `x-delivery-limit` for quorum queues, `x-max-age` and
/// `x-stream-max-segment-size-bytes` for streams), in RabbitMQ's order. The queue type comes
/// from `current`.
///
/// Integer types compare by value (`long` 1000 equals `signedint` 1000), as do float types.
pub fn queue_arguments_equivalent(
    current: &FieldTable,
    received: &FieldTable,
) -> Result<(), ArgMismatch> {
    kind_keys(QueueKind::of_arguments(current))
        .iter()
        .try_for_each(|key| compare(key, current, received))
}

/// [`queue_arguments_equivalent`] with the full 406 text, e.g.
/// `inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received none but current is
/// the value '1000' of type 'long'`.
pub fn check_queue_equivalence(
    queue: &str,
    vhost: &str,
    current: &FieldTable,
    received: &FieldTable,
) -> Result<(), BrokerError> {
    queue_arguments_equivalent(current, received).map_err(|m| m.to_error("queue", queue, vhost))
}

/// Checks the arguments of a redeclared exchange: RabbitMQ compares only `alternate-exchange`.
pub fn check_exchange_equivalence(
    exchange: &str,
    vhost: &str,
    current: &FieldTable,
    received: &FieldTable,
) -> Result<(), BrokerError> {
    compare("alternate-exchange", current, received)
        .map_err(|m| m.to_error("exchange", exchange, vhost))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        entries.iter().cloned().collect()
    }

    fn text(current: &[(&str, FieldValue)], received: &[(&str, FieldValue)]) -> String {
        match check_queue_equivalence("q", "/", &table(current), &table(received)) {
            Err(BrokerError::PreconditionFailed(t)) => t,
            other => panic!("expected 406, got {other:?}"),
        }
    }

    #[test]
    fn identical_and_empty_are_equivalent() {
        let a = table(&[("x-message-ttl", FieldValue::I32(1000))]);
        assert!(queue_arguments_equivalent(&a, &a).is_ok());
        assert!(queue_arguments_equivalent(&FieldTable::new(), &FieldTable::new()).is_ok());
    }

    #[test]
    fn integer_types_compare_by_value() {
        let a = table(&[("x-message-ttl", FieldValue::I64(1000))]);
        let b = table(&[("x-message-ttl", FieldValue::U16(1000))]);
        assert!(queue_arguments_equivalent(&a, &b).is_ok());
    }

    #[test]
    fn different_values_of_one_type() {
        assert_eq!(
            text(
                &[("x-message-ttl", FieldValue::I32(1000))],
                &[("x-message-ttl", FieldValue::I32(2000))]
            ),
            "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received '2000' but current is '1000'"
        );
        assert_eq!(
            text(
                &[("x-overflow", "drop-head".into())],
                &[("x-overflow", "reject-publish".into())]
            ),
            "inequivalent arg 'x-overflow' for queue 'q' in vhost '/': received 'reject-publish' but current is 'drop-head'"
        );
    }

    #[test]
    fn present_on_one_side_only() {
        assert_eq!(
            text(&[], &[("x-message-ttl", FieldValue::I32(20000))]),
            "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received the value '20000' of type 'signedint' but current is none"
        );
        assert_eq!(
            text(&[("x-expires", FieldValue::I64(2592000000))], &[]),
            "inequivalent arg 'x-expires' for queue 'q' in vhost '/': received none but current is the value '2592000000' of type 'long'"
        );
        assert_eq!(
            text(&[], &[("x-dead-letter-exchange", "dead-letter.ex".into())]),
            "inequivalent arg 'x-dead-letter-exchange' for queue 'q' in vhost '/': received the value 'dead-letter.ex' of type 'longstr' but current is none"
        );
    }

    #[test]
    fn type_mismatch_prints_bare_values() {
        assert_eq!(
            text(
                &[("x-message-ttl", FieldValue::I64(1000))],
                &[("x-message-ttl", "1000".into())]
            ),
            "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received '1000' but current is '1000'"
        );
        assert_eq!(
            text(
                &[("x-max-length", FieldValue::I64(5))],
                &[("x-max-length", FieldValue::F64(5.0))]
            ),
            "inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received '5.0' but current is '5'"
        );
    }

    #[test]
    fn classic_queue_type_may_be_implicit() {
        let typed = table(&[("x-queue-type", "classic".into())]);
        assert!(queue_arguments_equivalent(&FieldTable::new(), &typed).is_ok());
        assert!(queue_arguments_equivalent(&typed, &FieldTable::new()).is_ok());
        let quorum = table(&[("x-queue-type", "quorum".into())]);
        assert_eq!(
            queue_arguments_equivalent(&quorum, &FieldTable::new())
                .unwrap_err()
                .to_error("queue", "q", "/")
                .to_string(),
            "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received none but current is the value 'quorum' of type 'longstr'"
        );
        assert_eq!(
            text(&[("x-queue-type", "quorum".into())], &[("x-queue-type", "classic".into())]),
            "inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received 'classic' but current is 'quorum'"
        );
    }

    #[test]
    fn only_known_arguments_of_the_type_are_compared() {
        assert!(queue_arguments_equivalent(
            &table(&[("x-custom", "a".into())]),
            &table(&[("x-custom", "b".into())])
        )
        .is_ok());
        // x-delivery-limit matters for quorum queues only.
        let q = |n: i64| {
            table(&[
                ("x-queue-type", "quorum".into()),
                ("x-delivery-limit", FieldValue::I64(n)),
            ])
        };
        assert!(queue_arguments_equivalent(&q(5), &q(6)).is_err());
        let c = |n: i64| table(&[("x-delivery-limit", FieldValue::I64(n))]);
        assert!(queue_arguments_equivalent(&c(5), &c(6)).is_ok());
        // So do RabbitMQ 4.3's delayed-retry arguments.
        let r = |ms: i64| {
            table(&[
                ("x-queue-type", "quorum".into()),
                ("x-delayed-retry-type", "failed".into()),
                ("x-delayed-retry-min", FieldValue::I64(ms)),
            ])
        };
        let m = queue_arguments_equivalent(&r(1000), &r(2000)).unwrap_err();
        assert_eq!(m.key, "x-delayed-retry-min");
        // x-max-priority matters for classic queues.
        let p = |n: i32| table(&[("x-max-priority", FieldValue::I32(n))]);
        let m = queue_arguments_equivalent(&p(5), &p(10)).unwrap_err();
        assert_eq!(m.key, "x-max-priority");
    }

    #[test]
    fn checks_follow_rabbitmq_order() {
        // x-expires comes before x-message-ttl in the classic list.
        let m = queue_arguments_equivalent(
            &table(&[
                ("x-message-ttl", FieldValue::I64(1)),
                ("x-expires", FieldValue::I64(1)),
            ]),
            &table(&[
                ("x-message-ttl", FieldValue::I64(2)),
                ("x-expires", FieldValue::I64(2)),
            ]),
        )
        .unwrap_err();
        assert_eq!(m.key, "x-expires");
    }

    #[test]
    fn exchange_equivalence_checks_alternate_exchange() {
        let a = table(&[("alternate-exchange", "ae".into())]);
        assert!(check_exchange_equivalence("x", "/", &a, &a).is_ok());
        assert_eq!(
            check_exchange_equivalence("x", "/", &a, &FieldTable::new())
                .unwrap_err()
                .to_string(),
            "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'x' in vhost '/': received none but current is the value 'ae' of type 'longstr'"
        );
        assert!(check_exchange_equivalence(
            "x",
            "/",
            &table(&[("x-other", "a".into())]),
            &FieldTable::new()
        )
        .is_ok());
    }
}
