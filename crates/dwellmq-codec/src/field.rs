//! Field tables and arrays with RabbitMQ's type tags.
//!
//! RabbitMQ's tags differ from the 0-9-1 spec's (see its "errata"): `s` is a signed 16-bit
//! integer, `u` unsigned 16, `I` signed 32, `i` unsigned 32, `l` signed 64, `x` a byte array.
//! Tables keep their entries in wire order, because some clients care about header order.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::Malformed;
use crate::primitives::{get_longstr, get_shortstr, get_slice, get_u16, get_u32, get_u64, get_u8};
use crate::short_str::ShortStr;

/// Nesting deeper than this is refused, so a hostile frame cannot exhaust the decoder's stack.
pub const MAX_NESTING: usize = 64;

/// One value in a field table or array.
#[derive(Debug, Clone)]
pub enum FieldValue {
    /// `t`: boolean.
    Bool(bool),
    /// `b`: signed 8-bit.
    I8(i8),
    /// `B`: unsigned 8-bit.
    U8(u8),
    /// `s`: signed 16-bit.
    I16(i16),
    /// `u`: unsigned 16-bit.
    U16(u16),
    /// `I`: signed 32-bit.
    I32(i32),
    /// `i`: unsigned 32-bit.
    U32(u32),
    /// `l`: signed 64-bit.
    I64(i64),
    /// `f`: 32-bit float.
    F32(f32),
    /// `d`: 64-bit float.
    F64(f64),
    /// `D`: decimal, `value × 10^-scale`.
    Decimal {
        /// Number of decimal places.
        scale: u8,
        /// Unscaled value.
        value: u32,
    },
    /// `S`: long string (binary-safe).
    LongStr(Bytes),
    /// `A`: array.
    Array(Vec<FieldValue>),
    /// `T`: timestamp, seconds since the epoch.
    Timestamp(u64),
    /// `F`: nested table.
    Table(FieldTable),
    /// `V`: no value.
    Void,
    /// `x`: byte array.
    Bytes(Bytes),
}

impl PartialEq for FieldValue {
    /// Floats compare by bit pattern, so a decoded value always equals its original.
    fn eq(&self, other: &Self) -> bool {
        use FieldValue::*;
        match (self, other) {
            (Bool(a), Bool(b)) => a == b,
            (I8(a), I8(b)) => a == b,
            (U8(a), U8(b)) => a == b,
            (I16(a), I16(b)) => a == b,
            (U16(a), U16(b)) => a == b,
            (I32(a), I32(b)) => a == b,
            (U32(a), U32(b)) => a == b,
            (I64(a), I64(b)) => a == b,
            (F32(a), F32(b)) => a.to_bits() == b.to_bits(),
            (F64(a), F64(b)) => a.to_bits() == b.to_bits(),
            (
                Decimal {
                    scale: sa,
                    value: va,
                },
                Decimal {
                    scale: sb,
                    value: vb,
                },
            ) => sa == sb && va == vb,
            (LongStr(a), LongStr(b)) => a == b,
            (Array(a), Array(b)) => a == b,
            (Timestamp(a), Timestamp(b)) => a == b,
            (Table(a), Table(b)) => a == b,
            (Void, Void) => true,
            (Bytes(a), Bytes(b)) => a == b,
            _ => false,
        }
    }
}

