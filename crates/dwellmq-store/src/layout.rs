//! The tables and their keys; DESIGN.md is the reference, byte by byte.

use redb::TableDefinition;

use crate::codec::Enc;

/// The format this build writes and reads (`meta["format"]`).
pub const FORMAT_VERSION: u32 = 5;
/// What `meta["app"]` holds in every dwellmq store.
pub(crate) const APP: &[u8] = b"dwellmq";

/// The store file's name inside the data directory.
pub const DB_FILE: &str = "dwellmq.redb";
/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = "LOCK";

pub(crate) type Bin = TableDefinition<'static, &'static [u8], &'static [u8]>;

pub(crate) const META: Bin = TableDefinition::new("meta");
pub(crate) const VHOSTS: Bin = TableDefinition::new("vhosts");
pub(crate) const USERS: Bin = TableDefinition::new("users");
pub(crate) const PERMISSIONS: Bin = TableDefinition::new("permissions");
pub(crate) const EXCHANGES: Bin = TableDefinition::new("exchanges");
pub(crate) const QUEUES: Bin = TableDefinition::new("queues");
pub(crate) const BINDINGS: Bin = TableDefinition::new("bindings");
pub(crate) const POLICIES: Bin = TableDefinition::new("policies");
pub(crate) const MESSAGES: Bin = TableDefinition::new("messages");
pub(crate) const MESSAGE_STATE: Bin = TableDefinition::new("message_state");
pub(crate) const DELAYED_EXCHANGES: Bin = TableDefinition::new("delayed_exchanges");
pub(crate) const HELD_DUE: Bin = TableDefinition::new("held_due");
pub(crate) const HELD_MESSAGES: Bin = TableDefinition::new("held_messages");
pub(crate) const QUEUE_COUNTS: Bin = TableDefinition::new("queue_counts");
/// Streams (format 5): one row per stream that ever appended (`streams`), its index entries
/// (`stream_index`) and its records (`stream_log`). See `stream_records.rs` and DESIGN.md.
pub(crate) const STREAMS: Bin = TableDefinition::new("streams");
pub(crate) const STREAM_INDEX: Bin = TableDefinition::new("stream_index");
pub(crate) const STREAM_LOG: Bin = TableDefinition::new("stream_log");
/// Transient messages a queue under memory pressure left on disk: dropped whole when the
/// store opens, so nothing of it survives a restart (not in [`ALL_TABLES`]: the opening
/// creates it every time).
pub(crate) const SPILLED: Bin = TableDefinition::new("spilled_messages");

/// Every table, so that a fresh store has all of them and a read never meets a missing one.
pub(crate) const ALL_TABLES: [Bin; 17] = [
    META,
    VHOSTS,
    USERS,
    PERMISSIONS,
    EXCHANGES,
    QUEUES,
    BINDINGS,
    POLICIES,
    MESSAGES,
    MESSAGE_STATE,
    DELAYED_EXCHANGES,
    HELD_DUE,
    HELD_MESSAGES,
    QUEUE_COUNTS,
    STREAMS,
    STREAM_INDEX,
    STREAM_LOG,
];

pub(crate) const META_APP: &[u8] = b"app";
pub(crate) const META_FORMAT: &[u8] = b"format";
pub(crate) const META_NEXT_DELAYED_SEQ: &[u8] = b"next_delayed_seq";
pub(crate) const META_NEXT_QUEUE_ID: &[u8] = b"next_queue_id";
pub(crate) const META_NEXT_DELAYED_EXCHANGE: &[u8] = b"next_delayed_exchange";

/// `messages` and `message_state`: queue id, then sequence number.
pub(crate) fn message_key(queue: u64, seq: u64) -> [u8; 16] {
    pair(queue, seq)
}

/// The widest due-time bucket of `held_due`: 2^26 ms, about 18.6 hours.
pub(crate) const MAX_BUCKET_SHIFT: u8 = 26;

/// How finely a hold's due time is bucketed in `held_due`: a bucket spans about 1/16 to 1/32
/// of the time from its hold to its due time (1 ms at the least, [`MAX_BUCKET_SHIFT`] at the
/// most). Holds arriving together land at the tails of few buckets (appends, not random
/// inserts), and a bucket that falls due soon is narrow, so reading one is cheap.
pub(crate) fn bucket_shift(held_at_ms: u64, due_ms: u64) -> u8 {
    let distance = due_ms.saturating_sub(held_at_ms).max(1);
    (distance.ilog2().saturating_sub(4) as u8).min(MAX_BUCKET_SHIFT)
}

/// A `held_due` key: `u32 exchange number ‖ u64 bucket start ms ‖ u8 shift ‖ u64 first seq`
/// (21 octets). The bucket is a due time with its low `shift` bits cleared. One key is one
/// record: the holds of one commit that fell into that bucket, named by the lowest seq among
/// them. Within a bucket records run in first-seq order, which is commit order: a commit
/// appends one record to each bucket it touches.
pub(crate) fn held_due_key(exchange: u32, start_ms: u64, shift: u8, first_seq: u64) -> [u8; 21] {
    let mut key = [0u8; 21];
    key[..4].copy_from_slice(&exchange.to_be_bytes());
    key[4..12].copy_from_slice(&start_ms.to_be_bytes());
    key[12] = shift;
    key[13..].copy_from_slice(&first_seq.to_be_bytes());
    key
}

