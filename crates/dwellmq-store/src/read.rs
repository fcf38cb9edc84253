//! Reading what is committed: recovery at start, far-tier refills, bodies on demand (streams'
//! logs in `stream`).

mod stream;

pub use stream::STREAM_SCAN_LIMIT;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dwellmq_core::schedule::DeadlineId;
use redb::ReadableTableMetadata;
use redb::{Database, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable};

use crate::codec::hex;
use crate::codec::Dec;
use crate::error::{Result, StoreError};
use crate::layout::{
    held_due_end, held_due_from, name_key, pair, split_pair, Bin, HeldDueRecord, BINDINGS,
    DELAYED_EXCHANGES, EXCHANGES, HELD_DUE, HELD_MESSAGES, MAX_BUCKET_SHIFT, MESSAGES,
    MESSAGE_STATE, META, META_NEXT_DELAYED_SEQ, META_NEXT_QUEUE_ID, PERMISSIONS, POLICIES, QUEUES,
    QUEUE_COUNTS, SPILLED, USERS, VHOSTS,
};
use crate::open::DbSlot;
use crate::queue_counts::decode_count;
use crate::records::{
    decode_held_value, decode_message_value, BindingDef, Definitions, DelayedMessage,
    DeliveryState, ExchangeDef, HeldBy, HeldHeader, PermissionDef, PolicyDef, QueueDef,
    StoredMessage, UserDef, VhostDef,
};

type Table = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// A consistent read view of the store.
pub struct Snapshot {
    tx: ReadTransaction,
    path: PathBuf,
    /// The `delayed_exchanges` rows, read once per snapshot (every id lookup needs them).
    held_by: std::sync::OnceLock<Vec<(String, String, HeldBy)>>,
    // Keeps the handle open while the view is (the writer waits for it before reopening).
    _db: Arc<Database>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("path", &self.path)
            .finish()
    }
}

/// What the store holds of one durable queue, read without its messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStored {
    /// Its first stored position (0 when it holds none).
    pub first_seq: u64,
    /// How many messages (`messages` records) it holds.
    pub count: u64,
    /// Their body octets.
    pub bytes: u64,
}

/// What a broker needs at start, apart from message contents.
#[derive(Debug, Clone, Default)]
pub struct Recovery {
    /// Every durable definition.
    pub definitions: Definitions,
    /// For each durable queue (by id), the sequence number its next message must take.
    pub next_queue_seqs: Vec<(u64, u64)>,
    /// The scheduler's first free sequence number (above every stored delayed message).
    pub next_delayed_seq: u64,
    /// How many messages delayed exchanges hold.
    pub delayed_count: u64,
}

impl Snapshot {
    pub(crate) fn new(slot: &DbSlot, path: &Path) -> Result<Snapshot> {
        // No handle: the store is closed, or the writer could not reopen the file after a
        // write failure yet (it tries again with every batch).
        let db = slot.read().clone().ok_or(StoreError::Closed)?;
        let tx = db.begin_read().map_err(|e| match e {
            // A failed read left the handle refusing everything until the writer reopens the
            // file (the store asks it to).
            redb::TransactionError::Storage(redb::StorageError::PreviousIo) => StoreError::Closed,
            e => StoreError::Database {
                path: path.to_path_buf(),
                reason: e.to_string(),
            },
        })?;
        Ok(Snapshot {
            tx,
            path: path.to_path_buf(),
            held_by: std::sync::OnceLock::new(),
            _db: db,
        })
    }

    fn table(&self, def: Bin) -> Result<Table> {
        self.tx.open_table(def).map_err(|e| self.damaged(e))
    }

