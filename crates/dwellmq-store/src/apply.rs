//! Applying a batch of ops inside one write transaction: `apply` dispatches each op to its
//! family's file (`definitions`, `messages`, `held` with its index in `held_index`, `stream`).

mod definitions;
mod held;
mod held_index;
mod messages;
mod stream;

use std::collections::BTreeMap;

use redb::{ReadableTable, Table, WriteTransaction};

use crate::layout::{
    BINDINGS, DELAYED_EXCHANGES, EXCHANGES, HELD_DUE, HELD_MESSAGES, MESSAGES, MESSAGE_STATE, META,
    META_NEXT_DELAYED_SEQ, META_NEXT_QUEUE_ID, PERMISSIONS, POLICIES, QUEUES, QUEUE_COUNTS,
    SPILLED, STREAMS, STREAM_INDEX, STREAM_LOG, USERS, VHOSTS,
};
use crate::ops::Op;
use crate::queue_counts::CountChanges;
use held::{BucketOf, HeldByRows};

type T<'t> = Table<'t, &'static [u8], &'static [u8]>;

/// The tables a batch writes, opened once per transaction.
pub(crate) struct Tables<'t> {
    meta: T<'t>,
    vhosts: T<'t>,
    users: T<'t>,
    permissions: T<'t>,
    exchanges: T<'t>,
    queues: T<'t>,
    bindings: T<'t>,
    policies: T<'t>,
    messages: T<'t>,
    state: T<'t>,
    delayed_exchanges: T<'t>,
    held_due: T<'t>,
    held_messages: T<'t>,
    queue_counts: T<'t>,
    spilled: T<'t>,
    streams: T<'t>,
    stream_index: T<'t>,
    stream_log: T<'t>,
    /// What this batch changes in `streams` and `stream_index`, written once before the commit.
    stream_changes: stream::StreamChanges,
    /// What this batch changes in `queue_counts`, written once before the commit.
    count_changes: CountChanges,
    /// The `delayed_exchanges` rows (by `str16 vhost ‖ str16 exchange`), read at the batch's
    /// first delayed op; holds and releases change them here, and the changed ones are written
    /// once per batch ([`Tables::finish_delayed`]), not once per op.
    held_by: Option<HeldByRows>,
    /// The `delayed_exchanges` key of the last hold (vhost, exchange, key): holds come in runs
    /// of one exchange, and the writer is their bottleneck.
    last_hold_name: Option<(String, String, Vec<u8>)>,
    /// This batch's holds by `held_due` bucket, (seq, due ms) each: written as one record per
    /// bucket when the batch ends ([`Tables::finish_delayed`]), so that a hold costs one
    /// B-tree insert (its body) and a commit one more per bucket it touches.
    held_buckets: BTreeMap<BucketOf, Vec<(u64, u64)>>,
    /// This batch's releases, each the bucket and seq of an index entry to take out of its
    /// record once the batch's records are written (so a record is rewritten once per batch).
    released: Vec<(BucketOf, u64)>,
    /// A hold's packed message, before its exchange name is left out (reused: no allocation
    /// per hold).
    packed: Vec<u8>,
}

impl<'t> Tables<'t> {
    pub(crate) fn open(tx: &'t WriteTransaction) -> Result<Self, redb::TableError> {
        Ok(Tables {
            meta: tx.open_table(META)?,
            vhosts: tx.open_table(VHOSTS)?,
            users: tx.open_table(USERS)?,
            permissions: tx.open_table(PERMISSIONS)?,
            exchanges: tx.open_table(EXCHANGES)?,
            queues: tx.open_table(QUEUES)?,
            bindings: tx.open_table(BINDINGS)?,
            policies: tx.open_table(POLICIES)?,
            messages: tx.open_table(MESSAGES)?,
            state: tx.open_table(MESSAGE_STATE)?,
            delayed_exchanges: tx.open_table(DELAYED_EXCHANGES)?,
            held_due: tx.open_table(HELD_DUE)?,
            held_messages: tx.open_table(HELD_MESSAGES)?,
            queue_counts: tx.open_table(QUEUE_COUNTS)?,
            spilled: tx.open_table(SPILLED)?,
            streams: tx.open_table(STREAMS)?,
            stream_index: tx.open_table(STREAM_INDEX)?,
            stream_log: tx.open_table(STREAM_LOG)?,
            stream_changes: Default::default(),
            count_changes: CountChanges::default(),
            held_by: None,
            last_hold_name: None,
            held_buckets: BTreeMap::new(),
            released: Vec::new(),
            packed: Vec::new(),
        })
    }

