//! A ready message as the list keeps it: packed when it settles, or as published.

use std::collections::VecDeque;
use std::sync::Arc;

use super::QueueEntry;
use crate::message::Message;
use crate::packed::PackedMessage;
use crate::paging::StoredEntry;

/// Bodies up to this size are packed when they settle: RabbitMQ's `queue_index_embed_msgs_below`
/// (it embeds smaller messages in each queue's index, and keeps larger ones once in a shared
/// store). Each queue a message was routed to packs its own copy, so a larger body keeps its
/// slices, shared by every queue: its ~850 octets as published are small beside it, and the read
/// buffer it pins is mostly its own.
pub const PACK_BODY_LIMIT: usize = 4096;

/// How a ready message is kept.
#[derive(Debug)]
pub(super) enum Kept {
    Packed(PackedMessage),
    /// As published: not settled yet, or not to be packed (see [`packable`]).
    Shared(Arc<Message>),
}

/// A ready message as the list keeps it: a [`QueueEntry`] whose message may be packed, with
/// what the list needs of the message beside it. Its size is what a million waiting messages
/// cost besides their buffers, so the expiry is a flag and a number rather than an `Option`.
#[derive(Debug)]
pub(super) struct Waiting {
    pub(super) kept: Kept,
    pub(super) seq: u64,
    pub(super) expires_at: u64,
    pub(super) delivery_count: u32,
    pub(super) acquired_count: u32,
    pub(super) expires: bool,
    pub(super) redelivered: bool,
    pub(super) persistent: bool,
    /// The store has, or is being given, a record of it (persisted, or spilled): once that
    /// write is committed it may leave memory for the run.
    pub(super) written: bool,
    /// Its record is a spilled one, which goes when the message leaves the list.
    pub(super) spilled: bool,
}

impl Waiting {
    pub(super) fn new(entry: QueueEntry, written: bool) -> Waiting {
        Waiting {
            persistent: entry.message.is_persistent(),
            written,
            spilled: false,
            kept: Kept::Shared(entry.message),
            seq: entry.seq,
            expires_at: entry.expires_at.unwrap_or(0),
            expires: entry.expires_at.is_some(),
            delivery_count: entry.delivery_count,
            acquired_count: entry.acquired_count,
            redelivered: entry.redelivered,
        }
    }

    /// A message of a paged-out run, read back from the store: packed as stored.
    pub(super) fn stored(entry: StoredEntry) -> Waiting {
        Waiting {
            kept: Kept::Packed(entry.message),
            seq: entry.seq,
            expires_at: entry.expires_at.unwrap_or(0),
            expires: entry.expires_at.is_some(),
            delivery_count: 0,
            acquired_count: 0,
            redelivered: entry.redelivered,
            // A durable queue spills only its transient messages.
            persistent: !entry.spilled,
            // A spilled one's record goes when its page is taken in (see `page_in`): it is
            // written again if it must leave memory again.
            written: !entry.spilled,
            spilled: false,
        }
    }

    pub(super) fn expires_at(&self) -> Option<u64> {
        self.expires.then_some(self.expires_at)
    }

    /// The message, unpacked if it was packed (its parts then slices of the packed buffer).
    pub(super) fn into_entry(self) -> QueueEntry {
        let expires_at = self.expires_at();
        let message = match self.kept {
            Kept::Packed(packed) => packed.unpack_own(),
            Kept::Shared(message) => message,
        };
        QueueEntry {
            message,
            seq: self.seq,
            redelivered: self.redelivered,
            delivery_count: self.delivery_count,
            acquired_count: self.acquired_count,
            expires_at,
        }
    }

    pub(super) fn body_len(&self) -> usize {
        match &self.kept {
            Kept::Packed(packed) => packed.body_len(),
            Kept::Shared(message) => message.body_len(),
        }
    }

    /// Octets held for it while packed; none while shared (the message carries its own charge).
    pub(super) fn packed_footprint(&self) -> u64 {
        match &self.kept {
            Kept::Packed(packed) => packed_footprint(packed.len()),
            Kept::Shared(_) => 0,
        }
    }
}

/// Octets a packed message of `packed_len` octets holds while ready: its place in the list and
/// its buffer, rounded up as an allocator rounds small sizes.
pub fn packed_footprint(packed_len: usize) -> u64 {
    (std::mem::size_of::<Waiting>() + packed_len.next_multiple_of(16)) as u64
}

/// A spilled message as the list kept it, for its owner to write.
#[derive(Debug, Clone)]
pub enum SpilledMessage {
    /// Packed (a copy of the list's buffer: the list keeps its own until the write commits).
    Packed(PackedMessage),
    /// As published (a large body, or `BCC` keys).
    Shared(Arc<Message>),
}

/// Whether a settled message is packed: a small body, names the packed layout holds whole, and
/// no `BCC` keys (they are kept beside the message for dead-lettering, and a packed message has
/// no room for them).
pub(super) fn packable(message: &Message) -> bool {
    let whole = |name: &[u8]| PackedMessage::clamp_name(name).len() == name.len();
    message.body_len() <= PACK_BODY_LIMIT
        && message.bcc.is_empty()
        && whole(message.exchange.as_bytes())
        && whole(message.routing_key.as_bytes())
}

/// Slots kept however few messages wait: below this, giving memory back is not worth a move.
pub(super) const KEPT_SLOTS: usize = 1024;

/// Halves a level's slots once it is three quarters empty, so that a queue a backlog of
/// millions has drained does not keep 48 octets a message for good. Halving (not fitting)
/// keeps the moves amortized: a level that grows again is not moved at every pop.
pub(super) fn give_back_slots(level: &mut VecDeque<Waiting>) {
    let capacity = level.capacity();
    if capacity > KEPT_SLOTS && level.len() < capacity / 4 {
        level.shrink_to((capacity / 2).max(KEPT_SLOTS));
    }
}

/// A ready message, seen in place (inspection).
#[derive(Debug, Clone, Copy)]
pub struct ReadyMessage<'a>(pub(super) &'a Waiting);

impl ReadyMessage<'_> {
    /// Its position in the queue.
    pub fn seq(&self) -> u64 {
        self.0.seq
    }

    /// When it expires, if it does.
    pub fn expires_at(&self) -> Option<u64> {
        self.0.expires_at()
    }

    /// Whether the publisher asked for persistence.
    pub fn is_persistent(&self) -> bool {
        self.0.persistent
    }

    /// Body size in octets.
    pub fn body_len(&self) -> usize {
        self.0.body_len()
    }

    /// Whether it waits packed.
    pub fn is_packed(&self) -> bool {
        matches!(self.0.kept, Kept::Packed(_))
    }

    /// A copy of the entry (a packed message unpacked from a copy of its buffer), for
    /// inspection: the message stays where it is.
    pub fn to_entry(&self) -> QueueEntry {
        let waiting = self.0;
        let message = match &waiting.kept {
            Kept::Packed(packed) => packed.clone().unpack_own(),
            Kept::Shared(message) => Arc::clone(message),
        };
        QueueEntry {
            message,
            seq: waiting.seq,
            redelivered: waiting.redelivered,
            delivery_count: waiting.delivery_count,
            acquired_count: waiting.acquired_count,
            expires_at: waiting.expires_at(),
        }
    }
}