    fn damaged(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Damaged {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    fn corrupt(&self, table: &'static str, key: &[u8]) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            table,
            key: hex(key),
        }
    }

    /// Definitions, sequence counters and counts: everything a start needs before it accepts
    /// connections. Reads no message.
    pub fn recovery(&self) -> Result<Recovery> {
        let definitions = self.definitions()?;
        let next_queue_seqs = definitions
            .queues
            .iter()
            .map(|q| Ok((q.id, self.next_queue_seq(q.id)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Recovery {
            next_queue_seqs,
            next_delayed_seq: self.next_delayed_seq()?,
            delayed_count: self.delayed_count()?,
            definitions,
        })
    }

    /// Every durable definition.
    pub fn definitions(&self) -> Result<Definitions> {
        Ok(Definitions {
            vhosts: self.all(VHOSTS, "vhosts", VhostDef::decode)?,
            users: self.all(USERS, "users", UserDef::decode)?,
            permissions: self.all_if_present(PERMISSIONS, "permissions", PermissionDef::decode)?,
            exchanges: self.all(EXCHANGES, "exchanges", ExchangeDef::decode)?,
            queues: self.all(QUEUES, "queues", QueueDef::decode)?,
            bindings: self.all(BINDINGS, "bindings", |k, _| BindingDef::decode(k))?,
            policies: self.all(POLICIES, "policies", PolicyDef::decode)?,
        })
    }

    fn all<R>(
        &self,
        def: Bin,
        name: &'static str,
        decode: impl Fn(&[u8], &[u8]) -> Option<R>,
    ) -> Result<Vec<R>> {
        let table = self.table(def)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| self.damaged(e))? {
            let (k, v) = entry.map_err(|e| self.damaged(e))?;
            out.push(decode(k.value(), v.value()).ok_or_else(|| self.corrupt(name, k.value()))?);
        }
        Ok(out)
    }

    /// As `all`, for a table that a file written before the table existed lacks (nothing
    /// in it, then; the next write creates it).
    fn all_if_present<R>(
        &self,
        def: Bin,
        name: &'static str,
        decode: impl Fn(&[u8], &[u8]) -> Option<R>,
    ) -> Result<Vec<R>> {
        match self.tx.open_table(def) {
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(Vec::new()),
            _ => self.all(def, name, decode),
        }
    }

    fn meta_u64(&self, key: &[u8]) -> Result<u64> {
        let meta = self.table(META)?;
        let value = meta.get(key).map_err(|e| self.damaged(e))?;
        match value {
            None => Ok(0),
            Some(v) => v
                .value()
                .try_into()
                .map(u64::from_be_bytes)
                .map_err(|_| self.corrupt("meta", key)),
        }
    }

    /// The first queue id never used.
    pub fn next_queue_id(&self) -> Result<u64> {
        let stored = self.meta_u64(META_NEXT_QUEUE_ID)?;
        // Ids also appear in definitions; cover them whatever the counter says.
        let highest = self
            .all(QUEUES, "queues", QueueDef::decode)?
            .iter()
            .map(|q| q.id.saturating_add(1))
            .max()
            .unwrap_or(0);
        Ok(stored.max(highest).max(1))
    }

    /// The first sequence number above every stored delayed message.
    pub fn next_delayed_seq(&self) -> Result<u64> {
        self.meta_u64(META_NEXT_DELAYED_SEQ).map(|n| n.max(1))
    }

    /// The sequence number a queue's next message must take (above every stored one).
    pub fn next_queue_seq(&self, queue: u64) -> Result<u64> {
        let table = self.table(MESSAGES)?;
        let start = pair(queue, 0);
        let last = match queue.checked_add(1) {
            Some(next) => table.range(&start[..]..&pair(next, 0)[..]),
            None => table.range(&start[..]..),
        }
        .map_err(|e| self.damaged(e))?
        .next_back();
        match last {
            None => Ok(0),
            Some(entry) => {
                let (key, _) = entry.map_err(|e| self.damaged(e))?;
                let (_, seq) =
                    split_pair(key.value()).ok_or_else(|| self.corrupt("messages", key.value()))?;
                Ok(seq.saturating_add(1))
            }
        }
    }

    /// How many messages a queue holds, their body octets and its first position: one
    /// `queue_counts` row and one key, whatever the queue's length.
    pub fn queue_stored(&self, queue: u64) -> Result<QueueStored> {
        let key = queue.to_be_bytes();
        let (count, bytes) = match self
            .table(QUEUE_COUNTS)?
            .get(&key[..])
            .map_err(|e| self.damaged(e))?
        {
            None => (0, 0),
            Some(v) => decode_count(v.value()).ok_or_else(|| self.corrupt("queue_counts", &key))?,
        };
        if count == 0 {
            return Ok(QueueStored::default());
        }
        let table = self.table(MESSAGES)?;
        let start = pair(queue, 0);
        let first = match queue.checked_add(1) {
            Some(next) => table.range(&start[..]..&pair(next, 0)[..]),
            None => table.range(&start[..]..),
        }
        .map_err(|e| self.damaged(e))?
        .next();
        let first_seq = match first {
            None => return Ok(QueueStored::default()),
            Some(entry) => {
                let (key, _) = entry.map_err(|e| self.damaged(e))?;
                split_pair(key.value())
                    .ok_or_else(|| self.corrupt("messages", key.value()))?
                    .1
            }
        };
        Ok(QueueStored {
            first_seq,
            count,
            bytes,
        })
    }

    /// The records of `table` keyed `u64 id ‖ u64 seq` with this id, from `from_seq` on.
    fn positions_from<'t>(
        &self,
        table: &'t Table,
        id: u64,
        from_seq: u64,
    ) -> Result<redb::Range<'t, &'static [u8], &'static [u8]>> {
        let start = pair(id, from_seq);
        match id.checked_add(1).map(|next| pair(next, 0)) {
            Some(end) => table.range(&start[..]..&end[..]),
            None => table.range(&start[..]..),
        }
        .map_err(|e| self.damaged(e))
    }

