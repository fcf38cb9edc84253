//! Streams in the simulation: appends (a few per submission, as a stream's shell submits a
//! command's appends) and retention's truncations, and after each restart:
//! - every acknowledged record not acknowledged truncated is there with its body (the shared
//!   model: `Key::Stream`), and nothing acknowledged truncated comes back;
//! - a truncation whose commit was not acknowledged is there whole or not at all;
//! - each stream's index counts exactly what its log holds;
//! - the offset the restart appends at is above every offset an acknowledged append took
//!   (even one truncated since) and every offset on disk: none is given twice.

use std::collections::BTreeMap;

use dwellmq_core::stream::ReadRequest;
use dwellmq_store::Op;

use super::check::body_of;
use super::{expect, Expect, Key, Sim};

/// The streams' ids (apart from the queues': their logs live in their own tables anyway).
pub(super) const STREAM_IDS: [u64; 2] = [7, 8];

/// Offsets per index entry (chunk) and per segment: truncations cut at segment starts, as
/// retention does, or at the end of the log.
const CHUNK: u64 = 4;
const SEGMENT: u64 = 16;

#[derive(Debug, Default)]
pub(super) struct Streams {
    /// The offset each stream's next append takes (the broker's in-memory count: never
    /// lowered while it runs, taken from the store at a restart).
    next: BTreeMap<u64, u64>,
    /// Above every offset an acknowledged append took, truncated since or not.
    acked_next: BTreeMap<u64, u64>,
    /// Where each stream's acknowledged truncations cut.
    cut: BTreeMap<u64, u64>,
    /// Where each stream's last truncation asked to cut (acknowledged or not): a segment and a
    /// chunk start there, as core starts a segment at a cut (no index entry straddles one).
    last_cut: BTreeMap<u64, u64>,
    /// Truncations not acknowledged since the last restart: (stream, cut, the offsets below
    /// it that were surely there).
    unsure: Vec<(u64, u64, Vec<u64>)>,
}

impl Sim {
    pub(super) fn stream_append(&mut self) {
        let stream = STREAM_IDS[self.rng.below(STREAM_IDS.len() as u64) as usize];
        let mut ops = Vec::new();
        let mut appended = Vec::new();
        for _ in 0..1 + self.rng.below(4) {
            let next = self.streams.next.entry(stream).or_default();
            let offset = *next;
            *next += 1;
            let seq = self.next_seq;
            self.next_seq += 1;
            let body = self.body(seq);
            let start = self.streams.last_cut.get(&stream).copied().unwrap_or(0);
            ops.push(Op::StreamAppend {
                stream,
                offset,
                timestamp_ms: offset,
                segment: (offset / SEGMENT * SEGMENT).max(start),
                chunk: (offset / CHUNK * CHUNK).max(start),
                message: Self::payload(&body),
            });
            appended.push((offset, body));
        }
        let ok = self.commit(vec![ops]);
        for (offset, body) in appended {
            if ok {
                let acked = self.streams.acked_next.entry(stream).or_default();
                *acked = (*acked).max(offset + 1);
            }
            self.records
                .insert(Key::Stream(stream, offset), expect(ok, body));
        }
    }

