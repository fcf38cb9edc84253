//! Headers exchange matching, as RabbitMQ's `rabbit_exchange_type_headers`.

use dwellmq_codec::{FieldTable, FieldValue};

use crate::arguments::erlang_term::{erl_exact_eq, erl_exact_eq_int, tp, type_name};
use crate::error::BrokerError;

/// A binding's `x-match` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum MatchKind {
    /// Every considered binding argument must match. The default.
    #[default]
    All,
    /// At least one must.
    Any,
    /// As `All`, also considering `x-` arguments.
    AllWithX,
    /// As `Any`, also considering `x-` arguments.
    AnyWithX,
}

impl MatchKind {
    /// `parse_x_match/1`: anything but the four valid strings means `all` (RabbitMQ's legacy
    /// behaviour for bindings made before it validated `x-match`).
    pub(crate) fn of(args: &FieldTable) -> MatchKind {
        match args.get("x-match") {
            Some(FieldValue::LongStr(v)) => match v.as_ref() {
                b"any" => MatchKind::Any,
                b"all-with-x" => MatchKind::AllWithX,
                b"any-with-x" => MatchKind::AnyWithX,
                _ => MatchKind::All,
            },
            _ => MatchKind::All,
        }
    }
}

/// Checks a headers binding's `x-match` as RabbitMQ's `validate_binding/2` (406 on failure):
/// - a long string other than `all`, `any`, `all-with-x`, `any-with-x`:
///   `Invalid x-match field value <<"foo">>; expected all, any, all-with-x, or any-with-x`;
/// - another type: `Invalid x-match field type long (value 5); expected longstr`.
///
/// An absent `x-match` is valid (it means `all`).
pub fn validate_headers_binding_args(args: &FieldTable) -> Result<(), BrokerError> {
    match args.get("x-match") {
        None => Ok(()),
        Some(FieldValue::LongStr(v))
            if matches!(v.as_ref(), b"all" | b"any" | b"all-with-x" | b"any-with-x") =>
        {
            Ok(())
        }
        Some(v @ FieldValue::LongStr(_)) => Err(BrokerError::PreconditionFailed(format!(
            "Invalid x-match field value {}; expected all, any, all-with-x, or any-with-x",
            tp(v)
        ))),
        Some(v) => Err(BrokerError::PreconditionFailed(format!(
            "Invalid x-match field type {} (value {}); expected longstr",
            type_name(v),
            tp(v)
        ))),
    }
}

/// The value a message's headers give `key` for routing, as RabbitMQ 4's
/// `mc_amqpl:routing_headers/2` builds its map: the last occurrence of a repeated key wins.
fn header<'t>(headers: &'t FieldTable, key: &str) -> Option<&'t FieldValue> {
    headers
        .iter()
        .filter(|(k, _)| k.as_str() == key)
        .last()
        .map(|(_, v)| v)
}

/// Whether a binding value matches a header value: Erlang `=:=` on the decoded values, after
/// `routing_value/2` turned a header timestamp (seconds) into milliseconds.
fn value_matches(expected: &FieldValue, actual: &FieldValue) -> bool {
    match actual {
        FieldValue::Timestamp(t) => erl_exact_eq_int(expected, i128::from(*t) * 1000),
        other => erl_exact_eq(expected, other),
    }
}

