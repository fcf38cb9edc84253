//! How RabbitMQ, being Erlang, sees a field value: its type name, how it compares values
//! (`==` and `=:=`) and how it prints them (`~p`, `~tp`, `~ts`) in error texts.
//!
//! RabbitMQ decodes a field value into `{Type, Value}` where `Value` is an Erlang term
//! (`rabbit_binary_parser`): every integer type and `timestamp` become integers, `float` and
//! `double` become floats, `longstr` and `binary` (`x`) become binaries, `bool` an atom,
//! `void` the atom `undefined`, `decimal` the tuple `{Scale, Value}`, an array a list of
//! `{Type, Value}` and a table a list of `{Key, Type, Value}`. Matching headers and checking
//! argument equivalence compare those terms, so dwellmq does the same here.

use std::fmt::Write as _;

use dwellmq_codec::{FieldTable, FieldValue};

/// RabbitMQ's name for the type of a field value, as it prints it in error texts.
pub(crate) fn type_name(v: &FieldValue) -> &'static str {
    match v {
        FieldValue::Bool(_) => "bool",
        FieldValue::I8(_) => "byte",
        FieldValue::U8(_) => "unsignedbyte",
        FieldValue::I16(_) => "short",
        FieldValue::U16(_) => "unsignedshort",
        FieldValue::I32(_) => "signedint",
        FieldValue::U32(_) => "unsignedint",
        FieldValue::I64(_) => "long",
        FieldValue::F32(_) => "float",
        FieldValue::F64(_) => "double",
        FieldValue::Decimal { .. } => "decimal",
        FieldValue::LongStr(_) => "longstr",
        FieldValue::Array(_) => "array",
        FieldValue::Timestamp(_) => "timestamp",
        FieldValue::Table(_) => "table",
        FieldValue::Void => "void",
        FieldValue::Bytes(_) => "binary",
    }
}

/// `rabbit_misc:type_class/1`: integer types (and decimal) are one class, floats another.
pub(crate) fn type_class(v: &FieldValue) -> &'static str {
    match v {
        FieldValue::I8(_)
        | FieldValue::U8(_)
        | FieldValue::I16(_)
        | FieldValue::U16(_)
        | FieldValue::I32(_)
        | FieldValue::U32(_)
        | FieldValue::I64(_)
        | FieldValue::Decimal { .. } => "int",
        FieldValue::F32(_) | FieldValue::F64(_) => "float",
        other => type_name(other),
    }
}