/// The start of the bucket of width `2^shift` that `due_ms` falls into.
pub(crate) fn bucket_start(due_ms: u64, shift: u8) -> u64 {
    due_ms >> shift << shift
}

/// The first `held_due` key of exchange `exchange` whose bucket starts at `start_ms` or later.
pub(crate) fn held_due_from(exchange: u32, start_ms: u64) -> [u8; 21] {
    let mut key = [0u8; 21];
    key[..4].copy_from_slice(&exchange.to_be_bytes());
    key[4..12].copy_from_slice(&start_ms.to_be_bytes());
    key
}

/// The first `held_due` key after every key of exchange `exchange` (`None`: it is the last
/// number).
pub(crate) fn held_due_end(exchange: u32) -> Option<[u8; 21]> {
    exchange.checked_add(1).map(|next| held_due_from(next, 0))
}

/// Octets of one entry of a `held_due` record: `u32 seq − first seq ‖ u32 due − bucket start`.
pub(crate) const HELD_DUE_ENTRY: usize = 8;

/// One `held_due` record, checked: every entry's due offset lies inside its bucket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldDueRecord<'a> {
    pub(crate) start_ms: u64,
    pub(crate) shift: u8,
    pub(crate) first_seq: u64,
    entries: &'a [u8],
}

impl<'a> HeldDueRecord<'a> {
    /// The record of exchange `exchange` under `key`; `None` for another exchange's key or a
    /// malformed record.
    pub(crate) fn split(exchange: u32, key: &[u8], value: &'a [u8]) -> Option<Self> {
        let rest = key.strip_prefix(&exchange.to_be_bytes()[..])?;
        if rest.len() != 17
            || rest[8] > MAX_BUCKET_SHIFT
            || !value.len().is_multiple_of(HELD_DUE_ENTRY)
        {
            return None;
        }
        let record = HeldDueRecord {
            start_ms: u64::from_be_bytes(rest[..8].try_into().ok()?),
            shift: rest[8],
            first_seq: u64::from_be_bytes(rest[9..].try_into().ok()?),
            entries: value,
        };
        let inside = record.raw().all(|(delta, offset)| {
            u64::from(offset) >> record.shift == 0
                && record.first_seq.checked_add(u64::from(delta)).is_some()
        });
        inside.then_some(record)
    }

    fn raw(&self) -> impl Iterator<Item = (u32, u32)> + 'a {
        self.entries.chunks_exact(HELD_DUE_ENTRY).map(|entry| {
            let mut delta = [0u8; 4];
            let mut offset = [0u8; 4];
            delta.copy_from_slice(&entry[..4]);
            offset.copy_from_slice(&entry[4..]);
            (u32::from_be_bytes(delta), u32::from_be_bytes(offset))
        })
    }

    /// Its holds as (seq, due ms), in the order they were written.
    pub(crate) fn holds(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let (first, start) = (self.first_seq, self.start_ms);
        self.raw()
            .map(move |(delta, offset)| (first + u64::from(delta), start + u64::from(offset)))
    }

    /// Whether it names the hold `seq`.
    pub(crate) fn names(&self, seq: u64) -> bool {
        let first = self.first_seq;
        seq.checked_sub(first)
            .and_then(|delta| u32::try_from(delta).ok())
            .is_some_and(|delta| self.raw().any(|(d, _)| d == delta))
    }

    /// Its entries without those whose seq `gone` picks (an empty record is deleted).
    pub(crate) fn without(&self, mut gone: impl FnMut(u64) -> bool) -> Vec<u8> {
        let first = self.first_seq;
        self.entries
            .chunks_exact(HELD_DUE_ENTRY)
            .zip(self.raw())
            .filter(|(_, (delta, _))| !gone(first + u64::from(*delta)))
            .flat_map(|(entry, _)| entry.iter().copied())
            .collect()
    }
}

/// Appends the entry of the hold `seq` due at `due_ms` to a record of bucket `start_ms` whose
/// first seq is `first_seq` (`seq − first_seq` must fit in `u32`).
pub(crate) fn push_held_due_entry(
    record: &mut Vec<u8>,
    first_seq: u64,
    start_ms: u64,
    seq: u64,
    due_ms: u64,
) {
    let delta = (seq - first_seq) as u32;
    let offset = (due_ms - start_ms) as u32;
    record.extend_from_slice(&delta.to_be_bytes());
    record.extend_from_slice(&offset.to_be_bytes());
}

pub(crate) fn pair(a: u64, b: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&a.to_be_bytes());
    key[8..].copy_from_slice(&b.to_be_bytes());
    key
}

pub(crate) fn split_pair(key: &[u8]) -> Option<(u64, u64)> {
    let a = u64::from_be_bytes(key.get(..8)?.try_into().ok()?);
    let b = u64::from_be_bytes(key.get(8..16)?.try_into().ok()?);
    (key.len() == 16).then_some((a, b))
}

/// A key made of a vhost and names: each component `u16` length then octets.
pub(crate) fn name_key(parts: &[&str]) -> Vec<u8> {
    parts.iter().fold(Enc::new(), |e, p| e.str16(p)).done()
}