/// Whether a message's headers match a binding's arguments, as RabbitMQ 4's
/// `rabbit_exchange_type_headers:route/3`.
///
/// `x-match` itself is never compared; other `x-` arguments only with the `-with-x` modes. A
/// binding argument of type `void` matches when the header is present, whatever its value.
/// Any other argument matches a header whose decoded value is identical (Erlang `=:=`): the
/// field types are not compared, so `long` 1 matches `signedint` 1 and a long string matches a
/// byte array with the same bytes, but `long` 1 does not match `double` 1.0. As in RabbitMQ, a
/// header timestamp is compared in milliseconds, and a repeated header key counts with its last
/// value. `all` with nothing to compare matches every message; `any` matches none.
/// Allocates nothing.
pub(crate) fn headers_match(
    kind: MatchKind,
    binding: &FieldTable,
    headers: Option<&FieldTable>,
) -> bool {
    let with_x = matches!(kind, MatchKind::AllWithX | MatchKind::AnyWithX);
    let all = matches!(kind, MatchKind::All | MatchKind::AllWithX);
    for (key, expected) in binding.iter() {
        let key = key.as_str();
        if key == "x-match" || (!with_x && key.starts_with("x-")) {
            continue;
        }
        let matched = match headers.and_then(|h| header(h, key)) {
            None => false,
            Some(actual) => matches!(expected, FieldValue::Void) || value_matches(expected, actual),
        };
        if matched != all {
            // The first failure decides `all`, the first success decides `any`.
            return matched;
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn t(entries: &[(&str, FieldValue)]) -> FieldTable {
        entries.iter().cloned().collect()
    }

    fn m(binding: &[(&str, FieldValue)], headers: Option<&[(&str, FieldValue)]>) -> bool {
        let b = t(binding);
        let h = headers.map(t);
        headers_match(MatchKind::of(&b), &b, h.as_ref())
    }

    #[test]
    fn all_requires_every_argument() {
        let b = [("a", "1".into()), ("b", "2".into())];
        assert!(m(
            &b,
            Some(&[("b", "2".into()), ("a", "1".into()), ("c", "3".into())])
        ));
        assert!(!m(&b, Some(&[("a", "1".into())])));
        assert!(!m(&b, Some(&[("a", "1".into()), ("b", "3".into())])));
        assert!(!m(&b, None));
    }

    #[test]
    fn any_requires_one_argument() {
        let b = [
            ("x-match", "any".into()),
            ("a", "1".into()),
            ("b", "2".into()),
        ];
        assert!(m(&b, Some(&[("b", "2".into())])));
        assert!(!m(&b, Some(&[("a", "2".into()), ("b", "1".into())])));
        assert!(!m(&b, None));
    }

    #[test]
    fn empty_patterns() {
        assert!(
            m(&[], None),
            "all with nothing to compare matches everything"
        );
        assert!(m(&[("x-match", "all".into())], Some(&[("a", "1".into())])));
        assert!(!m(&[("x-match", "any".into())], Some(&[("a", "1".into())])));
        assert!(!m(&[("x-match", "any".into())], None));
    }

    #[test]
    fn x_arguments_count_only_with_x() {
        let b = [
            ("x-match", "all".into()),
            ("x-tenant", "t1".into()),
            ("a", "1".into()),
        ];
        assert!(m(&b, Some(&[("a", "1".into())])));
        let b = [
            ("x-match", "all-with-x".into()),
            ("x-tenant", "t1".into()),
            ("a", "1".into()),
        ];
        assert!(!m(&b, Some(&[("a", "1".into())])));
        assert!(m(&b, Some(&[("a", "1".into()), ("x-tenant", "t1".into())])));
        let b = [("x-match", "any-with-x".into()), ("x-tenant", "t1".into())];
        assert!(m(&b, Some(&[("x-tenant", "t1".into())])));
        let b = [("x-match", "any".into()), ("x-tenant", "t1".into())];
        assert!(!m(&b, Some(&[("x-tenant", "t1".into())])));
        // x-match itself is never a header to compare, even with -with-x.
        let b = [("x-match", "all-with-x".into())];
        assert!(m(&b, None));
    }

    #[test]
    fn void_matches_presence() {
        let b = [("a", FieldValue::Void)];
        assert!(m(&b, Some(&[("a", "anything".into())])));
        assert!(m(&b, Some(&[("a", FieldValue::Void)])));
        assert!(!m(&b, Some(&[("b", "1".into())])));
        let b = [
            ("x-match", "any".into()),
            ("a", FieldValue::Void),
            ("b", "2".into()),
        ];
        assert!(m(&b, Some(&[("a", FieldValue::I64(9))])));
        // A void header does not match a non-void binding value.
        assert!(!m(&[("a", "1".into())], Some(&[("a", FieldValue::Void)])));
    }

    #[test]
    fn values_compare_as_identical_erlang_terms() {
        assert!(m(
            &[("a", FieldValue::I64(1))],
            Some(&[("a", FieldValue::I8(1))])
        ));
        assert!(m(
            &[("a", FieldValue::U32(7))],
            Some(&[("a", FieldValue::I16(7))])
        ));
        assert!(!m(
            &[("a", FieldValue::I64(1))],
            Some(&[("a", FieldValue::F64(1.0))])
        ));
        assert!(m(
            &[("a", FieldValue::F32(0.5))],
            Some(&[("a", FieldValue::F64(0.5))])
        ));
        assert!(!m(&[("a", FieldValue::I64(1))], Some(&[("a", "1".into())])));
        assert!(m(
            &[("a", "x".into())],
            Some(&[("a", FieldValue::Bytes(Bytes::from_static(b"x")))])
        ));
        assert!(m(
            &[("a", FieldValue::Bool(true))],
            Some(&[("a", FieldValue::Bool(true))])
        ));
        assert!(!m(
            &[("a", FieldValue::Bool(true))],
            Some(&[("a", "true".into())])
        ));
        let arr = |v: FieldValue| FieldValue::Array(vec![v]);
        assert!(m(
            &[("a", arr(FieldValue::I64(1)))],
            Some(&[("a", arr(FieldValue::I64(1)))])
        ));
        assert!(!m(
            &[("a", arr(FieldValue::I64(1)))],
            Some(&[("a", arr(FieldValue::I32(1)))])
        ));
    }

    #[test]
    fn header_timestamps_compare_in_milliseconds() {
        // mc_amqpl:routing_value(timestamp, V) -> V * 1000.
        assert!(m(
            &[("t", FieldValue::I64(5000))],
            Some(&[("t", FieldValue::Timestamp(5))])
        ));
        assert!(!m(
            &[("t", FieldValue::Timestamp(5))],
            Some(&[("t", FieldValue::Timestamp(5))])
        ));
        assert!(m(
            &[("t", FieldValue::Timestamp(5000))],
            Some(&[("t", FieldValue::Timestamp(5))])
        ));
        assert!(m(
            &[("t", FieldValue::Void)],
            Some(&[("t", FieldValue::Timestamp(5))])
        ));
    }

    #[test]
    fn repeated_keys() {
        // A repeated header counts with its last value.
        assert!(m(
            &[("a", "2".into())],
            Some(&[("a", "1".into()), ("a", "2".into())])
        ));
        assert!(!m(
            &[("a", "1".into())],
            Some(&[("a", "1".into()), ("a", "2".into())])
        ));
        // A repeated binding argument is compared each time against that one value.
        let b = [("a", "1".into()), ("a", "2".into())];
        assert!(!m(&b, Some(&[("a", "1".into()), ("a", "2".into())])));
        let b = [
            ("x-match", "any".into()),
            ("a", "1".into()),
            ("a", "2".into()),
        ];
        assert!(m(&b, Some(&[("a", "2".into())])));
    }

    #[test]
    fn invalid_x_match_means_all_when_routing() {
        let b = [("x-match", "some".into()), ("a", "1".into())];
        assert!(m(&b, Some(&[("a", "1".into())])));
        let b = [("x-match", FieldValue::I32(1)), ("a", "1".into())];
        assert!(!m(&b, Some(&[("b", "1".into())])));
    }

    #[test]
    fn validation_texts_match_rabbitmq() {
        assert!(validate_headers_binding_args(&FieldTable::new()).is_ok());
        for ok in ["all", "any", "all-with-x", "any-with-x"] {
            assert!(validate_headers_binding_args(&t(&[("x-match", ok.into())])).is_ok());
        }
        assert_eq!(
            validate_headers_binding_args(&t(&[("x-match", "foo".into())]))
                .unwrap_err()
                .to_string(),
            "PRECONDITION_FAILED - Invalid x-match field value <<\"foo\">>; expected all, any, all-with-x, or any-with-x"
        );
        assert_eq!(
            validate_headers_binding_args(&t(&[("x-match", FieldValue::I64(5))]))
                .unwrap_err()
                .to_string(),
            "PRECONDITION_FAILED - Invalid x-match field type long (value 5); expected longstr"
        );
        assert_eq!(
            validate_headers_binding_args(&t(&[("x-match", FieldValue::Bool(true))]))
                .unwrap_err()
                .reply_code(),
            406
        );
    }
}
