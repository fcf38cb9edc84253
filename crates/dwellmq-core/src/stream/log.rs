//! A stream's log as the state machine keeps it in memory: no message, only its segments and
//! a few index entries (chunks) per segment, so memory stays flat however long the log.
//!
//! A **segment** is the unit of retention: appends go to the last one until it holds
//! `max_segment_bytes`, then a new one starts; retention drops whole segments from the head,
//! never the last. A **chunk** is an index entry inside a segment, started every
//! `max_segment_bytes / 16` octets: its first offset and first timestamp let a consumer that
//! starts at a time find where to read from.

use std::collections::VecDeque;

use super::read::StoredLog;

/// An index entry: where a chunk starts and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Chunk {
    pub(super) first_offset: u64,
    pub(super) first_ts: u64,
}

/// One segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Segment {
    pub(super) first_offset: u64,
    /// The offset after its last appended record.
    pub(super) end_offset: u64,
    /// Records it holds or will hold (appended, and not failed).
    pub(super) count: u64,
    /// Of those, appended and not settled (their commit is not known yet).
    pub(super) pending: u64,
    /// Their octets.
    pub(super) bytes: u64,
    /// The timestamp of its newest record.
    pub(super) last_ts: u64,
    pub(super) chunks: Vec<Chunk>,
    /// Octets of its last chunk.
    chunk_bytes: u64,
}

/// Where an append went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Placement {
    pub(super) offset: u64,
    pub(super) timestamp_ms: u64,
    pub(super) segment: u64,
    pub(super) chunk: u64,
    /// It started a new segment after another: retention is evaluated.
    pub(super) rolled: bool,
}

/// The log's bookkeeping.
#[derive(Debug, Clone, Default)]
pub(super) struct LogIndex {
    segments: VecDeque<Segment>,
    next_offset: u64,
    /// Timestamps never go back, so that the first message at or after a time is found by
    /// the index.
    last_ts: u64,
    bytes: u64,
}

impl LogIndex {
    /// A log rebuilt from what the store holds.
    pub(super) fn restored(stored: &StoredLog) -> LogIndex {
        let mut log = LogIndex {
            next_offset: stored.next_offset,
            ..LogIndex::default()
        };
        for c in &stored.chunks {
            if log.segments.back().map(|s| s.first_offset) != Some(c.segment) {
                log.segments.push_back(Segment {
                    first_offset: c.segment,
                    end_offset: c.segment,
                    count: 0,
                    pending: 0,
                    bytes: 0,
                    last_ts: 0,
                    chunks: Vec::new(),
                    chunk_bytes: 0,
                });
            }
            if let Some(s) = log.segments.back_mut() {
                s.end_offset = s.end_offset.max(c.end_offset);
                s.count += c.count;
                s.bytes += c.bytes;
                s.last_ts = s.last_ts.max(c.last_ts);
                s.chunks.push(Chunk {
                    first_offset: c.first_offset,
                    first_ts: c.first_ts,
                });
                s.chunk_bytes = c.bytes;
            }
            log.bytes += c.bytes;
            log.last_ts = log.last_ts.max(c.last_ts);
            log.next_offset = log.next_offset.max(c.end_offset);
        }
        log
    }

    /// The offset the next append takes.
    pub(super) fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// The first offset the log holds (the next offset when it holds none).
    pub(super) fn first_offset(&self) -> u64 {
        self.segments
            .front()
            .map_or(self.next_offset, |s| s.first_offset)
    }

    /// Records held, committed or not.
    #[cfg(test)]
    pub(super) fn count(&self) -> u64 {
        self.segments.iter().map(|s| s.count).sum()
    }

    /// Records held and committed.
    pub(super) fn committed_count(&self) -> u64 {
        self.segments.iter().map(|s| s.count - s.pending).sum()
    }

