//! A stream (`x-queue-type: stream`) as a driven state machine: an append-only log that every
//! consumer reads on its own, from an offset of its choosing. Commands carry `now` in,
//! [`StreamEffect`]s come out; the log itself lives in the store, and the state machine keeps
//! only its bookkeeping (segments and a few index entries each) and each consumer's window.
//!
//! # How the shell drives a stream
//!
//! The shell keeps a [`StreamState`] behind a mutex (as it keeps a `QueueState`), a
//! [`StreamProgress`] beside it (shared with the store's completions), and the queue's store
//! id as the stream's id in the store. It runs one command at a time with the clock's `now`
//! and carries out the effects from a reused [`StreamEffects`]:
//!
//! | command | when |
//! |---|---|
//! | [`StreamState::new`] / [`StreamState::restore`] | declare / start ([`StoredLog`] from `Snapshot::stream_log`) |
//! | [`StreamState::publish`] | a message routed to the stream; returns its offset |
//! | [`StreamState::sync`] | after append completions (the store's `after_batch`, or the next command) |
//! | [`StreamState::consume`] | `basic.consume`, once [`crate::arguments::check_stream_consume`] passed |
//! | [`StreamState::settled`] | `basic.ack`/`nack`/`reject` (any requeue flag) or `basic.recover` of its deliveries, after `ConsumerCredit::settled` |
//! | [`StreamState::drain`] | the consumer's channel can take deliveries again (flow, congestion) |
//! | [`StreamState::read_done`] / [`StreamState::read_failed`] | a `Read` was carried out |
//! | [`StreamState::tick`] | at an `Arm`'s time |
//! | [`StreamState::cancel`], [`StreamState::set_settings`], [`StreamState::delete`] | `basic.cancel` or channel close, a policy change, `queue.delete` |
//!
//! | effect | carried out |
//! |---|---|
//! | `Append` | `Op::StreamAppend` submitted **under the lock, in offset order**, its completion settling the publisher's confirm (a failed commit nacks it) and calling `StreamProgress::completed(offset, ok)`; then `sync` runs soon after |
//! | `Truncate` | `Op::StreamTruncate` submitted under the lock (after the appends before it) |
//! | `Read` | off the lock: `Snapshot::stream_read(stream_id, &request)`, then `read_done` (or `read_failed` when the snapshot failed) |
//! | `Deliver` | `basic.deliver` of [`StreamDelivery::into_message`] (it carries the `x-stream-offset` header), before the lock is released, as queues deliver |
//! | `Arm` | a tick at or after the time |
//!
//! Refused before any command, with RabbitMQ's texts: `basic.get`
//! ([`crate::arguments::stream_get_refused`]), `queue.purge`
//! ([`crate::arguments::stream_purge_refused`]), a consumer without prefetch, with no-ack or
//! under global qos ([`crate::arguments::check_stream_consume`]). Acks only give credit back:
//! a stream removes nothing, and RabbitMQ settles nacks and rejects (with or without requeue)
//! the same way, redelivering nothing.
//!
//! # Semantics
//!
//! - Every message gets the next offset, from 0; offsets are never reused (a restart goes on
//!   after the highest offset ever committed, see [`StoredLog::next_offset`]). A failed
//!   append leaves a gap: its publisher was nacked and no consumer sees it.
//! - Consumers see only committed records, in offset order, each delivery carrying its offset
//!   in `x-stream-offset`. Each consumer's credit is its prefetch: a delivery takes one, any
//!   settle gives one back. Several consumers read independently.
//! - Retention drops whole segments from the head, never the last: by `max-length-bytes` when
//!   a new segment starts (and when the settings change), by `max-age` then and at ticks.
//!   `message_count` is what the log holds, committed.
//! - Memory: per stream, a segment list with a few index entries per segment; per consumer,
//!   one read's worth of records (at most its credit, and [`StreamSettings::read_bytes`]);
//!   the messages appended and not committed yet.

mod commands;
mod consumer;
mod deliver;
mod effects;
mod header;
mod log;
mod progress;
#[cfg(test)]
mod proptests;
mod read;
mod settings;
#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::Arc;

