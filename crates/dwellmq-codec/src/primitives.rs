//! Reading and writing the protocol's primitive types.
//!
//! Readers take the shared buffer `base` and a cursor `i` into it: fixed-size values are parsed
//! with nom's big-endian number parsers, and strings come back as `Bytes` slices of `base` (no
//! copy) cut with `split_at_checked` (nom's `take` is not inlined for `&[u8]`, and it is on the
//! hot path once per string). Writers append to a `BytesMut`.

use bytes::{BufMut, Bytes, BytesMut};
use nom::number::complete::{be_u16, be_u32, be_u64, be_u8};

use crate::error::Malformed;
use crate::field::{decode_table, encode_table, FieldTable};
use crate::short_str::ShortStr;

/// Runs a nom parser on the cursor, advancing it on success.
#[inline(always)]
fn run<'a, O>(
    i: &mut &'a [u8],
    parser: impl FnOnce(&'a [u8]) -> nom::IResult<&'a [u8], O>,
) -> Result<O, Malformed> {
    let (rest, value) = parser(i).map_err(|_| Malformed)?;
    *i = rest;
    Ok(value)
}

#[inline]
pub(crate) fn get_u8(_base: &Bytes, i: &mut &[u8]) -> Result<u8, Malformed> {
    run(i, be_u8)
}

#[inline]
pub(crate) fn get_u16(_base: &Bytes, i: &mut &[u8]) -> Result<u16, Malformed> {
    run(i, be_u16)
}

#[inline]
pub(crate) fn get_u32(_base: &Bytes, i: &mut &[u8]) -> Result<u32, Malformed> {
    run(i, be_u32)
}

#[inline]
pub(crate) fn get_u64(_base: &Bytes, i: &mut &[u8]) -> Result<u64, Malformed> {
    run(i, be_u64)
}

/// Eight packed bit fields, least significant bit first.
#[inline]
pub(crate) fn get_bits(_base: &Bytes, i: &mut &[u8]) -> Result<[bool; 8], Malformed> {
    let octet = run(i, be_u8)?;
    Ok(std::array::from_fn(|n| octet & (1 << n) != 0))
}

/// `count` octets as a slice of `base`.
#[inline]
pub(crate) fn get_slice(base: &Bytes, i: &mut &[u8], count: usize) -> Result<Bytes, Malformed> {
    let (raw, rest) = i.split_at_checked(count).ok_or(Malformed)?;
    *i = rest;
    Ok(base.slice_ref(raw))
}

#[inline]
pub(crate) fn get_shortstr(base: &Bytes, i: &mut &[u8]) -> Result<ShortStr, Malformed> {
    let len = run(i, be_u8)?;
    let raw = get_slice(base, i, usize::from(len))?;
    ShortStr::from_utf8(raw).ok_or(Malformed)
}

#[inline]
pub(crate) fn get_longstr(base: &Bytes, i: &mut &[u8]) -> Result<Bytes, Malformed> {
    let len = get_u32(base, i)?;
    get_slice(base, i, len as usize)
}

pub(crate) fn get_table(base: &Bytes, i: &mut &[u8]) -> Result<FieldTable, Malformed> {
    decode_table(base, i, 0)
}

/// Writes a short string, truncated to 255 octets at a character boundary.
pub(crate) fn put_shortstr(out: &mut BytesMut, s: &ShortStr) {
    let s = s.as_str();
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.put_u8(end as u8);
    out.put_slice(&s.as_bytes()[..end]);
}

pub(crate) fn put_longstr(out: &mut BytesMut, s: &[u8]) {
    out.put_u32(s.len() as u32);
    out.put_slice(s);
}

pub(crate) fn put_table(out: &mut BytesMut, table: &FieldTable) {
    encode_table(out, table);
}