impl FieldValue {
    /// The value as a signed integer, for any integer type (RabbitMQ's "integer" arguments).
    pub fn as_integer(&self) -> Option<i64> {
        match *self {
            FieldValue::I8(v) => Some(v.into()),
            FieldValue::U8(v) => Some(v.into()),
            FieldValue::I16(v) => Some(v.into()),
            FieldValue::U16(v) => Some(v.into()),
            FieldValue::I32(v) => Some(v.into()),
            FieldValue::U32(v) => Some(v.into()),
            FieldValue::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as text, for long strings that hold UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::LongStr(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The RabbitMQ type tag of this value.
    pub fn tag(&self) -> u8 {
        match self {
            FieldValue::Bool(_) => b't',
            FieldValue::I8(_) => b'b',
            FieldValue::U8(_) => b'B',
            FieldValue::I16(_) => b's',
            FieldValue::U16(_) => b'u',
            FieldValue::I32(_) => b'I',
            FieldValue::U32(_) => b'i',
            FieldValue::I64(_) => b'l',
            FieldValue::F32(_) => b'f',
            FieldValue::F64(_) => b'd',
            FieldValue::Decimal { .. } => b'D',
            FieldValue::LongStr(_) => b'S',
            FieldValue::Array(_) => b'A',
            FieldValue::Timestamp(_) => b'T',
            FieldValue::Table(_) => b'F',
            FieldValue::Void => b'V',
            FieldValue::Bytes(_) => b'x',
        }
    }
}

impl From<&str> for FieldValue {
    fn from(s: &str) -> Self {
        FieldValue::LongStr(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for FieldValue {
    fn from(s: String) -> Self {
        FieldValue::LongStr(Bytes::from(s))
    }
}

impl From<ShortStr> for FieldValue {
    fn from(s: ShortStr) -> Self {
        FieldValue::LongStr(s.as_shared().clone())
    }
}

impl From<i64> for FieldValue {
    fn from(v: i64) -> Self {
        FieldValue::I64(v)
    }
}

impl From<bool> for FieldValue {
    fn from(v: bool) -> Self {
        FieldValue::Bool(v)
    }
}

/// A field table: named values in wire order.
///
/// Lookups are linear, which beats hashing for the handful of entries real tables hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldTable {
    entries: Vec<(ShortStr, FieldValue)>,
}

impl FieldTable {
    /// An empty table.
    pub const fn new() -> Self {
        FieldTable {
            entries: Vec::new(),
        }
    }

    /// The value stored under `key`, if any (the first one, should a peer repeat a key).
    pub fn get(&self, key: &str) -> Option<&FieldValue> {
        self.entries
            .iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`, replacing it in place if present, else appending.
    pub fn insert(&mut self, key: impl Into<ShortStr>, value: impl Into<FieldValue>) {
        let key = key.into();
        let value = value.into();
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<FieldValue> {
        let pos = self.entries.iter().position(|(k, _)| k.as_str() == key)?;
        Some(self.entries.remove(pos).1)
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&ShortStr, &FieldValue)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends an entry without checking for an existing key (keeps a peer's table verbatim).
    pub fn push(&mut self, key: ShortStr, value: FieldValue) {
        self.entries.push((key, value));
    }
}

impl<K: Into<ShortStr>, V: Into<FieldValue>> FromIterator<(K, V)> for FieldTable {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut table = FieldTable::new();
        for (k, v) in iter {
            table.push(k.into(), v.into());
        }
        table
    }
}

impl From<FieldTable> for FieldValue {
    fn from(t: FieldTable) -> Self {
        FieldValue::Table(t)
    }
}

pub(crate) fn decode_table(
    base: &Bytes,
    i: &mut &[u8],
    depth: usize,
) -> Result<FieldTable, Malformed> {
    if depth > MAX_NESTING {
        return Err(Malformed);
    }
    let len = get_u32(base, i)? as usize;
    if len > i.len() {
        return Err(Malformed);
    }
    let (mut body, rest) = i.split_at(len);
    *i = rest;
    let mut table = FieldTable::new();
    while !body.is_empty() {
        let key = get_shortstr(base, &mut body)?;
        let value = decode_value(base, &mut body, depth)?;
        table.push(key, value);
    }
    Ok(table)
}

fn decode_array(base: &Bytes, i: &mut &[u8], depth: usize) -> Result<Vec<FieldValue>, Malformed> {
    if depth > MAX_NESTING {
        return Err(Malformed);
    }
    let len = get_u32(base, i)? as usize;
    if len > i.len() {
        return Err(Malformed);
    }
    let (mut body, rest) = i.split_at(len);
    *i = rest;
    let mut values = Vec::new();
    while !body.is_empty() {
        values.push(decode_value(base, &mut body, depth)?);
    }
    Ok(values)
}

fn decode_value(base: &Bytes, i: &mut &[u8], depth: usize) -> Result<FieldValue, Malformed> {
    let value = match get_u8(base, i)? {
        b't' => FieldValue::Bool(get_u8(base, i)? != 0),
        b'b' => FieldValue::I8(get_u8(base, i)? as i8),
        b'B' => FieldValue::U8(get_u8(base, i)?),
        b's' => FieldValue::I16(get_u16(base, i)? as i16),
        b'u' => FieldValue::U16(get_u16(base, i)?),
        b'I' => FieldValue::I32(get_u32(base, i)? as i32),
        b'i' => FieldValue::U32(get_u32(base, i)?),
        b'l' => FieldValue::I64(get_u64(base, i)? as i64),
        b'f' => FieldValue::F32(f32::from_bits(get_u32(base, i)?)),
        b'd' => FieldValue::F64(f64::from_bits(get_u64(base, i)?)),
        b'D' => FieldValue::Decimal {
            scale: get_u8(base, i)?,
            value: get_u32(base, i)?,
        },
        b'S' => FieldValue::LongStr(get_longstr(base, i)?),
        b'A' => FieldValue::Array(decode_array(base, i, depth + 1)?),
        b'T' => FieldValue::Timestamp(get_u64(base, i)?),
        b'F' => FieldValue::Table(decode_table(base, i, depth + 1)?),
        b'V' => FieldValue::Void,
        b'x' => {
            let len = get_u32(base, i)? as usize;
            FieldValue::Bytes(get_slice(base, i, len)?)
        }
        _ => return Err(Malformed),
    };
    Ok(value)
}

/// Writes a length-prefixed block: reserves the u32 length, runs `body`, patches the length.
fn put_sized(out: &mut BytesMut, body: impl FnOnce(&mut BytesMut)) {
    let at = out.len();
    out.put_u32(0);
    body(out);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

pub(crate) fn encode_table(out: &mut BytesMut, table: &FieldTable) {
    put_sized(out, |out| {
        for (key, value) in table.iter() {
            crate::primitives::put_shortstr(out, key);
            encode_value(out, value);
        }
    });
}

fn encode_value(out: &mut BytesMut, value: &FieldValue) {
    out.put_u8(value.tag());
    match value {
        FieldValue::Bool(v) => out.put_u8(u8::from(*v)),
        FieldValue::I8(v) => out.put_i8(*v),
        FieldValue::U8(v) => out.put_u8(*v),
        FieldValue::I16(v) => out.put_i16(*v),
        FieldValue::U16(v) => out.put_u16(*v),
        FieldValue::I32(v) => out.put_i32(*v),
        FieldValue::U32(v) => out.put_u32(*v),
        FieldValue::I64(v) => out.put_i64(*v),
        FieldValue::F32(v) => out.put_u32(v.to_bits()),
        FieldValue::F64(v) => out.put_u64(v.to_bits()),
        FieldValue::Decimal { scale, value } => {
            out.put_u8(*scale);
            out.put_u32(*value);
        }
        FieldValue::LongStr(s) | FieldValue::Bytes(s) => {
            out.put_u32(s.len() as u32);
            out.put_slice(s);
        }
        FieldValue::Array(values) => put_sized(out, |out| {
            for v in values {
                encode_value(out, v);
            }
        }),
        FieldValue::Timestamp(v) => out.put_u64(*v),
        FieldValue::Table(t) => encode_table(out, t),
        FieldValue::Void => {}
    }
}

/// The encoded size of a table, including its length prefix.
pub fn encoded_table_len(table: &FieldTable) -> usize {
    let mut buf = BytesMut::new();
    encode_table(&mut buf, table);
    buf.len()
}

impl FieldTable {
    /// The table in AMQP's field-table encoding (its `u32` size first): how the durable store
    /// keeps arguments, without knowing what they mean.
    pub fn to_encoded(&self) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_table(&mut out, self);
        out.to_vec()
    }

    /// Reads back what [`FieldTable::to_encoded`] wrote; `None` if it is malformed or has
    /// trailing octets.
    pub fn from_encoded(bytes: &[u8]) -> Option<FieldTable> {
        let base = Bytes::copy_from_slice(bytes);
        let mut i: &[u8] = &base;
        let table = decode_table(&base, &mut i, 0).ok()?;
        i.is_empty().then_some(table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &'static [u8]) -> Result<FieldTable, Malformed> {
        let base = Bytes::from_static(bytes);
        let mut i: &[u8] = &base;
        decode_table(&base, &mut i, 0)
    }

    #[test]
    fn decodes_rabbitmq_signed_and_unsigned_tags() {
        let t = decode(b"\x00\x00\x00\x0d\x01as\xff\xfe\x01bu\xff\xfe\x01cV").unwrap();
        assert_eq!(t.get("a"), Some(&FieldValue::I16(-2)));
        assert_eq!(t.get("b"), Some(&FieldValue::U16(0xfffe)));
        assert_eq!(t.get("c"), Some(&FieldValue::Void));
    }

    #[test]
    fn unknown_tag_is_malformed() {
        assert_eq!(decode(b"\x00\x00\x00\x03\x01aZ"), Err(Malformed));
    }

    #[test]
    fn length_past_end_is_malformed() {
        assert_eq!(decode(b"\x00\x00\x00\x09\x01at\x01"), Err(Malformed));
    }

    #[test]
    fn deep_nesting_is_refused_without_overflowing_the_stack() {
        let mut inner = FieldTable::new();
        for _ in 0..(MAX_NESTING + 5) {
            let mut t = FieldTable::new();
            t.insert("n", FieldValue::Table(inner));
            inner = t;
        }
        let mut buf = BytesMut::new();
        encode_table(&mut buf, &inner);
        let base = buf.freeze();
        let mut i: &[u8] = &base;
        assert_eq!(decode_table(&base, &mut i, 0), Err(Malformed));
    }

    #[test]
    fn insert_replaces_in_place_and_keeps_order() {
        let mut t = FieldTable::new();
        t.insert("a", 1i64);
        t.insert("b", 2i64);
        t.insert("a", 3i64);
        let keys: Vec<_> = t.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(t.get("a"), Some(&FieldValue::I64(3)));
    }
}