    /// Up to `limit` messages of a queue in queue order, from sequence number `from_seq` on
    /// (page through a long queue rather than reading it whole).
    pub fn queue_messages(
        &self,
        queue: u64,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        let table = self.table(MESSAGES)?;
        let states = self.table(MESSAGE_STATE)?;
        let range = self.positions_from(&table, queue, from_seq)?;
        // The few state records walk alongside the messages (both in key order): one scan
        // rather than a lookup per message.
        let mut state_range = self.positions_from(&states, queue, from_seq)?.peekable();
        let mut out = Vec::new();
        for entry in range.take(limit) {
            let (key, value) = entry.map_err(|e| self.damaged(e))?;
            let key = key.value();
            let (_, seq) = split_pair(key).ok_or_else(|| self.corrupt("messages", key))?;
            let (expires_at_ms, delivered, message) =
                decode_message_value(value.value()).ok_or_else(|| self.corrupt("messages", key))?;
            let mut state = DeliveryState::default();
            loop {
                let order = match state_range.peek() {
                    None => break,
                    Some(Ok((state_key, _))) => state_key.value().cmp(key),
                    Some(Err(e)) => return Err(self.damaged(e)),
                };
                match order {
                    std::cmp::Ordering::Greater => break,
                    // A state whose message is gone (never the case after a forget).
                    std::cmp::Ordering::Less => {
                        state_range.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if let Some(Ok((_, value))) = state_range.next() {
                            state = DeliveryState::decode(value.value())
                                .ok_or_else(|| self.corrupt("message_state", key))?;
                        }
                        break;
                    }
                }
            }
            state.redelivered |= delivered;
            out.push(StoredMessage {
                seq,
                expires_at_ms,
                state,
                message,
            });
        }
        Ok(out)
    }

