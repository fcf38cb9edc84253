//! The `expiration` message property: a per-message TTL written as a decimal string.

use crate::arguments::erlang_term::write_byte_list;
use crate::error::BrokerError;

/// The longest TTL RabbitMQ accepts anywhere (message TTL, queue TTL, `x-expires`):
/// ten years in milliseconds (`rabbit_misc:check_expiry/1`).
pub const MAX_TTL_MS: u64 = 315_360_000_000;

/// An integer as Erlang's `string:to_integer/1` reads it: an optional sign, then digits.
pub(crate) struct ErlInteger<'a> {
    /// Whether a `-` sign came first (and the value is not zero).
    pub(crate) negative: bool,
    /// The digits without leading zeros (`"0"` for zero).
    pub(crate) digits: &'a str,
    /// What followed the digits.
    pub(crate) rest: &'a str,
}

impl ErlInteger<'_> {
    /// The value if it fits an `i64`, else `None` (Erlang integers are unbounded).
    pub(crate) fn to_i64(&self) -> Option<i64> {
        let magnitude: u64 = if self.digits.len() > 19 {
            return None;
        } else {
            self.digits.parse().ok()?
        };
        if self.negative {
            0i64.checked_sub_unsigned(magnitude)
        } else {
            i64::try_from(magnitude).ok()
        }
    }

    /// The value as Erlang prints it (`-5`, `12`), however large.
    pub(crate) fn display(&self) -> String {
        if self.negative {
            format!("-{}", self.digits)
        } else {
            self.digits.to_owned()
        }
    }

    /// Whether the value is above `max` (a non-negative bound).
    pub(crate) fn exceeds(&self, max: u64) -> bool {
        !self.negative
            && (self.digits.len() > 20 || self.digits.parse::<u64>().map_or(true, |v| v > max))
    }
}

/// `string:to_integer/1`: `None` is `{error, no_integer}` (no digits after an optional sign).
pub(crate) fn erl_to_integer(s: &str) -> Option<ErlInteger<'_>> {
    let (negative, unsigned) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = unsigned
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(unsigned.len());
    if end == 0 {
        return None;
    }
    let all = &unsigned[..end];
    let trimmed = all.trim_start_matches('0');
    let digits = if trimmed.is_empty() { "0" } else { trimmed };
    Some(ErlInteger {
        negative: negative && digits != "0",
        digits,
        rest: &unsigned[end..],
    })
}

/// Parses the `expiration` property as RabbitMQ does (`rabbit_basic:parse_expiration/1`).
///
/// The value is a decimal integer of milliseconds, optionally signed, from 0 to
/// [`MAX_TTL_MS`]. Errors are `406 PRECONDITION_FAILED` with RabbitMQ's text:
///
/// ```
/// use dwellmq_core::arguments::parse_expiration;
///
/// assert_eq!(parse_expiration("60000"), Ok(60_000));
/// assert_eq!(
///     parse_expiration("10abc").unwrap_err().to_string(),
///     r#"PRECONDITION_FAILED - invalid expiration '10abc': {leftover_string,"abc"}"#
/// );
/// ```
pub fn parse_expiration(value: &str) -> Result<u64, BrokerError> {
    let fail = |reason: String| {
        BrokerError::PreconditionFailed(format!("invalid expiration '{value}': {reason}"))
    };
    let Some(int) = erl_to_integer(value) else {
        return Err(fail("no_integer".to_owned()));
    };
    if !int.rest.is_empty() {
        let mut reason = String::from("{leftover_string,");
        write_byte_list(&mut reason, int.rest.as_bytes());
        reason.push('}');
        return Err(fail(reason));
    }
    if int.negative {
        return Err(fail(format!("{{value_negative,{}}}", int.display())));
    }
    if int.exceeds(MAX_TTL_MS) {
        return Err(fail(format!("{{value_too_large,{}}}", int.display())));
    }
    // `exceeds` said the digits fit below the ceiling.
    int.digits
        .parse()
        .map_err(|_| fail(format!("{{value_too_large,{}}}", int.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(v: &str) -> String {
        match parse_expiration(v) {
            Err(BrokerError::PreconditionFailed(t)) => t,
            other => panic!("expected 406 for {v:?}, got {other:?}"),
        }
    }

    #[test]
    fn accepts_plain_and_signed_integers() {
        assert_eq!(parse_expiration("0"), Ok(0));
        assert_eq!(parse_expiration("5000"), Ok(5000));
        assert_eq!(parse_expiration("+5000"), Ok(5000));
        assert_eq!(parse_expiration("007"), Ok(7));
        assert_eq!(parse_expiration("-0"), Ok(0));
        assert_eq!(parse_expiration("315360000000"), Ok(MAX_TTL_MS));
    }

    #[test]
    fn no_integer() {
        assert_eq!(err("abc"), "invalid expiration 'abc': no_integer");
        assert_eq!(err(""), "invalid expiration '': no_integer");
        assert_eq!(err("-"), "invalid expiration '-': no_integer");
        assert_eq!(err(" 5"), "invalid expiration ' 5': no_integer");
        assert_eq!(err("+-5"), "invalid expiration '+-5': no_integer");
    }

    #[test]
    fn leftover_string() {
        assert_eq!(
            err("10abc"),
            r#"invalid expiration '10abc': {leftover_string,"abc"}"#
        );
        assert_eq!(
            err("1.5"),
            r#"invalid expiration '1.5': {leftover_string,".5"}"#
        );
        assert_eq!(
            err("5 "),
            r#"invalid expiration '5 ': {leftover_string," "}"#
        );
        assert_eq!(
            err("5€"),
            "invalid expiration '5€': {leftover_string,[226,130,172]}"
        );
        // The leftover check comes before the sign check.
        assert_eq!(
            err("-5x"),
            r#"invalid expiration '-5x': {leftover_string,"x"}"#
        );
    }

    #[test]
    fn negative_and_too_large() {
        assert_eq!(err("-1"), "invalid expiration '-1': {value_negative,-1}");
        assert_eq!(
            err("315360000001"),
            "invalid expiration '315360000001': {value_too_large,315360000001}"
        );
        assert_eq!(
            err("123456789012345678901234567890"),
            "invalid expiration '123456789012345678901234567890': \
             {value_too_large,123456789012345678901234567890}"
        );
        assert_eq!(
            err("-99999999999999999999999"),
            "invalid expiration '-99999999999999999999999': \
             {value_negative,-99999999999999999999999}"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_string_parses_or_fails_cleanly(s in "\\PC{0,24}|[+-]?[0-9]{0,30}[a-z.]{0,3}") {
            match parse_expiration(&s) {
                Ok(v) => {
                    proptest::prop_assert!(v <= MAX_TTL_MS);
                    proptest::prop_assert_eq!(Some(v as i64), erl_to_integer(&s).and_then(|i| i.to_i64()));
                }
                Err(e) => proptest::prop_assert_eq!(e.reply_code(), 406),
            }
        }
    }

    #[test]
    fn erl_integer_bounds() {
        let i = erl_to_integer("-9223372036854775808").unwrap();
        assert_eq!(i.to_i64(), Some(i64::MIN));
        let i = erl_to_integer("9223372036854775808").unwrap();
        assert_eq!(i.to_i64(), None);
        let i = erl_to_integer("000").unwrap();
        assert_eq!((i.digits, i.negative), ("0", false));
    }
}
