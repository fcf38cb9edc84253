//! Reading streams (format 5): what a restart needs of a log without reading a message, and
//! the reads of a consumer's window.

use dwellmq_core::stream::{ReadRequest, ReadResult, StoredLog, StreamRecord};

use super::Snapshot;
use crate::error::Result;
use crate::layout::{pair, split_pair, STREAMS, STREAM_INDEX, STREAM_LOG};
use crate::stream_records::{decode_log_value, ChunkRow, StreamRow, LOG_HEADER};

/// Records a read looks at at most, those skipped by time included: a read that skips a long
/// stretch stops here and says where, and the stream asks for the next one.
pub const STREAM_SCAN_LIMIT: usize = 65_536;

impl Snapshot {
    /// A stream's log as a restart needs it: its index entries and where appending goes on
    /// (above every offset ever committed, even those retention dropped since). Reads its
    /// row, its index and one key; no message.
    pub fn stream_log(&self, stream: u64) -> Result<StoredLog> {
        let row = match self
            .table(STREAMS)?
            .get(&stream.to_be_bytes()[..])
            .map_err(|e| self.damaged(e))?
        {
            None => StreamRow::default(),
            Some(v) => StreamRow::decode(v.value())
                .ok_or_else(|| self.corrupt("streams", &stream.to_be_bytes()))?,
        };
        let index = self.table(STREAM_INDEX)?;
        let mut chunks = Vec::new();
        for entry in self.positions_from(&index, stream, row.first_offset)? {
            let (key, value) = entry.map_err(|e| self.damaged(e))?;
            let (_, first_offset) =
                split_pair(key.value()).ok_or_else(|| self.corrupt("stream_index", key.value()))?;
            let chunk = ChunkRow::decode(value.value())
                .ok_or_else(|| self.corrupt("stream_index", key.value()))?;
            chunks.push(chunk.stored(first_offset));
        }
        let log = self.table(STREAM_LOG)?;
        let last = self
            .positions_from(&log, stream, 0)?
            .next_back()
            .transpose()
            .map_err(|e| self.damaged(e))?;
        let after_last = match last {
            None => 0,
            Some((key, _)) => {
                let (_, offset) = split_pair(key.value())
                    .ok_or_else(|| self.corrupt("stream_log", key.value()))?;
                offset + 1
            }
        };
        let after_chunks = chunks.iter().map(|c| c.end_offset).max().unwrap_or(0);
        Ok(StoredLog {
            next_offset: row.next_offset.max(after_last).max(after_chunks),
            chunks,
        })
    }

    /// A read of a stream's log for a consumer (core's `StreamEffect::Read`): the committed
    /// records from `from_offset` up to `end_offset`, in offset order, skipping those older
    /// than `not_before_ms`, up to `limit` records or `max_bytes` record octets (at least one
    /// record), looking at [`STREAM_SCAN_LIMIT`] records at most. A record that does not decode
    /// is skipped (and logged): a damaged record must not stop its consumers for good.
    pub fn stream_read(&self, stream: u64, request: &ReadRequest) -> Result<ReadResult> {
        let mut result = ReadResult::empty(request, request.end_offset);
        if request.from_offset >= request.end_offset {
            return Ok(result);
        }
        let log = self.table(STREAM_LOG)?;
        let (from, to) = (
            pair(stream, request.from_offset),
            pair(stream, request.end_offset),
        );
        let mut bytes = 0u64;
        let range = log
            .range::<&[u8]>(&from[..]..&to[..])
            .map_err(|e| self.damaged(e))?;
        for (scanned, entry) in range.enumerate() {
            let (key, value) = entry.map_err(|e| self.damaged(e))?;
            let Some((_, offset)) = split_pair(key.value()) else {
                return Err(self.corrupt("stream_log", key.value()));
            };
            let full = result.records.len() >= request.limit
                || (bytes >= request.max_bytes && !result.records.is_empty());
            if full || scanned >= STREAM_SCAN_LIMIT {
                result.next_offset = offset;
                return Ok(result);
            }
            let value = value.value();
            if let Some(at) = request.not_before_ms {
                let timestamp = value.get(..LOG_HEADER).and_then(|t| t.try_into().ok());
                if timestamp.map(u64::from_be_bytes).is_some_and(|t| t < at) {
                    continue;
                }
            }
            let Some((timestamp_ms, message)) = decode_log_value(value) else {
                tracing::warn!(stream, offset, "a stream record does not decode; skipped");
                continue;
            };
            bytes += value.len() as u64;
            result.records.push(StreamRecord {
                offset,
                timestamp_ms,
                message,
            });
        }
        Ok(result)
    }
}
