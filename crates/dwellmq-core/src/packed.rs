//! A message packed into one exact-sized buffer, for messages that wait a long time.
//!
//! A freshly published [`Message`] is made of slices of the publisher's read buffer, which is
//! right while it passes straight through to a consumer. A message held for seconds or days
//! would keep that whole buffer (tens of KiB, shared with hundreds of other messages) alive for
//! as long as it waits; packed, it costs its own size. The same bytes are what a store writes.
//!
//! Layout (big-endian lengths):
//!
//! ```text
//! u16 exchange length (its top bit: HISTORY_FLAG), exchange
//! u16 routing key length, routing key
//! u32 properties length, properties (flags word first, as in a content header)
//! body: the rest
//! ```
//!
//! Exchange names are at most 255 octets, so the top bit of the exchange length is free: set,
//! it says that the `x-death` header in the properties is the broker's own dead-letter history
//! (see [`Message::deaths`]), to be read back on unpacking. A client-published `x-death` is
//! never history, so a message without the bit unpacks with none.

use std::sync::Arc;

use bytes::{BufMut, Bytes};
use dwellmq_codec::{BasicProperties, ShortStr};

use crate::body::Body;
use crate::dead_letter::history_from_headers;
use crate::message::{Message, MessageGuard};

/// A message in one contiguous buffer; see the module documentation for the layout.
///
/// A boxed slice rather than `Bytes`: 16 octets instead of 32 for each of possibly millions of
/// held messages, and it turns into `Bytes` without a copy when the message is released.
#[derive(Debug, Clone)]
pub struct PackedMessage {
    bytes: Box<[u8]>,
}

/// Offsets of the parts of a packed buffer.
struct Layout {
    exchange: std::ops::Range<usize>,
    routing_key: std::ops::Range<usize>,
    properties: std::ops::Range<usize>,
}

/// Set in the exchange length field when the properties' `x-death` is the broker's history.
const HISTORY_FLAG: u16 = 0x8000;

/// Longest name or key a packed message holds: what fits beside `HISTORY_FLAG`.
const MAX_NAME: usize = (HISTORY_FLAG - 1) as usize;

fn layout(bytes: &[u8]) -> Option<Layout> {
    let mut at = 0;
    let mut part = |width: usize| {
        let len_bytes = bytes.get(at..at + width)?;
        let mut len = len_bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        if at == 0 {
            len &= usize::from(!HISTORY_FLAG);
        }
        let range = at + width..at + width + len;
        bytes.get(range.clone())?;
        at = range.end;
        Some(range)
    };
    Some(Layout {
        exchange: part(2)?,
        routing_key: part(2)?,
        properties: part(4)?,
    })
}

impl PackedMessage {
    /// The top bit of the layout's exchange length: the properties' `x-death` is the broker's
    /// dead-letter history (see the module documentation).
    pub const HISTORY_FLAG: u16 = HISTORY_FLAG;

    /// Copies `message` into one buffer of exactly its size.
    pub fn pack(message: &Message) -> PackedMessage {
        let exchange = clamp_name(message.exchange.as_bytes());
        let routing_key = clamp_name(message.routing_key.as_bytes());
        let properties = &message.properties_encoded;
        let header = 2 + exchange.len() + 2 + routing_key.len() + 4 + properties.len();
        let mut out = Vec::with_capacity(header + message.body_len());
        out.put_u16(Self::exchange_field(message));
        out.put_slice(exchange);
        out.put_u16(routing_key.len() as u16);
        out.put_slice(routing_key);
        out.put_u32(properties.len() as u32);
        out.put_slice(properties);
        for chunk in message.body.chunks() {
            out.put_slice(chunk);
        }
        PackedMessage {
            bytes: out.into_boxed_slice(),
        }
    }

    /// The length `message` packs to, without packing it.
    pub fn packed_len_of(message: &Message) -> usize {
        2 + clamp_name(message.exchange.as_bytes()).len()
            + 2
            + clamp_name(message.routing_key.as_bytes()).len()
            + 4
            + message.properties_encoded.len()
            + message.body_len()
    }

    /// The first field of `message`'s packed form: its exchange's length, with
    /// its top bit set when it carries the broker's dead-letter history. Public so that a store
    /// writing the layout itself writes the same field.
    pub fn exchange_field(message: &Message) -> u16 {
        let len = clamp_name(message.exchange.as_bytes()).len() as u16;
        if message.deaths.is_empty() {
            len
        } else {
            len | HISTORY_FLAG
        }
    }

    /// The part of an exchange name or routing key that the layout keeps (all of any name
    /// from the wire).
    pub fn clamp_name(bytes: &[u8]) -> &[u8] {
        clamp_name(bytes)
    }