    pub(super) fn stream_truncate(&mut self) {
        let stream = STREAM_IDS[self.rng.below(STREAM_IDS.len() as u64) as usize];
        let cut = self.streams.cut.get(&stream).copied().unwrap_or(0);
        let next = self.streams.next.get(&stream).copied().unwrap_or(0);
        // A segment start, or now and then the whole log (core always keeps its last
        // segment, but the store must not lower the next offset whatever it is asked).
        let segments = (next / SEGMENT).saturating_sub(cut / SEGMENT);
        let before = if next > cut && (segments == 0 || self.rng.chance(25)) {
            next
        } else if segments > 0 {
            (cut / SEGMENT + 1 + self.rng.below(segments)) * SEGMENT
        } else {
            return;
        };
        self.streams.last_cut.insert(stream, before);
        let below: Vec<(Key, Expect)> = self
            .records
            .range(Key::Stream(stream, 0)..Key::Stream(stream, before))
            .map(|(k, e)| (*k, e.clone()))
            .collect();
        let ok = self.commit(vec![vec![Op::StreamTruncate {
            stream,
            before_offset: before,
        }]]);
        if ok {
            self.streams.cut.insert(stream, before);
            for (key, _) in below {
                self.records.insert(key, Expect::Gone);
            }
            return;
        }
        // Carried into the next commit, unless the power goes first: whole or not at all.
        let mut surely = Vec::new();
        for (key, expect) in below {
            match (key, expect) {
                (Key::Stream(_, offset), Expect::Must(body)) => {
                    surely.push(offset);
                    self.records.insert(key, Expect::May(body));
                }
                (_, Expect::May(_) | Expect::Gone) => {}
                _ => unreachable!("a stream's range holds its records only"),
            }
        }
        self.streams.unsure.push((stream, before, surely));
    }

    /// After a restart: reads every stream's log into `on_disk` (for the shared checks) and
    /// checks its index, its truncations and the offset it appends at next.
    pub(super) fn check_streams(&mut self, on_disk: &mut BTreeMap<Key, Vec<u8>>) {
        let cut = format!("seed {} power cut {}", self.seed, self.report.power_cuts);
        let snapshot = self.store().snapshot().expect("a snapshot after opening");
        for stream in STREAM_IDS {
            let log = snapshot.stream_log(stream).expect("the index reads");
            let mut from = 0;
            let (mut records, mut bytes) = (0u64, 0u64);
            let mut offsets = Vec::new();
            loop {
                let read = snapshot
                    .stream_read(
                        stream,
                        &ReadRequest {
                            read_id: 0,
                            consumer_id: 0,
                            from_offset: from,
                            end_offset: u64::MAX,
                            limit: usize::MAX,
                            max_bytes: u64::MAX,
                            not_before_ms: None,
                        },
                    )
                    .expect("the log reads");
                for record in &read.records {
                    records += 1;
                    offsets.push(record.offset);
                    self.report.stream_records += 1;
                    bytes += record.bytes();
                    assert!(
                        record.offset < log.next_offset,
                        "{cut}: stream {stream} holds {} at or past its next offset {}",
                        record.offset,
                        log.next_offset
                    );
                    on_disk.insert(Key::Stream(stream, record.offset), body_of(&record.message));
                }
                if read.next_offset == u64::MAX || read.records.is_empty() {
                    break;
                }
                from = read.next_offset;
            }
            let indexed = log
                .chunks
                .iter()
                .fold((0, 0), |(c, b), chunk| (c + chunk.count, b + chunk.bytes));
            assert_eq!(
                indexed,
                (records, bytes),
                "{cut}: stream {stream}'s index counts what its log holds: index {:?}, log {offsets:?}",
                log.chunks
            );
            let acked = self.streams.acked_next.get(&stream).copied().unwrap_or(0);
            assert!(
                log.next_offset >= acked,
                "{cut}: stream {stream} would append at {} again (acknowledged up to {acked})",
                log.next_offset
            );
            self.streams.next.insert(stream, log.next_offset);
            // A cut the power took back (the next offset is below it) starts no chunk: the
            // next append goes on from where the log is.
            if let Some(start) = self.streams.last_cut.get_mut(&stream) {
                *start = (*start).min(log.next_offset);
            }
        }
        for (stream, before, surely) in std::mem::take(&mut self.streams.unsure) {
            let left = surely
                .iter()
                .filter(|&&o| on_disk.contains_key(&Key::Stream(stream, o)))
                .count();
            assert!(
                left == 0 || left == surely.len(),
                "{cut}: stream {stream}'s truncation before {before} is there in part \
                 ({left} of {} records left)",
                surely.len()
            );
            if left == 0 && !surely.is_empty() {
                let cut = self.streams.cut.entry(stream).or_default();
                *cut = (*cut).max(before);
            }
        }
    }
}
