//! The records the store keeps, and their value encodings (DESIGN.md, "Values").
//!
//! Arguments, policy definitions and vhost metadata are opaque octets to the store: the broker
//! writes them in the AMQP field-table encoding it already has, so the store needs no knowledge
//! of their meaning and a new argument needs no new format.

use std::sync::Arc;

use dwellmq_core::{Message, PackedMessage};

use crate::codec::{Dec, Enc};
use crate::layout::name_key;

/// A virtual host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhostDef {
    /// Its name.
    pub name: String,
    /// Whatever the broker keeps with it (description, tags, limits), opaque here.
    pub metadata: Vec<u8>,
}

/// A user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDef {
    /// Login name.
    pub name: String,
    /// The credential as the broker keeps it (a password hash), opaque here. Empty: the mark
    /// that the user was deleted at runtime (so that a configured user stays deleted after a
    /// restart); the writer retries such a mark as it retries a removal.
    pub credential: Vec<u8>,
    /// Tags (`administrator`, ...).
    pub tags: Vec<String>,
}

/// A user's permissions in a vhost, or the mark that they were cleared at runtime (so that
/// permissions the broker's configuration grants stay cleared after a restart).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionDef {
    /// The vhost.
    pub vhost: String,
    /// The user.
    pub user: String,
    /// The patterns; `None`: cleared (a mark the writer retries as it retries a removal).
    pub patterns: Option<PermissionPatterns>,
}

/// RabbitMQ's three permission patterns, as the user gave them (regular expressions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionPatterns {
    /// `configure`.
    pub configure: String,
    /// `write`.
    pub write: String,
    /// `read`.
    pub read: String,
}

/// A durable exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeDef {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Its type (`direct`, `topic`, `x-delayed-message`, ...).
    pub kind: String,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Not publishable by clients.
    pub internal: bool,
    /// Its arguments, an encoded AMQP field table.
    pub arguments: Vec<u8>,
}

/// A durable queue. `id` names it in the message tables (a queue deleted and declared again
/// gets a new id, so nothing of the old one can reappear).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDef {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// Its id, from [`crate::Store::allocate_queue_id`].
    pub id: u64,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Its arguments, an encoded AMQP field table.
    pub arguments: Vec<u8>,
}

/// What a binding leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DestinationKind {
    /// A queue.
    Queue,
    /// An exchange (exchange-to-exchange binding).
    Exchange,
}

/// A binding between durable objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingDef {
    /// Its vhost.
    pub vhost: String,
    /// The source exchange.
    pub source: String,
    /// Queue or exchange.
    pub destination_kind: DestinationKind,
    /// The destination's name.
    pub destination: String,
    /// The binding key.
    pub routing_key: String,
    /// Its arguments (headers exchanges match on them), an encoded AMQP field table.
    pub arguments: Vec<u8>,
}

/// A policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyDef {
    /// Its vhost.
    pub vhost: String,
    /// Its name.
    pub name: String,
    /// The pattern matched against names.
    pub pattern: String,
    /// `queues`, `exchanges`, `all`, ...
    pub apply_to: String,
    /// The highest matching priority wins.
    pub priority: i64,
    /// Its definition, encoded by the broker.
    pub definition: Vec<u8>,
}

/// Everything durable but messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Definitions {
    /// Virtual hosts.
    pub vhosts: Vec<VhostDef>,
    /// Users.
    pub users: Vec<UserDef>,
    /// Permissions (and cleared ones), by vhost then user.
    pub permissions: Vec<PermissionDef>,
    /// Durable exchanges.
    pub exchanges: Vec<ExchangeDef>,
    /// Durable queues.
    pub queues: Vec<QueueDef>,
    /// Bindings.
    pub bindings: Vec<BindingDef>,
    /// Policies.
    pub policies: Vec<PolicyDef>,
}

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

/// A message held by a delayed exchange, read back.
#[derive(Debug, Clone)]
pub struct DelayedMessage {
    /// When it is due, and its order among those due in the same millisecond.
    pub id: dwellmq_core::schedule::DeadlineId,
    /// The vhost of the exchange holding it.
    pub vhost: String,
    /// The exchange holding it.
    pub exchange: String,
    /// The message.
    pub message: PackedMessage,
}

// Value encodings. Each `decode` returns `None` on any malformation; callers name the record.

impl VhostDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        Enc::new().bytes32(&self.metadata).done()
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let name = k.str16()?;
        k.end()?;
        let mut v = Dec::new(value);
        let metadata = v.bytes32()?;
        v.end()?;
        Some(VhostDef { name, metadata })
    }
}

