//! The records of delayed exchanges: a held message (its `held_messages` value) and an
//! exchange's `delayed_exchanges` row.

use dwellmq_core::PackedMessage;

use crate::codec::{Dec, Enc};

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