    /// Accepts a packed buffer read back from elsewhere (a store); `None` if it is malformed.
    pub fn from_boxed(bytes: Box<[u8]>) -> Option<PackedMessage> {
        layout(&bytes)?;
        Some(PackedMessage { bytes })
    }

    /// The packed octets.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    /// Octets in memory.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the buffer is empty (never, for a packed message).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Body size in octets of a packed buffer seen in place (a store record); `None` if it
    /// is malformed.
    pub fn body_len_of(bytes: &[u8]) -> Option<usize> {
        Some(bytes.len() - layout(bytes)?.properties.end)
    }

    /// Body size in octets.
    pub fn body_len(&self) -> usize {
        self.bytes.len() - self.layout().properties.end
    }

    fn layout(&self) -> Layout {
        // Validated when the value was built; an empty layout is unreachable.
        layout(&self.bytes).unwrap_or(Layout {
            exchange: 0..0,
            routing_key: 0..0,
            properties: 0..0,
        })
    }

    /// The routing key the message was published with (a copy, for inspection); `None` if the
    /// buffer is corrupt.
    pub fn routing_key(&self) -> Option<ShortStr> {
        let key = &self.bytes[self.layout().routing_key];
        std::str::from_utf8(key).ok().map(ShortStr::from)
    }

    /// The message's properties, decoded from a copy (for inspection); `None` if the buffer is
    /// corrupt.
    pub fn properties(&self) -> Option<BasicProperties> {
        let encoded = Bytes::copy_from_slice(&self.bytes[self.layout().properties]);
        BasicProperties::decode(&encoded).ok()
    }

    /// Rebuilds the message, every part a slice of this buffer (nothing is copied); `None` if
    /// the buffer is corrupt (only possible for one read back from a store).
    pub fn unpack(self, guard: Option<MessageGuard>) -> Option<Arc<Message>> {
        let layout = self.layout();
        let has_history = self.bytes.first().is_some_and(|b| b & 0x80 != 0);
        let bytes = Bytes::from(self.bytes);
        let properties_encoded = bytes.slice(layout.properties.clone());
        let properties = BasicProperties::decode(&properties_encoded).ok()?;
        let deaths = match (&properties.headers, has_history) {
            (Some(headers), true) => history_from_headers(headers),
            _ => Vec::new(),
        };
        // A held message keeps its `BCC` header until release (see the delayed holder): no
        // keys to carry beside it.
        Some(Message::from_parts(
            ShortStr::from_utf8(bytes.slice(layout.exchange))?,
            ShortStr::from_utf8(bytes.slice(layout.routing_key))?,
            properties,
            properties_encoded,
            Body::Single(bytes.slice(layout.properties.end..)),
            guard,
            deaths,
        ))
    }

    /// Rebuilds the message as [`PackedMessage::unpack`] does, with its encoded properties
    /// replaced by what `replace` makes of them (a stream delivery's `x-stream-offset`); the
    /// body stays a slice of this buffer. `None` if the buffer is corrupt.
    pub(crate) fn unpack_replacing_properties(
        self,
        replace: impl FnOnce(&[u8]) -> Bytes,
    ) -> Option<Arc<Message>> {
        let layout = self.layout();
        let has_history = self.bytes.first().is_some_and(|b| b & 0x80 != 0);
        let bytes = Bytes::from(self.bytes);
        let properties_encoded = replace(&bytes[layout.properties.clone()]);
        let properties = BasicProperties::decode(&properties_encoded).ok()?;
        let deaths = match (&properties.headers, has_history) {
            (Some(headers), true) => history_from_headers(headers),
            _ => Vec::new(),
        };
        Some(Message::from_parts(
            ShortStr::from_utf8(bytes.slice(layout.exchange))?,
            ShortStr::from_utf8(bytes.slice(layout.routing_key))?,
            properties,
            properties_encoded,
            Body::Single(bytes.slice(layout.properties.end..)),
            None,
            deaths,
        ))
    }