    /// Octets held.
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(super) fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.iter()
    }

    /// Appends a record of `bytes` octets at `now_ms`.
    pub(super) fn append(
        &mut self,
        now_ms: u64,
        bytes: u64,
        max_segment_bytes: u64,
        chunk_bytes: u64,
    ) -> Placement {
        let offset = self.next_offset;
        let timestamp_ms = now_ms.max(self.last_ts);
        let full = self
            .segments
            .back()
            .is_none_or(|s| s.bytes >= max_segment_bytes && s.count > 0);
        let rolled = full && !self.segments.is_empty();
        if full {
            self.segments.push_back(Segment {
                first_offset: offset,
                end_offset: offset,
                count: 0,
                pending: 0,
                bytes: 0,
                last_ts: timestamp_ms,
                chunks: Vec::new(),
                chunk_bytes: 0,
            });
        }
        let Some(segment) = self.segments.back_mut() else {
            unreachable!("a segment was just ensured");
        };
        if segment.chunks.is_empty() || segment.chunk_bytes >= chunk_bytes {
            segment.chunks.push(Chunk {
                first_offset: offset,
                first_ts: timestamp_ms,
            });
            segment.chunk_bytes = 0;
        }
        segment.chunk_bytes += bytes;
        segment.end_offset = offset + 1;
        segment.count += 1;
        segment.pending += 1;
        segment.bytes += bytes;
        segment.last_ts = timestamp_ms;
        let placement = Placement {
            offset,
            timestamp_ms,
            segment: segment.first_offset,
            chunk: segment.chunks.last().map_or(offset, |c| c.first_offset),
            rolled,
        };
        self.next_offset = offset + 1;
        self.last_ts = timestamp_ms;
        self.bytes += bytes;
        placement
    }

    fn segment_of_mut(&mut self, offset: u64) -> Option<&mut Segment> {
        let after = self.segments.partition_point(|s| s.first_offset <= offset);
        let segment = self.segments.get_mut(after.checked_sub(1)?)?;
        (offset < segment.end_offset).then_some(segment)
    }

    /// The append at `offset` is settled: committed, or failed (it is not in the store).
    pub(super) fn settle(&mut self, offset: u64, bytes: u64, committed: bool) {
        let Some(segment) = self.segment_of_mut(offset) else {
            // Its segment was dropped meanwhile.
            return;
        };
        segment.pending = segment.pending.saturating_sub(1);
        if !committed {
            segment.count = segment.count.saturating_sub(1);
            segment.bytes = segment.bytes.saturating_sub(bytes);
            self.bytes = self.bytes.saturating_sub(bytes);
        }
    }

    /// Where whole segments should go from the head, by `max_bytes` and by `max_age_ms` at
    /// `now_ms` (the last segment always stays): the first offset to keep, or `None`.
    pub(super) fn retention_cut(
        &self,
        max_bytes: Option<u64>,
        max_age_ms: Option<u64>,
        now_ms: u64,
    ) -> Option<u64> {
        let droppable = self.segments.len().saturating_sub(1);
        let mut drop = 0;
        if let Some(max) = max_bytes {
            let mut total = self.bytes;
            while drop < droppable && total > max {
                total -= self.segments[drop].bytes;
                drop += 1;
            }
        }
        if let Some(age) = max_age_ms {
            let oldest_kept = now_ms.saturating_sub(age);
            let by_age = self
                .segments
                .iter()
                .take(droppable)
                .take_while(|s| s.last_ts < oldest_kept)
                .count();
            drop = drop.max(by_age);
        }
        (drop > 0).then(|| self.segments[drop].first_offset)
    }

    /// Drops the segments before `offset` (a segment's first offset); returns how many records
    /// went, committed or not.
    pub(super) fn drop_before(&mut self, offset: u64) -> u64 {
        let mut dropped = 0;
        while self.segments.len() > 1 && self.segments[0].first_offset < offset {
            if let Some(s) = self.segments.pop_front() {
                dropped += s.count;
                self.bytes = self.bytes.saturating_sub(s.bytes);
            }
        }
        dropped
    }

    /// When the head segment falls out of `max_age_ms` (if it is not the last).
    pub(super) fn next_age_cut(&self, max_age_ms: u64) -> Option<u64> {
        if self.segments.len() < 2 {
            return None;
        }
        let head = self.segments.front()?;
        Some(head.last_ts.saturating_add(max_age_ms).saturating_add(1))
    }

    /// Where a consumer starting at time `at_ms` reads from: the index entry before the first
    /// message at or after it (that entry may start earlier: the reader skips what is older).
    pub(super) fn start_for_timestamp(&self, at_ms: u64) -> u64 {
        let mut start = self.first_offset();
        for segment in &self.segments {
            match segment.chunks.first() {
                Some(first) if first.first_ts < at_ms => {}
                _ => break,
            }
            let within = segment.chunks.partition_point(|c| c.first_ts < at_ms);
            if let Some(chunk) = within.checked_sub(1).and_then(|i| segment.chunks.get(i)) {
                start = chunk.first_offset;
            }
        }
        start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::read::StoredChunk;

    #[test]
    fn segments_roll_and_chunks_index_them() {
        let mut log = LogIndex::default();
        let mut rolled = 0;
        for i in 0..10u64 {
            let p = log.append(1000 + i, 10, 30, 15);
            assert_eq!(p.offset, i);
            rolled += u64::from(p.rolled);
        }
        // 10-octet records in 30-octet segments: 3 per segment (the fourth starts a new one).
        let firsts: Vec<u64> = log.segments().map(|s| s.first_offset).collect();
        assert_eq!(firsts, [0, 3, 6, 9]);
        assert_eq!(rolled, 3);
        let chunks: Vec<u64> = log.segments[0]
            .chunks
            .iter()
            .map(|c| c.first_offset)
            .collect();
        assert_eq!(chunks, [0, 2]);
        // The chunk that may hold the first record at or after the time (timestamps can repeat
        // across a chunk boundary, so not the chunk starting at it).
        assert_eq!(log.start_for_timestamp(1004), 3);
        assert_eq!(log.start_for_timestamp(1005), 3);
        assert_eq!(log.start_for_timestamp(1006), 5);
        assert_eq!(log.start_for_timestamp(0), 0);
        assert_eq!(log.start_for_timestamp(u64::MAX), 9);
    }

    #[test]
    fn timestamps_never_go_back() {
        let mut log = LogIndex::default();
        assert_eq!(log.append(500, 1, 100, 10).timestamp_ms, 500);
        assert_eq!(log.append(400, 1, 100, 10).timestamp_ms, 500);
    }

    #[test]
    fn retention_keeps_the_last_segment() {
        let mut log = LogIndex::default();
        for i in 0..9u64 {
            log.append(i * 1000, 10, 30, 30);
        }
        assert_eq!(log.retention_cut(Some(60), None, 0), Some(3));
        assert_eq!(log.retention_cut(Some(0), None, 0), Some(6));
        // Segment 0's newest record is at 2 s, segment 1's at 5 s.
        assert_eq!(log.retention_cut(None, Some(1000), 4_000), Some(3));
        assert_eq!(log.retention_cut(None, Some(1000), 100_000), Some(6));
        assert_eq!(log.next_age_cut(1000), Some(3_001));
        assert_eq!(log.drop_before(6), 6);
        assert_eq!((log.first_offset(), log.count(), log.bytes()), (6, 3, 30));
        assert_eq!(log.retention_cut(Some(0), Some(0), u64::MAX), None);
    }

    #[test]
    fn a_failed_append_is_not_counted() {
        let mut log = LogIndex::default();
        log.append(0, 10, 100, 100);
        log.append(0, 20, 100, 100);
        log.settle(0, 10, true);
        log.settle(1, 20, false);
        assert_eq!(
            (log.count(), log.committed_count(), log.bytes()),
            (1, 1, 10)
        );
    }

    #[test]
    fn a_restored_log_goes_on_where_it_stopped() {
        let stored = StoredLog {
            next_offset: 12,
            chunks: vec![
                StoredChunk {
                    segment: 4,
                    first_offset: 4,
                    end_offset: 6,
                    count: 2,
                    bytes: 20,
                    first_ts: 10,
                    last_ts: 11,
                },
                StoredChunk {
                    segment: 7,
                    first_offset: 7,
                    end_offset: 9,
                    count: 1,
                    bytes: 10,
                    first_ts: 12,
                    last_ts: 12,
                },
            ],
        };
        let mut log = LogIndex::restored(&stored);
        assert_eq!((log.first_offset(), log.next_offset()), (4, 12));
        assert_eq!(
            (log.count(), log.committed_count(), log.bytes()),
            (3, 3, 30)
        );
        assert_eq!(log.append(5, 1, 1000, 1000).timestamp_ms, 12);
    }
}
