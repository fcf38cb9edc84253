//! Reading one argument value as RabbitMQ's validators read it; a refusal is the reason part
//! of RabbitMQ's text (`{value_negative,-1}`, `"expected integer, got longstr"`...).

use dwellmq_codec::{FieldValue, ShortStr};

use crate::arguments::erlang_term::{p_string, type_name};
use crate::arguments::expiration::MAX_TTL_MS;

/// `{unacceptable_type,T}`.
pub(super) fn unacceptable(v: &FieldValue) -> String {
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

pub(super) fn non_neg_int_arg(v: &FieldValue) -> Result<u64, String> {
    let n = int_arg(v)?;
    u64::try_from(n).map_err(|_| format!("{{value_negative,{n}}}"))
}

/// `{value_zero,0}` for a zero that the argument does not allow.
pub(super) fn non_zero<N: PartialEq + From<u8>>(n: N) -> Result<N, String> {
    if n == N::from(0) {
        Err("{value_zero,0}".to_owned())
    } else {
        Ok(n)
    }
}

/// `rabbit_misc:check_expiry/1`.
pub(super) fn expiry(n: i64) -> Result<u64, String> {
    if n < 0 {
        return Err(format!("{{value_negative,{n}}}"));
    }
    let v = n.unsigned_abs();
    if v > MAX_TTL_MS {
        return Err(format!("{{value_too_large,{n}}}"));
    }
    Ok(v)
}

pub(super) fn string_arg(v: &FieldValue) -> Result<&[u8], String> {
    match v {
        FieldValue::LongStr(b) => Ok(b),
        other => Err(unacceptable(other)),
    }
}

/// A long-string argument as one of the names `from_name` knows, or `reason`.
pub(super) fn named<T>(
    v: &FieldValue,
    from_name: impl FnOnce(&[u8]) -> Option<T>,
    reason: &str,
) -> Result<T, String> {
    string_arg(v).and_then(|s| from_name(s).ok_or_else(|| reason.to_owned()))
}

pub(super) fn short_str(b: &[u8]) -> ShortStr {
    ShortStr::from(String::from_utf8_lossy(b).into_owned())
}