    /// Rebuilds a message this process packed from a valid one, as [`PackedMessage::unpack`]
    /// does, without a way to fail: should its properties not decode again after all, it keeps
    /// them encoded as they were (consumers get them unchanged) and decoded as none, rather than
    /// lose a message that may have been confirmed.
    pub fn unpack_own(self) -> Arc<Message> {
        let layout = self.layout();
        let has_history = self.bytes.first().is_some_and(|b| b & 0x80 != 0);
        let bytes = Bytes::from(self.bytes);
        let name = |range: std::ops::Range<usize>| {
            let part = bytes.slice(range);
            ShortStr::from_utf8(part.clone())
                .unwrap_or_else(|| String::from_utf8_lossy(&part).into_owned().into())
        };
        let properties_encoded = bytes.slice(layout.properties.clone());
        let properties = BasicProperties::decode(&properties_encoded).unwrap_or_default();
        let deaths = match (&properties.headers, has_history) {
            (Some(headers), true) => history_from_headers(headers),
            _ => Vec::new(),
        };
        Message::from_parts(
            name(layout.exchange),
            name(layout.routing_key),
            properties,
            properties_encoded,
            Body::Single(bytes.slice(layout.properties.end..)),
            None,
            deaths,
        )
    }
}

/// Names and keys from the wire are at most 255 octets; a longer locally built one is cut.
fn clamp_name(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.len().min(MAX_NAME)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use dwellmq_codec::{FieldTable, FieldValue};

    fn sample(body: Body) -> Arc<Message> {
        let mut headers = FieldTable::new();
        headers.insert("x-delay", FieldValue::I64(-5000));
        let properties = BasicProperties {
            content_type: Some("text/plain".into()),
            headers: Some(headers),
            delivery_mode: Some(2),
            ..Default::default()
        };
        Message::new(
            "delayed".into(),
            "reminders.eu".into(),
            properties,
            body,
            None,
        )
    }

    #[test]
    fn unpacks_what_was_packed() {
        let original = sample(Body::Single(Bytes::from_static(b"hello, later")));
        let packed = PackedMessage::pack(&original);
        assert_eq!(packed.body_len(), 12);
        assert_eq!(packed.routing_key().expect("valid"), "reminders.eu");
        assert_eq!(packed.properties(), Some(original.properties.clone()));
        let back = packed.unpack(None).expect("valid");
        assert_eq!(back.exchange, "delayed");
        assert_eq!(back.routing_key, "reminders.eu");
        assert_eq!(back.properties, original.properties);
        assert_eq!(back.properties_encoded, original.properties_encoded);
        assert_eq!(back.body.chunks(), [Bytes::from_static(b"hello, later")]);
    }

    #[test]
    fn joins_a_chunked_body_into_one_exact_sized_buffer() {
        let body = Body::from_chunks(vec![Bytes::from_static(b"ab"), Bytes::from_static(b"cd")]);
        let original = sample(body);
        let packed = PackedMessage::pack(&original);
        let header = 2 + 7 + 2 + 12 + 4 + original.properties_encoded.len();
        assert_eq!(packed.len(), header + 4);
        let back = packed.unpack(None).expect("valid");
        assert_eq!(back.body.chunks(), [Bytes::from_static(b"abcd")]);
    }

    #[test]
    fn unpacking_shares_the_buffer() {
        let packed = PackedMessage::pack(&sample(Body::Single(Bytes::from_static(b"xyz"))));
        let buffer = packed.as_slice().as_ptr_range();
        let back = packed.unpack(None).expect("valid");
        assert!(buffer.contains(&back.body.chunks()[0].as_ptr()));
        assert!(buffer.contains(&back.routing_key.as_bytes().as_ptr()));
    }

    #[test]
    fn from_boxed_accepts_a_packed_buffer_and_rejects_every_truncation() {
        let packed = PackedMessage::pack(&sample(Body::Single(Bytes::from_static(b"body"))));
        let bytes = packed.as_slice();
        let again = PackedMessage::from_boxed(bytes.into()).expect("valid");
        assert_eq!(again.body_len(), 4);
        let body_at = bytes.len() - 4;
        for cut in 0..body_at {
            assert!(
                PackedMessage::from_boxed(bytes[..cut].into()).is_none(),
                "a buffer cut at {cut} was accepted"
            );
        }
    }

    #[test]
    fn corrupt_strings_or_properties_do_not_unpack() {
        let packed = PackedMessage::pack(&sample(Body::default()));
        let mut bytes = packed.as_slice().to_vec();
        bytes[2] = 0xFF; // first octet of the exchange name: not UTF-8
        let corrupt = PackedMessage::from_boxed(bytes.into()).expect("layout is intact");
        assert!(corrupt.unpack(None).is_none());
    }

    #[test]
    fn unpacking_its_own_never_fails_and_keeps_undecodable_properties_as_they_were() {
        // Flags announcing a content type whose string is missing: valid layout, bad properties.
        let mut bytes = vec![0, 2, b'e', b'x', 0, 1, b'k', 0, 0, 0, 2, 0x80, 0x00];
        bytes.extend_from_slice(b"body");
        let packed = PackedMessage::from_boxed(bytes.into()).expect("layout is intact");
        assert!(packed.clone().unpack(None).is_none());
        let back = packed.unpack_own();
        assert_eq!(back.properties, BasicProperties::default());
        assert_eq!(back.properties_encoded, Bytes::from_static(&[0x80, 0x00]));
        assert_eq!(
            (back.exchange.as_str(), back.routing_key.as_str()),
            ("ex", "k")
        );
        assert!(back.body == *b"body".as_slice());
    }

    fn dead(message: &Message, queue: &str) -> Arc<Message> {
        let target = crate::queue::DeadLetterTarget {
            exchange: "retry".into(),
            routing_key: None,
        };
        crate::dead_letter::dead_letter(
            message,
            &queue.into(),
            crate::queue::DeathReason::Rejected,
            &target,
            7_000,
            None,
        )
        .message
    }

    #[test]
    fn the_brokers_dead_letter_history_survives_packing() {
        let original = sample(Body::Single(Bytes::from_static(b"x")));
        let twice = dead(&dead(&original, "work"), "other");
        assert_eq!(twice.deaths.len(), 2);
        let back = PackedMessage::pack(&twice).unpack(None).expect("valid");
        assert_eq!(back.deaths, twice.deaths);
        assert_eq!(back.exchange, "retry");
        // A later death continues the history instead of starting a new one.
        let again = dead(&back, "work");
        assert_eq!(again.deaths[0].count, 2);
        assert_eq!(again.deaths[0].queue, "work");
    }

    #[test]
    fn a_client_published_x_death_is_not_read_as_history() {
        let mut headers = FieldTable::new();
        let mut entry = FieldTable::new();
        entry.insert("count", FieldValue::I64(9));
        entry.insert(
            "reason",
            FieldValue::LongStr(Bytes::from_static(b"rejected")),
        );
        entry.insert("queue", FieldValue::LongStr(Bytes::from_static(b"work")));
        entry.insert("time", FieldValue::Timestamp(1));
        entry.insert("exchange", FieldValue::LongStr(Bytes::new()));
        headers.insert("x-death", FieldValue::Array(vec![FieldValue::Table(entry)]));
        let original = Message::new(
            "".into(),
            "work".into(),
            BasicProperties {
                headers: Some(headers),
                ..Default::default()
            },
            Body::Single(Bytes::from_static(b"x")),
            None,
        );
        let back = PackedMessage::pack(&original).unpack(None).expect("valid");
        assert!(back.deaths.is_empty());
        assert_eq!(PackedMessage::exchange_field(&original), 0);
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A store may hand back any bytes: reading them must never panic.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Some(packed) = PackedMessage::from_boxed(bytes.into()) {
                let _ = packed.routing_key();
                let _ = packed.properties();
                prop_assert!(packed.body_len() <= packed.len());
                let _ = packed.unpack(None);
            }
        }

        /// Corruption inside a well-formed layout: flipped octets anywhere.
        #[test]
        fn corrupted_packed_buffers_never_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        ) {
            let mut headers = dwellmq_codec::FieldTable::new();
            headers.insert("x-delay", dwellmq_codec::FieldValue::I64(-5));
            let properties = BasicProperties {
                headers: Some(headers),
                content_type: Some("text/plain".into()),
                ..Default::default()
            };
            let message = Message::new("ex".into(), "key".into(), properties, Body::default(), None);
            let mut bytes = PackedMessage::pack(&message).as_slice().to_vec();
            for (at, value) in flips {
                let at = at.index(bytes.len());
                bytes[at] = value;
            }
            if let Some(packed) = PackedMessage::from_boxed(bytes.into()) {
                let _ = packed.properties();
                let _ = packed.unpack(None);
            }
        }

        #[test]
        fn any_message_survives_packing(
            exchange in "[a-z.]{0,40}",
            key in "\\PC{0,60}",
            body in proptest::collection::vec(any::<u8>(), 0..2048),
            split in 0usize..2048,
            priority in proptest::option::of(0u8..10),
        ) {
            let body = Bytes::from(body);
            let split = split.min(body.len());
            let chunks = vec![body.slice(..split), body.slice(split..)];
            let properties = BasicProperties { priority, ..Default::default() };
            let original = Message::new(
                exchange.as_str().into(),
                key.as_str().into(),
                properties,
                Body::from_chunks(chunks),
                None,
            );
            let back = PackedMessage::pack(&original).unpack(None).expect("valid");
            prop_assert_eq!(&back.exchange, &original.exchange);
            prop_assert_eq!(&back.routing_key, &original.routing_key);
            prop_assert_eq!(&back.properties, &original.properties);
            prop_assert_eq!(back.body.chunks().concat(), body.to_vec());
        }
    }
}
