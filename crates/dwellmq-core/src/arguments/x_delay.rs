//! The `x-delay` header of a message published to an `x-delayed-message` exchange.

use dwellmq_codec::{FieldTable, FieldValue};

use crate::arguments::expiration::{erl_to_integer, MAX_TTL_MS};
use crate::error::BrokerError;

/// The longest delay dwellmq holds a message for: RabbitMQ's TTL ceiling, ten years in ms.
pub const MAX_DELAY_MS: i64 = MAX_TTL_MS as i64;

/// How much of an offending value an error text quotes.
const QUOTE_LIMIT: usize = 64;

/// Reads the delay in milliseconds from the `x-delay` header.
///
/// A result `<= 0` means "route now". As the delayed-message plugin:
/// - `long`, `signedint`, `unsignedint`, `short`, `unsignedshort`, `unsignedbyte`: as is;
/// - a string holding an integer (`"5000"`, `"+5000"`, `"-10"`): parsed;
/// - `float`, `double`: truncated toward zero;
/// - absent, `byte` (signed), `bool`, `timestamp`, `void`, arrays, tables: 0.
///
/// Where dwellmq does better than the plugin:
/// - a `decimal` is truncated like a float (the plugin crashes the connection);
/// - a string that is not an integer is a 406 with a readable text (the plugin crashes the
///   channel);
/// - a delay above [`MAX_DELAY_MS`] is a 406 (the plugin delivers delays above 2^32-1 ms at
///   once). NaN counts as no delay.
///
/// ```
/// use dwellmq_codec::{FieldTable, FieldValue};
/// use dwellmq_core::arguments::parse_x_delay;
///
/// let mut h = FieldTable::new();
/// h.insert("x-delay", FieldValue::I32(5000));
/// assert_eq!(parse_x_delay(Some(&h)), Ok(5000));
/// assert_eq!(parse_x_delay(None), Ok(0));
/// ```
pub fn parse_x_delay(headers: Option<&FieldTable>) -> Result<i64, BrokerError> {
    let Some(value) = headers.and_then(|h| h.get("x-delay")) else {
        return Ok(0);
    };
    let delay = match value {
        FieldValue::I64(v) => *v,
        FieldValue::I32(v) => (*v).into(),
        FieldValue::U32(v) => (*v).into(),
        FieldValue::I16(v) => (*v).into(),
        FieldValue::U16(v) => (*v).into(),
        FieldValue::U8(v) => (*v).into(),
        FieldValue::F32(v) => float_delay(f64::from(*v))?,
        FieldValue::F64(v) => float_delay(*v)?,
        FieldValue::Decimal { scale, value } => decimal_delay(*scale, *value),
        FieldValue::LongStr(s) | FieldValue::Bytes(s) => string_delay(s)?,
        FieldValue::I8(_)
        | FieldValue::Bool(_)
        | FieldValue::Timestamp(_)
        | FieldValue::Void
        | FieldValue::Array(_)
        | FieldValue::Table(_) => 0,
    };
    if delay > MAX_DELAY_MS {
        return Err(too_large(&delay.to_string()));
    }
    Ok(delay)
}

/// The `x-delay` header of a message released after `delay` ms: −delay, which also stops a
/// second delayed exchange on its way from holding it again.
///
/// Signed 32-bit (`I`) when −delay fits, as the 3.x plugin writes it, and signed 64-bit (`l`)
/// only beyond (delays over 24.8 days): pika decodes `l` as unsigned, so −1500 written as `l`
/// would reach a Python consumer as 18446744073709550116.
///
/// ```
/// use dwellmq_codec::FieldValue;
/// use dwellmq_core::arguments::released_x_delay;
///
/// assert_eq!(released_x_delay(1500), FieldValue::I32(-1500));
/// assert_eq!(released_x_delay(5_000_000_000), FieldValue::I64(-5_000_000_000));
/// ```
pub fn released_x_delay(delay: i64) -> FieldValue {
    let negated = delay.saturating_neg();
    i32::try_from(negated).map_or(FieldValue::I64(negated), FieldValue::I32)
}

