//! `exchange.declare` arguments: `alternate-exchange` and the delayed exchange's
//! `x-delayed-type`.

use dwellmq_codec::{FieldTable, FieldValue, ShortStr};

use crate::arguments::erlang_term::type_name;
use crate::error::BrokerError;
use crate::routing::RoutingKind;

/// The exchange type name of the delayed-message exchange.
pub const DELAYED_MESSAGE_TYPE: &str = "x-delayed-message";

/// Reads the `alternate-exchange` argument of a new exchange.
///
/// It must be a long string; otherwise, as RabbitMQ's channel:
/// `406 invalid type 'long' for arg 'alternate-exchange' in exchange 'x' in vhost '/'`.
/// A name that is not UTF-8 (no exchange can have one) is read lossily.
pub fn parse_alternate_exchange(
    exchange: &str,
    vhost: &str,
    args: &FieldTable,
) -> Result<Option<ShortStr>, BrokerError> {
    match args.get("alternate-exchange") {
        None => Ok(None),
        Some(FieldValue::LongStr(name)) => Ok(Some(ShortStr::from(
            String::from_utf8_lossy(name).into_owned(),
        ))),
        Some(other) => Err(BrokerError::PreconditionFailed(format!(
            "invalid type '{}' for arg 'alternate-exchange' in exchange '{exchange}' in vhost '{vhost}'",
            type_name(other)
        ))),
    }
}

/// The routing behaviour a standard exchange type name stands for, or RabbitMQ's
/// `check_type` error, a 503 COMMAND_INVALID that closes the connection:
/// `unknown exchange type 'NAME'`, and `invalid exchange type ''` for the empty name (Erlang
/// knows the atom `''`, but no exchange type is registered under it).
///
/// ```
/// use dwellmq_core::{arguments::parse_exchange_type, routing::RoutingKind};
///
/// assert_eq!(parse_exchange_type("topic"), Ok(RoutingKind::Topic));
/// assert_eq!(parse_exchange_type("").unwrap_err().reply_code(), 503);
/// ```
pub fn parse_exchange_type(name: &str) -> Result<RoutingKind, BrokerError> {
    RoutingKind::from_name(name).ok_or_else(|| {
        let problem = if name.is_empty() {
            "invalid"
        } else {
            "unknown"
        };
        BrokerError::CommandInvalid(format!("{problem} exchange type '{name}'"))
    })
}

/// Reads `x-delayed-type`, the routing behaviour of an `x-delayed-message` exchange, with the
/// delayed-message plugin's texts:
/// - absent or not a string: 406 `Invalid argument, 'x-delayed-type' must be an existing
///   exchange type`;
/// - `x-delayed-message`: 406 `Invalid argument, 'x-delayed-message' can't be used for
///   'x-delayed-type'`;
/// - any other name that is not a type: [`parse_exchange_type`]'s 503, as the plugin calls
///   RabbitMQ's `check_type`.
///
/// ```
/// use dwellmq_codec::FieldTable;
/// use dwellmq_core::{arguments::parse_delayed_type, routing::RoutingKind};
///
/// let mut args = FieldTable::new();
/// args.insert("x-delayed-type", "topic");
/// assert_eq!(parse_delayed_type(&args), Ok(RoutingKind::Topic));
/// ```
pub fn parse_delayed_type(args: &FieldTable) -> Result<RoutingKind, BrokerError> {
    let name = match args.get("x-delayed-type") {
        Some(FieldValue::LongStr(b)) | Some(FieldValue::Bytes(b)) => b,
        _ => {
            return Err(BrokerError::PreconditionFailed(
                "Invalid argument, 'x-delayed-type' must be an existing exchange type".to_owned(),
            ))
        }
    };
    if name.as_ref() == DELAYED_MESSAGE_TYPE.as_bytes() {
        return Err(BrokerError::PreconditionFailed(
            "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'".to_owned(),
        ));
    }
    parse_exchange_type(&String::from_utf8_lossy(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn args(v: FieldValue) -> FieldTable {
        let mut t = FieldTable::new();
        t.insert("x-delayed-type", v);
        t
    }

    fn text(r: Result<RoutingKind, BrokerError>) -> String {
        match r {
            Err(BrokerError::PreconditionFailed(t)) => t,
            other => panic!("expected 406, got {other:?}"),
        }
    }

    fn text_503(r: Result<RoutingKind, BrokerError>) -> String {
        match r {
            Err(BrokerError::CommandInvalid(t)) => t,
            other => panic!("expected 503, got {other:?}"),
        }
    }

    #[test]
    fn delayed_type_names_a_routing_kind() {
        for (name, kind) in [
            ("direct", RoutingKind::Direct),
            ("fanout", RoutingKind::Fanout),
            ("topic", RoutingKind::Topic),
            ("headers", RoutingKind::Headers),
        ] {
            assert_eq!(parse_delayed_type(&args(name.into())), Ok(kind));
        }
        assert_eq!(
            parse_delayed_type(&args(FieldValue::Bytes(Bytes::from_static(b"fanout")))),
            Ok(RoutingKind::Fanout)
        );
    }

    #[test]
    fn delayed_type_errors_match_the_plugin() {
        let must = "Invalid argument, 'x-delayed-type' must be an existing exchange type";
        assert_eq!(text(parse_delayed_type(&FieldTable::new())), must);
        assert_eq!(text(parse_delayed_type(&args(FieldValue::I32(1)))), must);
        assert_eq!(
            text(parse_delayed_type(&args("x-delayed-message".into()))),
            "Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"
        );
        assert_eq!(
            text_503(parse_delayed_type(&args("x-consistent-hash".into()))),
            "unknown exchange type 'x-consistent-hash'"
        );
        assert_eq!(
            text_503(parse_delayed_type(&args("Direct".into()))),
            "unknown exchange type 'Direct'"
        );
        assert_eq!(
            text_503(parse_delayed_type(&args("".into()))),
            "invalid exchange type ''"
        );
    }

    #[test]
    fn alternate_exchange_must_be_a_string() {
        let mut t = FieldTable::new();
        assert_eq!(parse_alternate_exchange("x", "/", &t), Ok(None));
        t.insert("alternate-exchange", "ae");
        assert_eq!(
            parse_alternate_exchange("x", "/", &t).unwrap().as_deref(),
            Some("ae")
        );
        t.insert("alternate-exchange", FieldValue::I64(1));
        assert_eq!(
            parse_alternate_exchange("x", "/", &t).unwrap_err().to_string(),
            "PRECONDITION_FAILED - invalid type 'long' for arg 'alternate-exchange' in exchange 'x' in vhost '/'"
        );
    }
}