impl UserDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        let e = Enc::new()
            .bytes32(&self.credential)
            .u32(self.tags.len() as u32);
        self.tags.iter().fold(e, |e, t| e.str16(t)).done()
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let name = k.str16()?;
        k.end()?;
        let mut v = Dec::new(value);
        let credential = v.bytes32()?;
        let count = v.u32()?;
        let tags = (0..count).map(|_| v.str16()).collect::<Option<Vec<_>>>()?;
        v.end()?;
        Some(UserDef {
            name,
            credential,
            tags,
        })
    }
}

impl PermissionDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.vhost, &self.user])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        match &self.patterns {
            None => Enc::new().u8(0).done(),
            Some(p) => Enc::new()
                .u8(1)
                .str16(&p.configure)
                .str16(&p.write)
                .str16(&p.read)
                .done(),
        }
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let (vhost, user) = (k.str16()?, k.str16()?);
        k.end()?;
        let mut v = Dec::new(value);
        let patterns = match v.u8()? {
            0 => None,
            1 => Some(PermissionPatterns {
                configure: v.str16()?,
                write: v.str16()?,
                read: v.str16()?,
            }),
            _ => return None,
        };
        v.end()?;
        Some(PermissionDef {
            vhost,
            user,
            patterns,
        })
    }
}

impl ExchangeDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.vhost, &self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        let flags = u8::from(self.auto_delete) | (u8::from(self.internal) << 1);
        Enc::new()
            .str16(&self.kind)
            .u8(flags)
            .bytes32(&self.arguments)
            .done()
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let (vhost, name) = (k.str16()?, k.str16()?);
        k.end()?;
        let mut v = Dec::new(value);
        let kind = v.str16()?;
        let flags = v.u8()?;
        let arguments = v.bytes32()?;
        v.end()?;
        Some(ExchangeDef {
            vhost,
            name,
            kind,
            auto_delete: flags & 1 != 0,
            internal: flags & 2 != 0,
            arguments,
        })
    }
}

impl QueueDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.vhost, &self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        Enc::new()
            .u64(self.id)
            .u8(u8::from(self.auto_delete))
            .bytes32(&self.arguments)
            .done()
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let (vhost, name) = (k.str16()?, k.str16()?);
        k.end()?;
        let mut v = Dec::new(value);
        let id = v.u64()?;
        let flags = v.u8()?;
        let arguments = v.bytes32()?;
        v.end()?;
        Some(QueueDef {
            vhost,
            name,
            id,
            auto_delete: flags & 1 != 0,
            arguments,
        })
    }
}

impl BindingDef {
    /// The whole binding is the key (a binding is its identity); the value is empty.
    pub(crate) fn key(&self) -> Vec<u8> {
        let kind = match self.destination_kind {
            DestinationKind::Queue => 0,
            DestinationKind::Exchange => 1,
        };
        Enc::new()
            .str16(&self.vhost)
            .str16(&self.source)
            .u8(kind)
            .str16(&self.destination)
            .str16(&self.routing_key)
            .bytes32(&self.arguments)
            .done()
    }
    pub(crate) fn decode(key: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let vhost = k.str16()?;
        let source = k.str16()?;
        let destination_kind = match k.u8()? {
            0 => DestinationKind::Queue,
            1 => DestinationKind::Exchange,
            _ => return None,
        };
        let destination = k.str16()?;
        let routing_key = k.str16()?;
        let arguments = k.bytes32()?;
        k.end()?;
        Some(BindingDef {
            vhost,
            source,
            destination_kind,
            destination,
            routing_key,
            arguments,
        })
    }
}

impl PolicyDef {
    pub(crate) fn key(&self) -> Vec<u8> {
        name_key(&[&self.vhost, &self.name])
    }
    pub(crate) fn value(&self) -> Vec<u8> {
        Enc::new()
            .str16(&self.pattern)
            .str16(&self.apply_to)
            .i64(self.priority)
            .bytes32(&self.definition)
            .done()
    }
    pub(crate) fn decode(key: &[u8], value: &[u8]) -> Option<Self> {
        let mut k = Dec::new(key);
        let (vhost, name) = (k.str16()?, k.str16()?);
        k.end()?;
        let mut v = Dec::new(value);
        let pattern = v.str16()?;
        let apply_to = v.str16()?;
        let priority = v.i64()?;
        let definition = v.bytes32()?;
        v.end()?;
        Some(PolicyDef {
            vhost,
            name,
            pattern,
            apply_to,
            priority,
            definition,
        })
    }
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

/// `held_messages` value: `u32 exchange number ‖ u8 flags and bucket shift ‖ u64 due_ms ‖ u64
/// body octets ‖ packed message`. The header finds the message's `held_due` bucket and its
/// exchange's row from its seq alone, and the body size lets a release keep its exchange's
/// octets right without unpacking.
///
/// The second octet's top bit ([`EXCHANGE_ELIDED`]) says that the packed message's exchange
/// name was left out (its length field says 0, its history flag kept) because it is the
/// holding exchange's own name, which its `delayed_exchanges` row already has: nearly every
/// held message was published to the exchange that holds it, and the name would otherwise be
/// a tenth of a small message's record.
pub(crate) const HELD_HEADER: usize = 21;

/// The flag in a `held_messages` header's shift octet: the exchange name was left out.
pub(crate) const EXCHANGE_ELIDED: u8 = 0x80;

/// What a `held_messages` header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldHeader {
    pub(crate) exchange: u32,
    pub(crate) shift: u8,
    pub(crate) exchange_elided: bool,
    pub(crate) due_ms: u64,
    pub(crate) body_octets: u64,
}

