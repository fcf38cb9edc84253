//! Sender-selected distribution: the `CC` and `BCC` headers name extra routing keys.
//!
//! As RabbitMQ's `rabbit_basic:header_routes/1`: each header, when present, must be an array;
//! its long strings are routing keys used alongside the publish's own, for every exchange type
//! that routes by key. `BCC` is removed from the message before anyone sees it (the publisher
//! strips it, see [`BCC`]); `CC` stays.

use dwellmq_codec::{FieldTable, FieldValue, ShortStr};

use crate::arguments::erlang_term::type_name;
use crate::error::BrokerError;

/// The header whose keys are copied to, visibly.
pub const CC: &str = "CC";
/// The header whose keys are copied to, invisibly: removed from delivered messages.
pub const BCC: &str = "BCC";

/// The extra routing keys a message's `CC` and `BCC` headers add, `CC`'s first.
///
/// Only long strings in the arrays count; other elements are skipped, as in RabbitMQ, and so
/// is a key that is not UTF-8 (no binding or queue name can match it). A header that is not an
/// array is RabbitMQ's 406 `invalid message: {unacceptable_type_in_header,"CC",longstr}`.
///
/// ```
/// use dwellmq_codec::{FieldTable, FieldValue};
/// use dwellmq_core::routing::extra_routing_keys;
///
/// let mut h = FieldTable::new();
/// h.insert("CC", FieldValue::Array(vec!["two".into(), "three".into()]));
/// h.insert("BCC", FieldValue::Array(vec!["four".into()]));
/// let keys = extra_routing_keys(Some(&h)).unwrap();
/// assert_eq!(keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(), ["two", "three", "four"]);
/// ```
pub fn extra_routing_keys(headers: Option<&FieldTable>) -> Result<Vec<ShortStr>, BrokerError> {
    let mut keys = Vec::new();
    let Some(headers) = headers else {
        return Ok(keys);
    };
    for header in [CC, BCC] {
        match headers.get(header) {
            None => {}
            Some(FieldValue::Array(values)) => {
                keys.extend(values.iter().filter_map(|v| match v {
                    FieldValue::LongStr(key) => ShortStr::from_utf8(key.clone()),
                    _ => None,
                }));
            }
            Some(other) => {
                return Err(BrokerError::PreconditionFailed(format!(
                    "invalid message: {{unacceptable_type_in_header,\"{header}\",{}}}",
                    type_name(other)
                )))
            }
        }
    }
    Ok(keys)
}

/// The keys of a `BCC` header's value (an array; anything else has none), kept beside the
/// message once the header is removed: dead-lettering routes by them too.
pub fn bcc_keys(value: &FieldValue) -> Box<[ShortStr]> {
    match value {
        FieldValue::Array(values) => values
            .iter()
            .filter_map(|v| match v {
                FieldValue::LongStr(key) => ShortStr::from_utf8(key.clone()),
                _ => None,
            })
            .collect(),
        _ => Box::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn keys(h: &FieldTable) -> Vec<String> {
        extra_routing_keys(Some(h))
            .unwrap()
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect()
    }

    #[test]
    fn no_headers_no_keys() {
        assert!(extra_routing_keys(None).unwrap().is_empty());
        assert!(extra_routing_keys(Some(&FieldTable::new()))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn only_long_strings_in_the_arrays_count() {
        let mut h = FieldTable::new();
        h.insert(
            "CC",
            FieldValue::Array(vec![
                "a".into(),
                FieldValue::I32(1),
                FieldValue::Bytes(Bytes::from_static(b"bytes")),
                FieldValue::LongStr(Bytes::from_static(b"\xff")),
                "b".into(),
            ]),
        );
        h.insert("cc", FieldValue::Array(vec!["lowercase".into()]));
        assert_eq!(keys(&h), ["a", "b"]);
    }

    #[test]
    fn a_header_that_is_not_an_array_is_refused_like_rabbitmq() {
        let mut h = FieldTable::new();
        h.insert("BCC", "one");
        let err = extra_routing_keys(Some(&h)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,\"BCC\",longstr}"
        );
    }
}