    /// Up to `limit` messages a queue spilled under memory pressure (`Op::Spill`, under its
    /// spill id), from position `from_seq` on, in queue order. They were never delivered.
    pub fn spilled_messages(
        &self,
        spill: u64,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredMessage>> {
        let table = self.table(SPILLED)?;
        let range = self.positions_from(&table, spill, from_seq)?;
        let mut out = Vec::new();
        for entry in range.take(limit) {
            let (key, value) = entry.map_err(|e| self.damaged(e))?;
            let key = key.value();
            let (_, seq) = split_pair(key).ok_or_else(|| self.corrupt("spilled_messages", key))?;
            let (expires_at_ms, _, message) = decode_message_value(value.value())
                .ok_or_else(|| self.corrupt("spilled_messages", key))?;
            out.push(StoredMessage {
                seq,
                expires_at_ms,
                state: DeliveryState::default(),
                message,
            });
        }
        Ok(out)
    }

    /// How many messages delayed exchanges hold (no scan: redb keeps the count).
    pub fn delayed_count(&self) -> Result<u64> {
        self.table(HELD_MESSAGES)?
            .len()
            .map_err(|e| self.damaged(e))
    }

    /// Every `delayed_exchanges` row: (vhost, exchange, row), in key order.
    fn held_by(&self) -> Result<&[(String, String, HeldBy)]> {
        if let Some(rows) = self.held_by.get() {
            return Ok(rows);
        }
        let rows = self.read_held_by()?;
        Ok(self.held_by.get_or_init(|| rows))
    }

    fn read_held_by(&self) -> Result<Vec<(String, String, HeldBy)>> {
        let table = self.table(DELAYED_EXCHANGES)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(|e| self.damaged(e))? {
            let (key, value) = entry.map_err(|e| self.damaged(e))?;
            let mut k = Dec::new(key.value());
            let names = (k.str16(), k.str16(), k.end());
            let (Some(vhost), Some(exchange), Some(()), Some(row)) =
                (names.0, names.1, names.2, HeldBy::decode(value.value()))
            else {
                return Err(self.corrupt("delayed_exchanges", key.value()));
            };
            out.push((vhost, exchange, row));
        }
        Ok(out)
    }

    /// One exchange's number in `held`, if it ever held a message.
    fn number_of(&self, vhost: &str, exchange: &str) -> Result<Option<u32>> {
        let table = self.table(DELAYED_EXCHANGES)?;
        let key = name_key(&[vhost, exchange]);
        let value = table.get(&key[..]).map_err(|e| self.damaged(e))?;
        match value {
            None => Ok(None),
            Some(v) => HeldBy::decode(v.value())
                .map(|row| Some(row.number))
                .ok_or_else(|| self.corrupt("delayed_exchanges", &key)),
        }
    }

    /// Up to `limit` ids of one exchange (by number) in (due, seq) order, after `from` (or
    /// from it, when `inclusive`).
    ///
    /// `held_due` is ordered by bucket, not by due time, so this reads whole buckets: every
    /// bucket that may hold an id after `from` (those starting up to the widest bucket before
    /// it), in key order. Once a bucket starting at `s` is reached, every id due before `s` has
    /// been seen (later buckets start at `s` or after), so those are final; the read stops at
    /// the first bucket boundary with `limit` final ids. It may read a bucket more than it
    /// returns; buckets are narrow near the time they fall due (see `bucket_shift`).
    fn ids_in(
        &self,
        due: &Table,
        number: u32,
        from: DeadlineId,
        inclusive: bool,
        limit: usize,
    ) -> Result<Vec<DeadlineId>> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let start = held_due_from(number, from.due_ms.saturating_sub(1 << MAX_BUCKET_SHIFT));
        let end = held_due_end(number);
        let range = match &end {
            Some(end) => due.range::<&[u8]>(&start[..]..&end[..]),
            None => due.range::<&[u8]>(&start[..]..),
        }
        .map_err(|e| self.damaged(e))?;
        let after = |id: DeadlineId| if inclusive { id >= from } else { id > from };
        // Ids due before the current bucket's start (final), and those due at or after it
        // (a wider bucket read earlier may still be overtaken by a later, narrower one).
        let mut settled: Vec<DeadlineId> = Vec::new();
        let mut open: BinaryHeap<Reverse<DeadlineId>> = BinaryHeap::new();
        let mut bucket_start = None;
        for entry in range {
            let (key, value) = entry.map_err(|e| self.damaged(e))?;
            let record = HeldDueRecord::split(number, key.value(), value.value())
                .ok_or_else(|| self.corrupt("held_due", key.value()))?;
            let start = record.start_ms;
            if bucket_start != Some(start) {
                bucket_start = Some(start);
                while let Some(Reverse(id)) = open.peek() {
                    if id.due_ms >= start {
                        break;
                    }
                    settled.push(*id);
                    open.pop();
                }
                if settled.len() >= limit {
                    break;
                }
            }
            for (seq, due_ms) in record.holds() {
                let id = DeadlineId { due_ms, seq };
                if after(id) {
                    open.push(Reverse(id));
                }
            }
        }
        if settled.len() < limit {
            settled.extend(open.into_iter().map(|Reverse(id)| id));
        }
        settled.sort_unstable();
        settled.truncate(limit);
        Ok(settled)
    }