/// The Erlang term a value decodes to, at the level comparisons need.
enum Term<'a> {
    Int(i128),
    Float(f64),
    Atom(&'static str),
    Bin(&'a [u8]),
    Decimal(u8, u32),
    Array(&'a [FieldValue]),
    Table(&'a FieldTable),
}

fn term(v: &FieldValue) -> Term<'_> {
    match v {
        FieldValue::Bool(true) => Term::Atom("true"),
        FieldValue::Bool(false) => Term::Atom("false"),
        FieldValue::Void => Term::Atom("undefined"),
        FieldValue::I8(x) => Term::Int((*x).into()),
        FieldValue::U8(x) => Term::Int((*x).into()),
        FieldValue::I16(x) => Term::Int((*x).into()),
        FieldValue::U16(x) => Term::Int((*x).into()),
        FieldValue::I32(x) => Term::Int((*x).into()),
        FieldValue::U32(x) => Term::Int((*x).into()),
        FieldValue::I64(x) => Term::Int((*x).into()),
        FieldValue::Timestamp(x) => Term::Int((*x).into()),
        FieldValue::F32(x) => Term::Float((*x).into()),
        FieldValue::F64(x) => Term::Float(*x),
        FieldValue::Decimal { scale, value } => Term::Decimal(*scale, *value),
        FieldValue::LongStr(b) | FieldValue::Bytes(b) => Term::Bin(b),
        FieldValue::Array(a) => Term::Array(a),
        FieldValue::Table(t) => Term::Table(t),
    }
}

/// Whether an integer and a float are the same number (Erlang compares them exactly).
fn int_float_eq(i: i128, f: f64) -> bool {
    // 2^127 is exactly representable; anything at or beyond it is outside i128.
    f.is_finite() && f.fract() == 0.0 && f.abs() < 1.7014118346046923e38 && f as i128 == i
}

fn term_eq(a: &FieldValue, b: &FieldValue, exact: bool) -> bool {
    match (term(a), term(b)) {
        (Term::Int(x), Term::Int(y)) => x == y,
        (Term::Float(x), Term::Float(y)) => x == y,
        (Term::Int(i), Term::Float(f)) | (Term::Float(f), Term::Int(i)) => {
            !exact && int_float_eq(i, f)
        }
        (Term::Atom(x), Term::Atom(y)) => x == y,
        (Term::Bin(x), Term::Bin(y)) => x == y,
        (Term::Decimal(s1, v1), Term::Decimal(s2, v2)) => s1 == s2 && v1 == v2,
        (Term::Array(x), Term::Array(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(p, q)| type_name(p) == type_name(q) && term_eq(p, q, exact))
        }
        (Term::Table(x), Term::Table(y)) => {
            x.len() == y.len()
                && x.iter().zip(y.iter()).all(|((k1, v1), (k2, v2))| {
                    k1 == k2 && type_name(v1) == type_name(v2) && term_eq(v1, v2, exact)
                })
        }
        _ => false,
    }
}

/// Erlang's `==` on the decoded values (types are not compared, numbers compare by value).
pub(crate) fn erl_eq(a: &FieldValue, b: &FieldValue) -> bool {
    term_eq(a, b, false)
}

/// Erlang's `=:=` on the decoded values (an integer never equals a float).
pub(crate) fn erl_exact_eq(a: &FieldValue, b: &FieldValue) -> bool {
    term_eq(a, b, true)
}

/// Erlang's `=:=` between a decoded value and an integer.
pub(crate) fn erl_exact_eq_int(v: &FieldValue, i: i128) -> bool {
    matches!(term(v), Term::Int(x) if x == i)
}

/// Writes a value the way `io_lib:format("~tp", [Value])` prints its decoded term
/// (without the line wrapping Erlang applies to long terms).
pub(crate) fn write_tp(out: &mut String, v: &FieldValue) {
    match term(v) {
        Term::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Term::Float(f) => write_float(out, f),
        Term::Atom(a) => out.push_str(a),
        Term::Bin(b) => write_binary(out, b),
        Term::Decimal(s, v) => {
            let _ = write!(out, "{{{s},{v}}}");
        }
        Term::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('{');
                out.push_str(type_name(item));
                out.push(',');
                write_tp(out, item);
                out.push('}');
            }
            out.push(']');
        }
        Term::Table(t) => {
            out.push('[');
            for (i, (k, item)) in t.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('{');
                write_binary(out, k.as_bytes());
                out.push(',');
                out.push_str(type_name(item));
                out.push(',');
                write_tp(out, item);
                out.push('}');
            }
            out.push(']');
        }
    }
}

/// `~tp` of a value, as a new string.
pub(crate) fn tp(v: &FieldValue) -> String {
    let mut s = String::new();
    write_tp(&mut s, v);
    s
}

/// Writes a value as `~ts` prints it when it is a binary (its text), else as `~tp`.
pub(crate) fn write_ts_or_tp(out: &mut String, v: &FieldValue) {
    match v {
        FieldValue::LongStr(b) | FieldValue::Bytes(b) => out.push_str(&String::from_utf8_lossy(b)),
        other => write_tp(out, other),
    }
}

/// Whether `c` is in Erlang's printable range for `~tp` (Unicode) strings.
fn printable_unicode(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\t' | '\x0b' | '\x08' | '\x0c' | '\x1b')
        || (c >= ' ' && c != '\x7f' && !('\u{80}'..='\u{9f}').contains(&c))
}

/// Whether a byte is in Erlang's printable Latin-1 range.
fn printable_latin1(b: u8) -> bool {
    matches!(b, b'\n' | b'\r' | b'\t' | 0x0b | 0x08 | 0x0c | 0x1b | 32..=126 | 160..=255)
}