    /// Writes this batch's `queue_counts` changes (once per commit, before it).
    pub(crate) fn write_queue_counts(&mut self) -> Result<(), redb::StorageError> {
        self.count_changes.write(&mut self.queue_counts)
    }

    /// Raises the stored sequence counters to cover what this batch wrote.
    pub(crate) fn raise_counters(
        &mut self,
        next_delayed_seq: u64,
        next_queue_id: u64,
    ) -> Result<(), redb::StorageError> {
        for (key, value) in [
            (META_NEXT_DELAYED_SEQ, next_delayed_seq),
            (META_NEXT_QUEUE_ID, next_queue_id),
        ] {
            let stored = self
                .meta
                .get(key)?
                .and_then(|v| v.value().try_into().ok().map(u64::from_be_bytes))
                .unwrap_or(0);
            if value > stored {
                self.meta.insert(key, &value.to_be_bytes()[..])?;
            }
        }
        Ok(())
    }

    /// Applies one op of the batch (the writer gathers its `Forget`s for [`Tables::forget_all`]).
    pub(crate) fn apply(&mut self, op: &Op) -> Result<(), redb::StorageError> {
        match op {
            Op::PutVhost(v) => put(&mut self.vhosts, &v.key(), &v.value()),
            Op::DeleteVhost { name } => self.delete_vhost(name),
            Op::PutUser(u) => put(&mut self.users, &u.key(), &u.value()),
            Op::DeleteUser { name } => self.delete_user(name),
            Op::PutPermission(p) => put(&mut self.permissions, &p.key(), &p.value()),
            Op::DeletePermission { vhost, user } => self.delete_permission(vhost, user),
            Op::PutExchange(x) => put(&mut self.exchanges, &x.key(), &x.value()),
            Op::DeleteExchange { vhost, name } => self.delete_exchange(vhost, name),
            Op::PutQueue(q) => put(&mut self.queues, &q.key(), &q.value()),
            Op::DeleteQueue { vhost, name, id } => self.delete_queue(vhost, name, *id),
            Op::PutBinding(b) => put(&mut self.bindings, &b.key(), &[]),
            Op::DeleteBinding(b) => remove(&mut self.bindings, &b.key()),
            Op::PutPolicy(p) => put(&mut self.policies, &p.key(), &p.value()),
            Op::DeletePolicy { vhost, name } => self.delete_policy(vhost, name),
            Op::Persist {
                queue,
                seq,
                expires_at_ms,
                delivered,
                message,
            } => self.persist(*queue, *seq, *expires_at_ms, *delivered, message),
            Op::SetState { queue, seq, state } => self.set_state(*queue, *seq, state),
            Op::Forget { queue, seq } => self.forget(*queue, *seq),
            Op::ForgetRange {
                queue,
                from_seq,
                end_seq,
            } => self.forget_range(*queue, *from_seq, *end_seq),
            Op::Spill {
                spill,
                seq,
                expires_at_ms,
                message,
            } => self.spill(*spill, *seq, *expires_at_ms, message),
            Op::Unspill {
                spill,
                from_seq,
                end_seq,
            } => self.unspill(*spill, *from_seq, *end_seq),
            Op::Purge { queue } => self.purge(*queue),
            Op::Hold {
                id,
                held_at_ms,
                vhost,
                exchange,
                message,
            } => self.hold(*id, *held_at_ms, vhost, exchange, message),
            Op::Release { id } => self.release_held(id.due_ms, id.seq),
            Op::StreamAppend {
                stream,
                offset,
                timestamp_ms,
                segment,
                chunk,
                message,
            } => self.stream_append(*stream, *offset, *timestamp_ms, (*segment, *chunk), message),
            Op::StreamTruncate {
                stream,
                before_offset,
            } => self.stream_truncate(*stream, *before_offset),
        }
    }
}

fn put(table: &mut T<'_>, key: &[u8], value: &[u8]) -> Result<(), redb::StorageError> {
    table.insert(key, value).map(|_| ())
}

fn remove(table: &mut T<'_>, key: &[u8]) -> Result<(), redb::StorageError> {
    table.remove(key).map(|_| ())
}

/// The first key after every key starting with `prefix` (`None`: no such key).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