fn too_large(shown: &str) -> BrokerError {
    BrokerError::PreconditionFailed(format!(
        "invalid 'x-delay' header: {shown} ms is above the maximum delay of {MAX_DELAY_MS} ms"
    ))
}

fn float_delay(v: f64) -> Result<i64, BrokerError> {
    if v.is_nan() {
        return Ok(0);
    }
    let t = v.trunc();
    if t > MAX_DELAY_MS as f64 {
        return Err(too_large(&format!("{t}")));
    }
    // Saturates for very negative values, which all mean "now".
    Ok(t as i64)
}

fn decimal_delay(scale: u8, value: u32) -> i64 {
    let divisor = 10u64.checked_pow(u32::from(scale));
    divisor.map_or(0, |d| (u64::from(value) / d) as i64)
}

fn string_delay(s: &[u8]) -> Result<i64, BrokerError> {
    let text = String::from_utf8_lossy(s);
    let int = erl_to_integer(&text).filter(|i| i.rest.is_empty());
    let Some(int) = int else {
        let shown: String = text.chars().take(QUOTE_LIMIT).collect();
        let more = if text.chars().count() > QUOTE_LIMIT {
            "..."
        } else {
            ""
        };
        return Err(BrokerError::PreconditionFailed(format!(
            "invalid 'x-delay' header: '{shown}{more}' is not an integer"
        )));
    };
    if int.exceeds(MAX_TTL_MS) {
        let shown = if int.digits.len() > 24 {
            format!("{}...", &int.digits[..24])
        } else {
            int.digits.to_owned()
        };
        return Err(too_large(&shown));
    }
    // A huge negative string still means "now".
    Ok(int.to_i64().unwrap_or(i64::MIN))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn delay(v: FieldValue) -> Result<i64, BrokerError> {
        let mut h = FieldTable::new();
        h.insert("x-delay", v);
        parse_x_delay(Some(&h))
    }

    #[test]
    fn integers_are_used_as_is() {
        assert_eq!(delay(FieldValue::I64(5000)), Ok(5000));
        assert_eq!(delay(FieldValue::I32(-5)), Ok(-5));
        assert_eq!(delay(FieldValue::U32(u32::MAX)), Ok(4_294_967_295));
        assert_eq!(delay(FieldValue::I16(7)), Ok(7));
        assert_eq!(delay(FieldValue::U16(7)), Ok(7));
        assert_eq!(delay(FieldValue::U8(7)), Ok(7));
        assert_eq!(delay(FieldValue::I64(MAX_DELAY_MS)), Ok(MAX_DELAY_MS));
        assert_eq!(delay(FieldValue::I64(i64::MIN)), Ok(i64::MIN));
    }

    #[test]
    fn other_types_mean_no_delay() {
        assert_eq!(parse_x_delay(None), Ok(0));
        assert_eq!(parse_x_delay(Some(&FieldTable::new())), Ok(0));
        assert_eq!(delay(FieldValue::I8(100)), Ok(0));
        assert_eq!(delay(FieldValue::Bool(true)), Ok(0));
        assert_eq!(delay(FieldValue::Timestamp(100)), Ok(0));
        assert_eq!(delay(FieldValue::Void), Ok(0));
        assert_eq!(delay(FieldValue::Array(vec![FieldValue::I64(5)])), Ok(0));
    }

    #[test]
    fn strings_holding_integers_are_parsed() {
        assert_eq!(delay("5000".into()), Ok(5000));
        assert_eq!(delay("+5000".into()), Ok(5000));
        assert_eq!(delay("-10".into()), Ok(-10));
        assert_eq!(delay("0005".into()), Ok(5));
        assert_eq!(delay(FieldValue::Bytes(Bytes::from_static(b"42"))), Ok(42));
        assert_eq!(delay("-99999999999999999999999".into()), Ok(i64::MIN));
    }

    #[test]
    fn other_strings_are_refused_readably() {
        let text = |v: &str| delay(v.into()).unwrap_err().to_string();
        assert_eq!(
            text("soon"),
            "PRECONDITION_FAILED - invalid 'x-delay' header: 'soon' is not an integer"
        );
        assert_eq!(
            text("1.5"),
            "PRECONDITION_FAILED - invalid 'x-delay' header: '1.5' is not an integer"
        );
        assert_eq!(
            text(""),
            "PRECONDITION_FAILED - invalid 'x-delay' header: '' is not an integer"
        );
        assert_eq!(
            text(" 5"),
            "PRECONDITION_FAILED - invalid 'x-delay' header: ' 5' is not an integer"
        );
        let long = "x".repeat(300);
        assert!(text(&long).len() < 200);
        assert_eq!(
            delay(FieldValue::Bytes(Bytes::from_static(b"\xff")))
                .unwrap_err()
                .reply_code(),
            406
        );
    }

    #[test]
    fn floats_and_decimals_truncate_toward_zero() {
        assert_eq!(delay(FieldValue::F64(1500.9)), Ok(1500));
        assert_eq!(delay(FieldValue::F64(-1500.9)), Ok(-1500));
        assert_eq!(delay(FieldValue::F32(2.5)), Ok(2));
        assert_eq!(delay(FieldValue::F64(f64::NAN)), Ok(0));
        assert_eq!(delay(FieldValue::F64(f64::NEG_INFINITY)), Ok(i64::MIN));
        assert_eq!(
            delay(FieldValue::Decimal {
                scale: 2,
                value: 150_099
            }),
            Ok(1500)
        );
        assert_eq!(delay(FieldValue::Decimal { scale: 0, value: 7 }), Ok(7));
        assert_eq!(
            delay(FieldValue::Decimal {
                scale: 255,
                value: u32::MAX
            }),
            Ok(0)
        );
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_or_float_parse_or_fail_cleanly(
            b in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            f in proptest::num::f64::ANY,
            d in (proptest::num::u8::ANY, proptest::num::u32::ANY),
        ) {
            for v in [
                FieldValue::Bytes(Bytes::from(b.clone())),
                FieldValue::F64(f),
                FieldValue::Decimal { scale: d.0, value: d.1 },
            ] {
                match delay(v) {
                    Ok(ms) => proptest::prop_assert!(ms <= MAX_DELAY_MS),
                    Err(e) => proptest::prop_assert_eq!(e.reply_code(), 406),
                }
            }
        }
    }

    #[test]
    fn released_delay_is_32_bit_while_it_fits() {
        assert_eq!(released_x_delay(1), FieldValue::I32(-1));
        let widest = -i64::from(i32::MIN);
        assert_eq!(released_x_delay(widest), FieldValue::I32(i32::MIN));
        assert_eq!(released_x_delay(widest + 1), FieldValue::I64(-widest - 1));
        assert_eq!(
            released_x_delay(MAX_DELAY_MS),
            FieldValue::I64(-MAX_DELAY_MS)
        );
    }

    #[test]
    fn above_the_ceiling_is_refused() {
        let over = MAX_DELAY_MS + 1;
        assert_eq!(
            delay(FieldValue::I64(over)).unwrap_err().to_string(),
            "PRECONDITION_FAILED - invalid 'x-delay' header: 315360000001 ms is above the maximum delay of 315360000000 ms"
        );
        assert!(delay(over.to_string().as_str().into()).is_err());
        assert!(delay("99999999999999999999999999".into()).is_err());
        assert!(delay(FieldValue::F64(1e300)).is_err());
        assert!(delay(FieldValue::F64(f64::INFINITY)).is_err());
        // Above 2^32-1 but below the ceiling is honoured (the plugin would not).
        assert_eq!(delay(FieldValue::I64(5_000_000_000)), Ok(5_000_000_000));
    }
}
