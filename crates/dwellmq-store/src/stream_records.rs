//! The records of the stream tables (format 5), byte by byte (DESIGN.md, "Streams"):
//!
//! | table | key | value |
//! | --- | --- | --- |
//! | `streams` | `u64 stream` | `u64 next offset ‖ u64 first offset` |
//! | `stream_index` | `u64 stream ‖ u64 chunk first offset` | `u64 segment ‖ u64 end offset ‖ u64 count ‖ u64 octets ‖ u64 first ts ‖ u64 last ts` |
//! | `stream_log` | `u64 stream ‖ u64 offset` | `u64 timestamp ms ‖ packed message` |

use dwellmq_core::stream::{StoredChunk, RECORD_OVERHEAD};
use dwellmq_core::PackedMessage;

/// A `streams` value's length.
pub(crate) const STREAM_ROW: usize = 16;
/// A `stream_index` value's length.
pub(crate) const CHUNK_ROW: usize = 48;
/// The header of a `stream_log` value: its timestamp.
pub(crate) const LOG_HEADER: usize = RECORD_OVERHEAD as usize;

/// A stream's row: where appending goes on (above every offset ever committed, only raised)
/// and where retention cut the log (only raised; no record below it is kept).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StreamRow {
    pub(crate) next_offset: u64,
    pub(crate) first_offset: u64,
}

impl StreamRow {
    pub(crate) fn encode(&self) -> [u8; STREAM_ROW] {
        let mut v = [0u8; STREAM_ROW];
        v[..8].copy_from_slice(&self.next_offset.to_be_bytes());
        v[8..].copy_from_slice(&self.first_offset.to_be_bytes());
        v
    }

    pub(crate) fn decode(value: &[u8]) -> Option<StreamRow> {
        if value.len() != STREAM_ROW {
            return None;
        }
        Some(StreamRow {
            next_offset: u64_at(value, 0)?,
            first_offset: u64_at(value, 8)?,
        })
    }
}

/// A chunk's row (the key names the stream and the chunk's first offset).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ChunkRow {
    pub(crate) segment: u64,
    pub(crate) end_offset: u64,
    pub(crate) count: u64,
    pub(crate) bytes: u64,
    pub(crate) first_ts: u64,
    pub(crate) last_ts: u64,
}

impl ChunkRow {
    pub(crate) fn encode(&self) -> [u8; CHUNK_ROW] {
        let mut v = [0u8; CHUNK_ROW];
        for (i, n) in [
            self.segment,
            self.end_offset,
            self.count,
            self.bytes,
            self.first_ts,
            self.last_ts,
        ]
        .into_iter()
        .enumerate()
        {
            v[i * 8..i * 8 + 8].copy_from_slice(&n.to_be_bytes());
        }
        v
    }

    pub(crate) fn decode(value: &[u8]) -> Option<ChunkRow> {
        if value.len() != CHUNK_ROW {
            return None;
        }
        Some(ChunkRow {
            segment: u64_at(value, 0)?,
            end_offset: u64_at(value, 8)?,
            count: u64_at(value, 16)?,
            bytes: u64_at(value, 24)?,
            first_ts: u64_at(value, 32)?,
            last_ts: u64_at(value, 40)?,
        })
    }

    /// Counts a record of `bytes` octets at `offset`, stored at `timestamp_ms`.
    pub(crate) fn add(&mut self, offset: u64, bytes: u64, timestamp_ms: u64) {
        if self.count == 0 {
            self.first_ts = timestamp_ms;
        }
        self.count += 1;
        self.bytes += bytes;
        self.end_offset = self.end_offset.max(offset + 1);
        self.last_ts = self.last_ts.max(timestamp_ms);
    }

    /// The index entry core restores from it.
    pub(crate) fn stored(&self, first_offset: u64) -> StoredChunk {
        StoredChunk {
            segment: self.segment,
            first_offset,
            end_offset: self.end_offset,
            count: self.count,
            bytes: self.bytes,
            first_ts: self.first_ts,
            last_ts: self.last_ts,
        }
    }
}

/// A `stream_log` value: (timestamp, packed message); `None` if malformed.
pub(crate) fn decode_log_value(value: &[u8]) -> Option<(u64, PackedMessage)> {
    let timestamp = u64_at(value, 0)?;
    let packed = PackedMessage::from_boxed(value.get(LOG_HEADER..)?.into())?;
    Some((timestamp, packed))
}

fn u64_at(value: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip() {
        let row = StreamRow {
            next_offset: 7,
            first_offset: 3,
        };
        assert_eq!(StreamRow::decode(&row.encode()), Some(row));
        let chunk = ChunkRow {
            segment: 1,
            end_offset: 2,
            count: 3,
            bytes: 4,
            first_ts: 5,
            last_ts: 6,
        };
        assert_eq!(ChunkRow::decode(&chunk.encode()), Some(chunk));
        assert_eq!(ChunkRow::decode(&chunk.encode()[1..]), None);
    }
}