/// Writes one character of a printable string with Erlang's escapes.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\x0b' => out.push_str("\\v"),
        '\x08' => out.push_str("\\b"),
        '\x0c' => out.push_str("\\f"),
        '\x1b' => out.push_str("\\e"),
        c => out.push(c),
    }
}

/// Writes a binary as `~tp` does: `<<"abc">>`, `<<"fö"/utf8>>`, or `<<1,2,3>>`.
fn write_binary(out: &mut String, b: &[u8]) {
    if b.is_empty() {
        out.push_str("<<>>");
        return;
    }
    if let Ok(s) = std::str::from_utf8(b) {
        if s.chars().all(printable_unicode) {
            out.push_str("<<\"");
            s.chars().for_each(|c| push_escaped(out, c));
            out.push('"');
            if !s.is_ascii() {
                out.push_str("/utf8");
            }
            out.push_str(">>");
            return;
        }
    }
    if b.iter().all(|&x| printable_latin1(x)) {
        out.push_str("<<\"");
        b.iter().for_each(|&x| push_escaped(out, char::from(x)));
        out.push_str("\">>");
        return;
    }
    out.push_str("<<");
    for (i, x) in b.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{x}");
    }
    out.push_str(">>");
}

/// Writes the list of bytes `binary_to_list(B)` as `~p`/`~tp` prints it: a quoted string when
/// every byte is printable, else a list of integers (`[226,130,172]`).
pub(crate) fn write_byte_list(out: &mut String, b: &[u8]) {
    if b.iter().all(|&x| printable_latin1(x)) {
        out.push('"');
        b.iter().for_each(|&x| push_escaped(out, char::from(x)));
        out.push('"');
    } else {
        out.push('[');
        for (i, x) in b.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{x}");
        }
        out.push(']');
    }
}

/// Writes a string (an Erlang charlist) as `~p` prints it: a quoted, escaped literal when every
/// character is printable Latin-1, else the list of code points.
pub(crate) fn write_p_string(out: &mut String, s: &str) {
    let latin1 = s
        .chars()
        .all(|c| u8::try_from(u32::from(c)).is_ok_and(printable_latin1));
    if latin1 {
        out.push('"');
        s.chars().for_each(|c| push_escaped(out, c));
        out.push('"');
    } else {
        out.push('[');
        for (i, c) in s.chars().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{}", u32::from(c));
        }
        out.push(']');
    }
}

/// `~p` of a string, as a new string.
pub(crate) fn p_string(s: &str) -> String {
    let mut out = String::new();
    write_p_string(&mut out, s);
    out
}

/// Writes a float the way Erlang prints it (`io_lib_format:fwrite_g/1`): the shortest digits
/// that read back exactly, positional unless the exponent form is shorter (`1.0e20`).
fn write_float(out: &mut String, f: f64) {
    if !f.is_finite() {
        // Erlang has no such floats; RabbitMQ could not have decoded one.
        let _ = write!(out, "{f}");
        return;
    }
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    if f.is_sign_negative() {
        out.push('-');
    }
    // Value = 0.DIGITS × 10^place.
    let place = exp + 1;
    out.push_str(&insert_decimal(place, &digits));
}

fn insert_decimal(place: i64, s: &str) -> String {
    let len = s.len() as i64;
    if place == 0 {
        return format!("0.{s}");
    }
    if place < 0 || place >= len {
        let exp_l = (place - 1).to_string();
        let exp_dot = if len == 1 { 2 } else { 1 };
        let exp_cost = exp_l.len() as i64 + 1 + exp_dot;
        if place < 0 {
            if 2 - place <= exp_cost {
                format!("0.{}{s}", "0".repeat((-place) as usize))
            } else {
                insert_exp(&exp_l, s)
            }
        } else if place - len + 2 <= exp_cost {
            format!("{s}{}.0", "0".repeat((place - len) as usize))
        } else {
            insert_exp(&exp_l, s)
        }
    } else {
        let (a, b) = s.split_at(place as usize);
        format!("{a}.{b}")
    }
}