pub use crate::arguments::OffsetSpec;
pub use consumer::StreamConsumerSlot;
pub use effects::{StreamDelivery, StreamEffect, StreamEffects, StreamMessage};
pub use header::{with_offset_header, OFFSET_HEADER};
pub use progress::StreamProgress;
pub use read::{ReadRequest, ReadResult, StoredChunk, StoredLog, StreamRecord, RECORD_OVERHEAD};
pub use settings::{StreamSettings, CHUNKS_PER_SEGMENT, DEFAULT_READ_BYTES, DEFAULT_SEGMENT_BYTES};

use consumer::StreamConsumer;
use log::LogIndex;

use crate::message::Message;

/// How long a failed read waits before it is asked again (ms).
pub const READ_RETRY_MS: u64 = 50;

/// Why a consumer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamConsumeRefused {
    /// The stream is deleted.
    Deleted,
    /// A consumer with this id is attached already.
    DuplicateId,
}

/// An append whose commit is not known yet.
#[derive(Debug)]
struct Pending {
    offset: u64,
    timestamp_ms: u64,
    bytes: u64,
    /// Kept for the consumers waiting at the tail: they get it from here once it commits.
    message: Arc<Message>,
}

/// One stream's state. `C` is the shell's consumer handle.
#[derive(Debug)]
pub struct StreamState<C> {
    settings: StreamSettings,
    log: LogIndex,
    /// Every append below this offset is settled (committed or failed).
    committed_end: u64,
    /// The last committed record (for `last`).
    last_committed: Option<u64>,
    pending: VecDeque<Pending>,
    consumers: Vec<StreamConsumer<C>>,
    next_read: u64,
    /// The earliest tick already asked for.
    armed_at: Option<u64>,
    deleted: bool,
}

impl<C: Clone> StreamState<C> {
    /// A new, empty stream.
    pub fn new(settings: StreamSettings) -> Self {
        Self::restore(settings, &StoredLog::default())
    }

    /// A stream as the store holds it at start (nothing is read but its index). Its
    /// [`StreamProgress`] starts at [`StreamState::next_offset`].
    pub fn restore(settings: StreamSettings, stored: &StoredLog) -> Self {
        let log = LogIndex::restored(stored);
        let last_committed = stored.chunks.last().map(|c| c.end_offset.saturating_sub(1));
        StreamState {
            settings,
            committed_end: log.next_offset(),
            log,
            last_committed,
            pending: VecDeque::new(),
            consumers: Vec::new(),
            next_read: 1,
            armed_at: None,
            deleted: false,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &StreamSettings {
        &self.settings
    }

    /// Committed messages the log holds (`message_count`).
    pub fn message_count(&self) -> u64 {
        self.log.committed_count()
    }

    /// Record octets the log holds (committed or not).
    pub fn log_bytes(&self) -> u64 {
        self.log.bytes()
    }

    /// The first offset the log holds (the next offset when it holds none).
    pub fn first_offset(&self) -> u64 {
        self.log.first_offset()
    }

    /// The offset the next message takes.
    pub fn next_offset(&self) -> u64 {
        self.log.next_offset()
    }

    /// Every append below this offset is settled; consumers read below it only.
    pub fn committed_end(&self) -> u64 {
        self.committed_end
    }

    /// The log's segments as (first offset, records, octets), oldest first (inspection).
    pub fn segments(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.log
            .segments()
            .map(|s| (s.first_offset, s.count, s.bytes))
    }

    /// Appends not settled yet.
    pub fn pending_appends(&self) -> usize {
        self.pending.len()
    }

    /// Attached consumers.
    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    /// The consumers' handles.
    pub fn consumer_handles(&self) -> impl Iterator<Item = &C> {
        self.consumers.iter().map(|c| &c.slot.handle)
    }

    /// A consumer's next offset to fetch and how many records it holds fetched and not
    /// delivered (inspection, tests).
    pub fn consumer_position(&self, id: u64) -> Option<(u64, usize)> {
        self.consumers
            .iter()
            .find(|c| c.slot.id == id)
            .map(|c| (c.cursor, c.fetched.len()))
    }

    /// Whether the stream has been deleted.
    pub fn is_deleted(&self) -> bool {
        self.deleted
    }

    fn consumer_index(&self, id: u64) -> Option<usize> {
        self.consumers.iter().position(|c| c.slot.id == id)
    }
}

/// The octets a message takes in the log (see [`RECORD_OVERHEAD`]).
pub fn record_bytes(message: &Message) -> u64 {
    RECORD_OVERHEAD + crate::packed::PackedMessage::packed_len_of(message) as u64
}
