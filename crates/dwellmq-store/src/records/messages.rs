//! A queue's message records: the message as handed to the store, its `messages` value and
//! its delivery state.

use std::sync::Arc;

use dwellmq_core::{Message, PackedMessage};

use crate::codec::{Dec, Enc};

/// A persistent message's delivery state, kept only once it differs from a fresh message's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryState {
    /// It was delivered before (comes back with `redelivered` set).
    pub redelivered: bool,
    /// Returns counted against a delivery limit (`x-delivery-count`).
    pub delivery_count: u32,
    /// Times it was delivered (`x-acquired-count`).
    pub acquired_count: u32,
    /// Waiting for a retry: not ready before this time (ms since the epoch; 0 = ready).
    pub ready_at_ms: u64,
    /// Dead-lettered and kept until its dead-letter targets take it (at-least-once
    /// dead-lettering): never ready again. The reason it died, as the broker numbers reasons
    /// (below 7).
    pub dead_letter_reason: Option<u8>,
}

/// A message's content as handed to the store: the writer thread packs it into the page itself,
/// so a published message is copied once, by the writer, not by the connection.
#[derive(Debug, Clone)]
pub enum Payload {
    /// A message as published.
    Message(Arc<Message>),
    /// A message already packed (held by a delayed exchange).
    Packed(PackedMessage),
}

impl Payload {
    /// Its packed size in octets.
    pub fn packed_len(&self) -> usize {
        match self {
            Payload::Packed(p) => p.len(),
            Payload::Message(m) => {
                2 + PackedMessage::clamp_name(m.exchange.as_bytes()).len()
                    + 2
                    + PackedMessage::clamp_name(m.routing_key.as_bytes()).len()
                    + 4
                    + m.properties_encoded.len()
                    + m.body_len()
            }
        }
    }

    /// Its body's size in octets.
    pub fn body_len(&self) -> usize {
        match self {
            Payload::Packed(p) => p.body_len(),
            Payload::Message(m) => m.body_len(),
        }
    }

    /// Writes the packed layout of [`PackedMessage`] into `out` (exactly `packed_len` octets).
    pub(crate) fn write_packed(&self, out: &mut [u8]) {
        match self {
            Payload::Packed(p) => out.copy_from_slice(p.as_slice()),
            Payload::Message(m) => {
                let mut at = 0;
                let mut put = |bytes: &[u8]| {
                    out[at..at + bytes.len()].copy_from_slice(bytes);
                    at += bytes.len();
                };
                // The length field also carries the history flag.
                put(&PackedMessage::exchange_field(m).to_be_bytes());
                put(PackedMessage::clamp_name(m.exchange.as_bytes()));
                let key = PackedMessage::clamp_name(m.routing_key.as_bytes());
                put(&(key.len() as u16).to_be_bytes());
                put(key);
                put(&(m.properties_encoded.len() as u32).to_be_bytes());
                put(&m.properties_encoded);
                for chunk in m.body.chunks() {
                    put(chunk);
                }
            }
        }
    }
}

/// A persistent message read back from a queue.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    /// Its position in the queue.
    pub seq: u64,
    /// When it expires (ms since the epoch; 0 = never).
    pub expires_at_ms: u64,
    /// Its delivery state (default for a message never delivered).
    pub state: DeliveryState,
    /// The message.
    pub message: PackedMessage,
}
impl DeliveryState {
    pub(crate) const LEN: usize = 17;

    pub(crate) fn value(&self) -> Vec<u8> {
        // Bits 1-3 hold the dead-letter reason plus one, so that older records (zero there)
        // read as not dead-lettered.
        let reason = self.dead_letter_reason.map_or(0, |r| (r.min(6) + 1) << 1);
        Enc::new()
            .u8(u8::from(self.redelivered) | reason)
            .u32(self.delivery_count)
            .u32(self.acquired_count)
            .u64(self.ready_at_ms)
            .done()
    }
    pub(crate) fn decode(value: &[u8]) -> Option<Self> {
        let mut v = Dec::new(value);
        let flags = v.u8()?;
        let state = DeliveryState {
            redelivered: flags & 1 != 0,
            delivery_count: v.u32()?,
            acquired_count: v.u32()?,
            ready_at_ms: v.u64()?,
            dead_letter_reason: ((flags >> 1) & 7).checked_sub(1),
        };
        v.end()?;
        Some(state)
    }
}

/// `messages` value: `u64 expires_at_ms ‖ packed message`.
pub(crate) const MESSAGE_HEADER: usize = 8;

/// The top bit of the `expires_at_ms` word: the message was delivered before its persist was
/// submitted (an expiry in ms since the epoch never reaches 2^63).
pub(crate) const DELIVERED_BIT: u64 = 1 << 63;

/// The `expires_at_ms` word a persist writes.
pub(crate) fn expiry_word(expires_at_ms: u64, delivered: bool) -> u64 {
    let expires_at_ms = expires_at_ms & !DELIVERED_BIT;
    if delivered {
        expires_at_ms | DELIVERED_BIT
    } else {
        expires_at_ms
    }
}

/// `(expires_at_ms, delivered, message)`.
pub(crate) fn decode_message_value(value: &[u8]) -> Option<(u64, bool, PackedMessage)> {
    let mut v = Dec::new(value);
    let word = v.u64()?;
    let packed = PackedMessage::from_boxed(v.rest().into())?;
    Some((word & !DELIVERED_BIT, word & DELIVERED_BIT != 0, packed))
}
#[cfg(test)]
mod delivery_state_tests {
    use super::DeliveryState;

    #[test]
    fn a_pending_dead_letter_reason_round_trips_and_an_older_record_reads_as_none() {
        let pending = DeliveryState {
            redelivered: true,
            delivery_count: 4,
            acquired_count: 5,
            ready_at_ms: 0,
            dead_letter_reason: Some(3),
        };
        assert_eq!(DeliveryState::decode(&pending.value()), Some(pending));
        // A record written before the reason existed: flags 1 (redelivered) only.
        let older = DeliveryState {
            redelivered: true,
            ..DeliveryState::default()
        };
        let mut bytes = older.value();
        bytes[0] = 1;
        assert_eq!(
            DeliveryState::decode(&bytes).map(|s| s.dead_letter_reason),
            Some(None)
        );
    }
}