fn insert_exp(exp_l: &str, s: &str) -> String {
    let mut chars = s.chars();
    let first = chars.next().unwrap_or('0');
    let rest = chars.as_str();
    if rest.is_empty() {
        format!("{first}.0e{exp_l}")
    } else {
        format!("{first}.{rest}e{exp_l}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn p(v: FieldValue) -> String {
        tp(&v)
    }

    #[test]
    fn floats_print_like_erlang() {
        assert_eq!(p(FieldValue::F64(1.5)), "1.5");
        assert_eq!(p(FieldValue::F64(100.0)), "100.0");
        assert_eq!(p(FieldValue::F64(0.0)), "0.0");
        assert_eq!(p(FieldValue::F64(1e20)), "1.0e20");
        assert_eq!(p(FieldValue::F64(0.001)), "0.001");
        assert_eq!(p(FieldValue::F64(0.5)), "0.5");
        assert_eq!(p(FieldValue::F64(-2.25)), "-2.25");
        assert_eq!(p(FieldValue::F64(1.0e-10)), "1.0e-10");
        assert_eq!(p(FieldValue::F64(123456789.0)), "123456789.0");
    }

    #[test]
    fn binaries_print_like_erlang() {
        assert_eq!(p(FieldValue::from("foo")), "<<\"foo\">>");
        assert_eq!(p(FieldValue::from("fö")), "<<\"fö\"/utf8>>");
        assert_eq!(p(FieldValue::from("a\"b")), "<<\"a\\\"b\">>");
        assert_eq!(p(FieldValue::Bytes(Bytes::from_static(&[1, 2]))), "<<1,2>>");
        assert_eq!(p(FieldValue::from("")), "<<>>");
    }

    #[test]
    fn compound_terms_print_like_erlang() {
        let arr = FieldValue::Array(vec![FieldValue::I64(1), FieldValue::from("a")]);
        assert_eq!(p(arr), "[{long,1},{longstr,<<\"a\">>}]");
        let mut t = FieldTable::new();
        t.insert("k", FieldValue::Bool(true));
        assert_eq!(p(FieldValue::Table(t)), "[{<<\"k\">>,bool,true}]");
        assert_eq!(p(FieldValue::Decimal { scale: 2, value: 5 }), "{2,5}");
        assert_eq!(p(FieldValue::Void), "undefined");
    }

    #[test]
    fn equality_follows_erlang() {
        assert!(erl_eq(&FieldValue::I64(1), &FieldValue::F64(1.0)));
        assert!(!erl_exact_eq(&FieldValue::I64(1), &FieldValue::F64(1.0)));
        assert!(erl_eq(&FieldValue::I8(5), &FieldValue::Timestamp(5)));
        assert!(erl_eq(
            &FieldValue::from("x"),
            &FieldValue::Bytes(Bytes::from_static(b"x"))
        ));
        assert!(!erl_eq(&FieldValue::from("1"), &FieldValue::I64(1)));
        let a = FieldValue::Array(vec![FieldValue::I64(1)]);
        let b = FieldValue::Array(vec![FieldValue::I32(1)]);
        assert!(!erl_eq(&a, &b), "array elements keep their types");
        assert!(erl_eq(&FieldValue::F32(0.5), &FieldValue::F64(0.5)));
        assert!(!erl_eq(
            &FieldValue::F64(f64::NAN),
            &FieldValue::F64(f64::NAN)
        ));
    }

    #[test]
    fn byte_lists_print_like_erlang() {
        let mut s = String::new();
        write_byte_list(&mut s, b"abc");
        assert_eq!(s, "\"abc\"");
        s.clear();
        write_byte_list(&mut s, "€".as_bytes());
        assert_eq!(s, "[226,130,172]");
        assert_eq!(
            p_string("expected integer, got longstr"),
            "\"expected integer, got longstr\""
        );
        assert_eq!(p_string("q 'ö'"), "\"q 'ö'\"");
        assert_eq!(p_string("€"), "[8364]");
    }
}
