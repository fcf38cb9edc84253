//! What a stream asks its owner to read from the store, what comes back, and what a restart
//! reads of a log (its segments and index, no message).

use crate::packed::PackedMessage;

/// Octets a stored record takes besides its packed message: its `u64` timestamp. Core counts
/// a record as this plus the packed message's length, and the store writes exactly that as
/// the record's value, so both count the same octets.
pub const RECORD_OVERHEAD: u64 = 8;

/// A read of a stream's log to ask the store for, handed back to
/// [`crate::stream::StreamState::read_done`] as a [`ReadResult`] (or to
/// [`crate::stream::StreamState::read_failed`]).
///
/// The owner reads committed records with keys `from_offset..end_offset` in offset order
/// from a snapshot (any snapshot taken after the request: everything below `end_offset` was
/// committed by then), and stops after `limit` records or once `max_bytes` record octets are
/// read (at least one record). Records older than `not_before_ms` are skipped without counting
/// toward either limit. Offsets may be missing (failed appends, retention): the read goes on
/// past them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    /// Numbers the reads of one stream; the result carries it back.
    pub read_id: u64,
    /// The consumer the read is for.
    pub consumer_id: u64,
    /// The first offset to read.
    pub from_offset: u64,
    /// The first offset not to read (everything below it is committed).
    pub end_offset: u64,
    /// Records to return at most.
    pub limit: usize,
    /// Record octets (see [`RECORD_OVERHEAD`]) to return at most, at least one record.
    pub max_bytes: u64,
    /// Skip records stored before this time (ms since the epoch): a consumer that starts at a
    /// timestamp reads from the index entry before it.
    pub not_before_ms: Option<u64>,
}

/// One record of a stream's log, read from the store.
#[derive(Debug, Clone)]
pub struct StreamRecord {
    /// Its offset.
    pub offset: u64,
    /// When it was appended (ms since the epoch; never lower than the record before).
    pub timestamp_ms: u64,
    /// The message as stored.
    pub message: PackedMessage,
}

impl StreamRecord {
    /// The octets the record counts for (see [`RECORD_OVERHEAD`]).
    pub fn bytes(&self) -> u64 {
        RECORD_OVERHEAD + self.message.len() as u64
    }
}

/// A read done: the records and where the read stopped.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// The request's `read_id`.
    pub read_id: u64,
    /// The request's `consumer_id`.
    pub consumer_id: u64,
    /// The records read, in offset order.
    pub records: Vec<StreamRecord>,
    /// The offset after the last one looked at (skipped records included): where the next
    /// read starts. The request's `end_offset` when the read got there.
    pub next_offset: u64,
}

impl ReadResult {
    /// The result of `request` that read nothing up to `next_offset`.
    pub fn empty(request: &ReadRequest, next_offset: u64) -> Self {
        ReadResult {
            read_id: request.read_id,
            consumer_id: request.consumer_id,
            records: Vec::new(),
            next_offset,
        }
    }
}

/// One index entry of a stored log as a restart reads it (the store's `stream_index` row):
/// a stretch of one segment, with what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredChunk {
    /// The first offset of its segment.
    pub segment: u64,
    /// Its first offset (where the chunk began; that record may be missing).
    pub first_offset: u64,
    /// The offset after the last record it holds.
    pub end_offset: u64,
    /// Records it holds.
    pub count: u64,
    /// Their octets (see [`RECORD_OVERHEAD`]).
    pub bytes: u64,
    /// The timestamp of its first stored record.
    pub first_ts: u64,
    /// The timestamp of its last stored record.
    pub last_ts: u64,
}

/// What a restart reads of a stream's log, without reading a message: where appending goes on,
/// and its index entries in offset order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredLog {
    /// The offset the next append takes: above every offset ever committed, including those
    /// retention dropped since.
    pub next_offset: u64,
    /// The index entries of what the log holds, in offset order.
    pub chunks: Vec<StoredChunk>,
}