    /// Up to `limit` delayed ids of every exchange in (due, seq) order, strictly after `after`
    /// (keys only: no body is read). A far tier refills from here. Each exchange's ids are
    /// read from `after` on and merged (there are few exchanges).
    pub fn delayed_ids(&self, after: Option<DeadlineId>, limit: usize) -> Result<Vec<DeadlineId>> {
        self.delayed_ids_skipping(after, limit, &|_, _| false)
    }

    /// As [`Snapshot::delayed_ids`], without the ids of the exchanges `skip` names (by vhost
    /// and exchange): a far tier leaves those of exchanges it does not serve where they are.
    pub fn delayed_ids_skipping(
        &self,
        after: Option<DeadlineId>,
        limit: usize,
        skip: &dyn Fn(&str, &str) -> bool,
    ) -> Result<Vec<DeadlineId>> {
        let table = self.table(HELD_DUE)?;
        let mut out = Vec::new();
        for (vhost, exchange, row) in self.held_by()? {
            if row.count == 0 || skip(vhost, exchange) {
                continue;
            }
            let ids = match after {
                None => self.ids_in(
                    &table,
                    row.number,
                    DeadlineId { due_ms: 0, seq: 0 },
                    true,
                    limit,
                )?,
                Some(id) => self.ids_in(&table, row.number, id, false, limit)?,
            };
            out.extend(ids);
        }
        out.sort_unstable();
        out.truncate(limit);
        Ok(out)
    }

    /// (vhost, exchange, count, body octets) of every exchange holding messages (one row per
    /// exchange: no scan of the messages).
    pub fn delayed_counts(&self) -> Result<Vec<(String, String, u64, u64)>> {
        Ok(self
            .held_by()?
            .iter()
            .filter(|(_, _, row)| row.count > 0)
            .map(|(vhost, exchange, row)| (vhost.clone(), exchange.clone(), row.count, row.bytes))
            .collect())
    }

    /// Up to `limit` ids of messages `exchange` holds, in (due, seq) order from `from`
    /// (inclusive): no body read (listing, purge).
    pub fn delayed_ids_of(
        &self,
        vhost: &str,
        exchange: &str,
        from: DeadlineId,
        limit: usize,
    ) -> Result<Vec<DeadlineId>> {
        let Some(number) = self.number_of(vhost, exchange)? else {
            return Ok(Vec::new());
        };
        let table = self.table(HELD_DUE)?;
        self.ids_in(&table, number, from, true, limit)
    }

    /// Whether some exchange holds `id` (committed).
    pub fn delayed_contains(&self, id: DeadlineId) -> Result<bool> {
        let table = self.table(HELD_MESSAGES)?;
        let key = id.seq.to_be_bytes();
        let Some(value) = table.get(&key[..]).map_err(|e| self.damaged(e))? else {
            return Ok(false);
        };
        let header =
            HeldHeader::read(value.value()).ok_or_else(|| self.corrupt("held_messages", &key))?;
        Ok(header.due_ms == id.due_ms)
    }

    /// A held message (its body), if it is still held: one lookup by its seq.
    pub fn delayed_message(&self, id: DeadlineId) -> Result<Option<DelayedMessage>> {
        let table = self.table(HELD_MESSAGES)?;
        let key = id.seq.to_be_bytes();
        let Some(value) = table.get(&key[..]).map_err(|e| self.damaged(e))? else {
            return Ok(None);
        };
        let value = value.value();
        let header = HeldHeader::read(value).ok_or_else(|| self.corrupt("held_messages", &key))?;
        if header.due_ms != id.due_ms {
            return Ok(None);
        }
        let Some((vhost, exchange, _)) = self
            .held_by()?
            .iter()
            .find(|(_, _, row)| row.number == header.exchange)
        else {
            // A message whose exchange has no row: its exchange is gone.
            return Ok(None);
        };
        let (_, message) = decode_held_value(value, exchange)
            .ok_or_else(|| self.corrupt("held_messages", &key))?;
        Ok(Some(DelayedMessage {
            id,
            vhost: vhost.clone(),
            exchange: exchange.clone(),
            message,
        }))
    }
}
