//! The `x-stream-offset` header a stream delivery carries (`long`, the record's offset), put
//! into the message's encoded properties without decoding and encoding them again.

use bytes::{BufMut, Bytes, BytesMut};
use dwellmq_codec::{BasicProperties, FieldValue};

/// The header's name.
pub const OFFSET_HEADER: &str = "x-stream-offset";

const CONTENT_TYPE: u16 = 0x8000;
const CONTENT_ENCODING: u16 = 0x4000;
const HEADERS: u16 = 0x2000;
const CONTINUATION: u16 = 1;

/// The table entry: short-string name, `l`, the offset as a signed 64-bit integer.
fn entry(offset: u64) -> [u8; 25] {
    let mut e = [0u8; 25];
    e[0] = OFFSET_HEADER.len() as u8;
    e[1..16].copy_from_slice(OFFSET_HEADER.as_bytes());
    e[16] = b'l';
    // RabbitMQ sends it as a `long`; offsets stay far below 2^63.
    e[17..].copy_from_slice(&(offset as i64).to_be_bytes());
    e
}

/// Encoded properties (flags word first) with `x-stream-offset` = `offset` in the headers.
/// The entry is spliced in (first in the table, or a new table); properties whose headers
/// already name it, or that do not parse, go the long way (decoded, set, encoded again).
pub fn with_offset_header(encoded: &[u8], offset: u64) -> Bytes {
    splice(encoded, offset).unwrap_or_else(|| reencode(encoded, offset))
}

fn splice(encoded: &[u8], offset: u64) -> Option<Bytes> {
    let flags = u16::from_be_bytes(encoded.get(..2)?.try_into().ok()?);
    let mut at = 2;
    if flags & CONTINUATION != 0 {
        // More flag words: dwellmq's basic properties never have them; take the long way.
        return None;
    }
    for field in [CONTENT_TYPE, CONTENT_ENCODING] {
        if flags & field != 0 {
            at += 1 + usize::from(*encoded.get(at)?);
        }
    }
    encoded.get(..at)?;
    let entry = entry(offset);
    let mut out = BytesMut::with_capacity(encoded.len() + entry.len() + 4);
    if flags & HEADERS != 0 {
        let len = u32::from_be_bytes(encoded.get(at..at + 4)?.try_into().ok()?) as usize;
        let table = encoded.get(at + 4..at + 4 + len)?;
        if contains_name(table) {
            return None;
        }
        out.put_slice(&encoded[..at]);
        out.put_u32(u32::try_from(len + entry.len()).ok()?);
        out.put_slice(&entry);
        out.put_slice(&encoded[at + 4..]);
    } else {
        out.put_u16(flags | HEADERS);
        out.put_slice(&encoded[2..at]);
        out.put_u32(entry.len() as u32);
        out.put_slice(&entry);
        out.put_slice(&encoded[at..]);
    }
    Some(out.freeze())
}

/// Whether the table's octets may hold an entry named `x-stream-offset` (a false positive,
/// the name inside a value, only costs the long way).
fn contains_name(table: &[u8]) -> bool {
    let name = &entry(0)[..16];
    table.windows(name.len()).any(|w| w == name)
}

fn reencode(encoded: &[u8], offset: u64) -> Bytes {
    let Ok(mut properties) = BasicProperties::decode(&Bytes::copy_from_slice(encoded)) else {
        // Not properties at all (never for a message this broker stored): as they were.
        return Bytes::copy_from_slice(encoded);
    };
    properties
        .headers
        .get_or_insert_with(Default::default)
        .insert(OFFSET_HEADER, FieldValue::I64(offset as i64));
    let mut out = BytesMut::with_capacity(encoded.len() + 32);
    properties.encode(&mut out);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dwellmq_codec::FieldTable;

    fn encode(p: &BasicProperties) -> Bytes {
        let mut out = BytesMut::new();
        p.encode(&mut out);
        out.freeze()
    }

    fn decoded(b: Bytes) -> BasicProperties {
        BasicProperties::decode(&b).expect("valid properties")
    }

    #[test]
    fn the_header_joins_any_properties() {
        let mut headers = FieldTable::new();
        headers.insert("app", "x");
        let cases = [
            BasicProperties::default(),
            BasicProperties {
                content_type: Some("text/plain".into()),
                content_encoding: Some("gzip".into()),
                delivery_mode: Some(2),
                message_id: Some("m1".into()),
                ..Default::default()
            },
            BasicProperties {
                content_type: Some("a".into()),
                headers: Some(headers),
                priority: Some(3),
                timestamp: Some(99),
                ..Default::default()
            },
        ];
        for p in cases {
            let out = decoded(with_offset_header(&encode(&p), 1234));
            let mut expected = p.clone();
            expected
                .headers
                .get_or_insert_with(Default::default)
                .insert(OFFSET_HEADER, FieldValue::I64(1234));
            assert_eq!(
                out.headers.as_ref().unwrap().get(OFFSET_HEADER),
                Some(&FieldValue::I64(1234))
            );
            assert_eq!(out.delivery_mode, expected.delivery_mode);
            assert_eq!(out.content_type, expected.content_type);
            assert_eq!(out.timestamp, expected.timestamp);
            assert_eq!(out.message_id, expected.message_id);
            assert_eq!(
                out.headers.as_ref().unwrap().len(),
                expected.headers.as_ref().unwrap().len()
            );
        }
    }

    #[test]
    fn a_client_set_offset_header_is_replaced_not_doubled() {
        let mut headers = FieldTable::new();
        headers.insert(OFFSET_HEADER, "forged");
        let p = BasicProperties {
            headers: Some(headers),
            ..Default::default()
        };
        let out = decoded(with_offset_header(&encode(&p), 7));
        let headers = out.headers.unwrap();
        assert_eq!(headers.len(), 1);
        assert_eq!(headers.get(OFFSET_HEADER), Some(&FieldValue::I64(7)));
    }
}