impl HeldHeader {
    pub(crate) fn write(&self, out: &mut [u8]) {
        out[..4].copy_from_slice(&self.exchange.to_be_bytes());
        out[4] = self.shift
            | if self.exchange_elided {
                EXCHANGE_ELIDED
            } else {
                0
            };
        out[5..13].copy_from_slice(&self.due_ms.to_be_bytes());
        out[13..21].copy_from_slice(&self.body_octets.to_be_bytes());
    }

    pub(crate) fn read(value: &[u8]) -> Option<Self> {
        let mut v = Dec::new(value);
        let exchange = v.u32()?;
        let flags_and_shift = v.u8()?;
        let header = HeldHeader {
            exchange,
            shift: flags_and_shift & !EXCHANGE_ELIDED,
            exchange_elided: flags_and_shift & EXCHANGE_ELIDED != 0,
            due_ms: v.u64()?,
            body_octets: v.u64()?,
        };
        (header.shift <= crate::layout::MAX_BUCKET_SHIFT).then_some(header)
    }
}

/// A packed message as `held_messages` keeps it: its exchange length field, then the rest of
/// the layout after the exchange name, which is left out when it is `holder`.
pub(crate) struct HeldBody<'a> {
    pub(crate) exchange_field: [u8; 2],
    pub(crate) rest: &'a [u8],
    pub(crate) exchange_elided: bool,
}

impl<'a> HeldBody<'a> {
    /// `packed` (a whole packed layout) held by the exchange named `holder`.
    pub(crate) fn of(packed: &'a [u8], holder: &[u8]) -> Option<Self> {
        let field = u16::from_be_bytes(packed.get(..2)?.try_into().ok()?);
        let len = usize::from(field & !PackedMessage::HISTORY_FLAG);
        let name = packed.get(2..2 + len)?;
        let elided = name == PackedMessage::clamp_name(holder);
        Some(if elided {
            HeldBody {
                exchange_field: (field & PackedMessage::HISTORY_FLAG).to_be_bytes(),
                rest: &packed[2 + len..],
                exchange_elided: true,
            }
        } else {
            HeldBody {
                exchange_field: field.to_be_bytes(),
                rest: &packed[2..],
                exchange_elided: false,
            }
        })
    }

    pub(crate) fn len(&self) -> usize {
        2 + self.rest.len()
    }

    pub(crate) fn write(&self, out: &mut [u8]) {
        out[..2].copy_from_slice(&self.exchange_field);
        out[2..].copy_from_slice(self.rest);
    }
}

/// A `held_messages` value's header and the packed message it keeps, its exchange name put
/// back from `holder` (the holding exchange's name) when it was left out.
pub(crate) fn decode_held_value(value: &[u8], holder: &str) -> Option<(HeldHeader, PackedMessage)> {
    let header = HeldHeader::read(value)?;
    let kept = value.get(HELD_HEADER..)?;
    let packed: Box<[u8]> = if header.exchange_elided {
        let field = u16::from_be_bytes(kept.get(..2)?.try_into().ok()?);
        let name = PackedMessage::clamp_name(holder.as_bytes());
        let mut whole = Vec::with_capacity(kept.len() + name.len());
        whole.extend_from_slice(&(field | name.len() as u16).to_be_bytes());
        whole.extend_from_slice(name);
        whole.extend_from_slice(kept.get(2..)?);
        whole.into_boxed_slice()
    } else {
        kept.into()
    };
    Some((header, PackedMessage::from_boxed(packed)?))
}

/// A `delayed_exchanges` row: the exchange's number in `held`, and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldBy {
    pub(crate) number: u32,
    pub(crate) count: u64,
    pub(crate) bytes: u64,
}

impl HeldBy {
    /// `u32 number ‖ u64 count ‖ u64 body octets`.
    pub(crate) fn value(&self) -> Vec<u8> {
        Enc::new()
            .u32(self.number)
            .u64(self.count)
            .u64(self.bytes)
            .done()
    }
    pub(crate) fn decode(value: &[u8]) -> Option<Self> {
        let mut v = Dec::new(value);
        let row = HeldBy {
            number: v.u32()?,
            count: v.u64()?,
            bytes: v.u64()?,
        };
        v.end()?;
        Some(row)
    }
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
