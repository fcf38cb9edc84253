//! Applying the stream ops of a batch (format 5's `streams`, `stream_index`, `stream_log`).
//!
//! An append is one record written straight into redb's page at the end of its stream's key
//! range, and a share of two rows (its stream's, its chunk's) that the batch changes in memory
//! and writes once before its commit ([`Tables::finish_streams`]), as `queue_counts` is kept.

use std::collections::{BTreeMap, BTreeSet};

use redb::ReadableTable;

use super::{put, remove, Tables};
use crate::layout::pair;
use crate::records::Payload;
use crate::stream_records::{ChunkRow, StreamRow, LOG_HEADER};

/// What a batch changes in `streams` and `stream_index`: the rows it read or wrote, and which
/// it changed.
#[derive(Debug, Default)]
pub(crate) struct StreamChanges {
    streams: BTreeMap<u64, StreamRow>,
    dirty_streams: BTreeSet<u64>,
    chunks: BTreeMap<(u64, u64), ChunkRow>,
    dirty_chunks: BTreeSet<(u64, u64)>,
}

impl StreamChanges {
    /// Forgets what the batch holds of `stream`'s chunks below `before` (all of them when
    /// `None`), and its row too then.
    fn forget(&mut self, stream: u64, before: Option<u64>) {
        let gone = |&(s, c): &(u64, u64)| s == stream && before.is_none_or(|b| c < b);
        self.chunks.retain(|key, _| !gone(key));
        self.dirty_chunks.retain(|key| !gone(key));
        if before.is_none() {
            self.streams.remove(&stream);
            self.dirty_streams.remove(&stream);
        }
    }
}

impl Tables<'_> {
    /// The stream's row as this batch sees it.
    fn stream_row(&mut self, stream: u64) -> Result<StreamRow, redb::StorageError> {
        if let Some(row) = self.stream_changes.streams.get(&stream) {
            return Ok(*row);
        }
        let key = stream.to_be_bytes();
        // A malformed row reads as none here (reads report it as corrupt).
        let row = self
            .streams
            .get(&key[..])?
            .and_then(|v| StreamRow::decode(v.value()))
            .unwrap_or_default();
        self.stream_changes.streams.insert(stream, row);
        Ok(row)
    }

    fn set_stream_row(&mut self, stream: u64, row: StreamRow) {
        self.stream_changes.streams.insert(stream, row);
        self.stream_changes.dirty_streams.insert(stream);
    }

    /// Writes a stream's record and counts it in its chunk's row and its stream's.
    pub(super) fn stream_append(
        &mut self,
        stream: u64,
        offset: u64,
        timestamp_ms: u64,
        (segment, chunk): (u64, u64),
        message: &Payload,
    ) -> Result<(), redb::StorageError> {
        let mut row = self.stream_row(stream)?;
        if offset < row.first_offset {
            // Below the retention cut (a replay after the truncation committed): gone already.
            return Ok(());
        }
        let key = pair(stream, offset);
        if offset < row.next_offset && self.stream_log.get(&key[..])?.is_some() {
            // Written already (a commit that failed late reached the disk): counted once.
            return Ok(());
        }
        let len = LOG_HEADER + message.packed_len();
        let mut slot = self.stream_log.insert_reserve(&key[..], len)?;
        let out = slot.as_mut();
        out[..LOG_HEADER].copy_from_slice(&timestamp_ms.to_be_bytes());
        message.write_packed(&mut out[LOG_HEADER..]);
        drop(slot);
        let at = (stream, chunk);
        if !self.stream_changes.chunks.contains_key(&at) {
            let stored = self
                .stream_index
                .get(&pair(stream, chunk)[..])?
                .and_then(|v| ChunkRow::decode(v.value()));
            let fresh = ChunkRow {
                segment,
                end_offset: chunk,
                ..ChunkRow::default()
            };
            self.stream_changes
                .chunks
                .insert(at, stored.unwrap_or(fresh));
        }
        if let Some(chunk_row) = self.stream_changes.chunks.get_mut(&at) {
            chunk_row.add(offset, len as u64, timestamp_ms);
        }
        self.stream_changes.dirty_chunks.insert(at);
        row.next_offset = row.next_offset.max(offset + 1);
        self.set_stream_row(stream, row);
        Ok(())
    }

    /// Drops a stream's records and index entries below `before`.
    pub(super) fn stream_truncate(
        &mut self,
        stream: u64,
        before: u64,
    ) -> Result<(), redb::StorageError> {
        let mut row = self.stream_row(stream)?;
        self.stream_changes.forget(stream, Some(before));
        let (from, to) = (pair(stream, 0), pair(stream, before));
        self.stream_index
            .retain_in(&from[..]..&to[..], |_, _| false)?;
        self.stream_log
            .retain_in(&from[..]..&to[..], |_, _| false)?;
        row.first_offset = row.first_offset.max(before);
        row.next_offset = row.next_offset.max(before);
        self.set_stream_row(stream, row);
        Ok(())
    }

    /// Removes a stream whole: its row, index and records (its queue was deleted).
    pub(super) fn drop_stream(&mut self, stream: u64) -> Result<(), redb::StorageError> {
        self.stream_changes.forget(stream, None);
        remove(&mut self.streams, &stream.to_be_bytes())?;
        let start = pair(stream, 0);
        match stream.checked_add(1).map(|next| pair(next, 0)) {
            Some(end) => {
                self.stream_index
                    .retain_in(&start[..]..&end[..], |_, _| false)?;
                self.stream_log
                    .retain_in(&start[..]..&end[..], |_, _| false)
            }
            None => {
                self.stream_index.retain_in(&start[..].., |_, _| false)?;
                self.stream_log.retain_in(&start[..].., |_, _| false)
            }
        }
    }

    /// Writes the stream and index rows this batch changed (once per commit, before it).
    pub(crate) fn finish_streams(&mut self) -> Result<(), redb::StorageError> {
        let changes = std::mem::take(&mut self.stream_changes);
        for (stream, chunk) in changes.dirty_chunks {
            if let Some(row) = changes.chunks.get(&(stream, chunk)) {
                put(&mut self.stream_index, &pair(stream, chunk), &row.encode())?;
            }
        }
        for stream in changes.dirty_streams {
            if let Some(row) = changes.streams.get(&stream) {
                put(&mut self.streams, &stream.to_be_bytes(), &row.encode())?;
            }
        }
        Ok(())
    }
}
