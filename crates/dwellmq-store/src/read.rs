//! Reading what is committed: recovery at start, far-tier refills, bodies on demand.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dwellmq_core::schedule::DeadlineId;
use redb::ReadableTableMetadata;
use redb::{Database, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable};

use crate::codec::hex;
use crate::codec::Dec;
use crate::error::{Result, StoreError};
use crate::layout::{
    delayed_by_exchange_key, delayed_index_key, delayed_key, name_key, pair, split_pair, Bin,
    BINDINGS, DELAYED, DELAYED_BY_EXCHANGE, DELAYED_COUNTS, DELAYED_INDEX, EXCHANGES, MESSAGES,
    MESSAGE_STATE, META, META_NEXT_DELAYED_SEQ, META_NEXT_QUEUE_ID, PERMISSIONS, POLICIES, QUEUES,
    USERS, VHOSTS,
};
use crate::open::DbSlot;
use crate::records::{
    decode_delayed_counts, decode_delayed_value, decode_message_value, BindingDef, Definitions,
    DelayedMessage, DeliveryState, ExchangeDef, PermissionDef, PolicyDef, QueueDef, StoredMessage,
    UserDef, VhostDef,
};

type Table = ReadOnlyTable<&'static [u8], &'static [u8]>;

/// A consistent read view of the store.
pub struct Snapshot {
    tx: ReadTransaction,
    path: PathBuf,
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
        let tx = db.begin_read().map_err(|e| StoreError::Database {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(Snapshot {
            tx,
            path: path.to_path_buf(),
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
        let start = pair(queue, from_seq);
        let end = queue.checked_add(1).map(|next| pair(next, 0));
        let range = match &end {
            Some(end) => table.range(&start[..]..&end[..]),
            None => table.range(&start[..]..),
        }
        .map_err(|e| self.damaged(e))?;
        // The few state records walk alongside the messages (both in key order): one scan
        // rather than a lookup per message.
        let mut state_range = match &end {
            Some(end) => states.range(&start[..]..&end[..]),
            None => states.range(&start[..]..),
        }
        .map_err(|e| self.damaged(e))?
        .peekable();
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

    /// How many messages delayed exchanges hold (no scan: redb keeps the count).
    pub fn delayed_count(&self) -> Result<u64> {
        self.table(DELAYED_INDEX)?
            .len()
            .map_err(|e| self.damaged(e))
    }

    /// Up to `limit` delayed ids in (due, seq) order, strictly after `after` (the index only:
    /// no body is read). A far tier refills from here.
    pub fn delayed_ids(&self, after: Option<DeadlineId>, limit: usize) -> Result<Vec<DeadlineId>> {
        let table = self.table(DELAYED_INDEX)?;
        let range = match after {
            None => table.range::<&[u8]>(..),
            Some(id) => {
                let key = delayed_index_key(id.due_ms, id.seq);
                table.range::<&[u8]>((
                    std::ops::Bound::Excluded(&key[..]),
                    std::ops::Bound::Unbounded,
                ))
            }
        }
        .map_err(|e| self.damaged(e))?;
        let mut out = Vec::with_capacity(limit.min(4096));
        for entry in range.take(limit) {
            let (key, _) = entry.map_err(|e| self.damaged(e))?;
            let (due_ms, seq) = split_pair(key.value())
                .ok_or_else(|| self.corrupt("delayed_index", key.value()))?;
            out.push(DeadlineId { due_ms, seq });
        }
        Ok(out)
    }

    /// (vhost, exchange, count, body octets) of every exchange holding messages (one row per
    /// exchange: no scan of the messages).
    pub fn delayed_counts(&self) -> Result<Vec<(String, String, u64, u64)>> {
        let table = self.table(DELAYED_COUNTS)?;
        let mut out = Vec::new();
        for entry in table.range::<&[u8]>(..).map_err(|e| self.damaged(e))? {
            let (key, value) = entry.map_err(|e| self.damaged(e))?;
            let mut k = Dec::new(key.value());
            let names = (k.str16(), k.str16());
            let (Some(vhost), Some(exchange), Some((count, bytes))) =
                (names.0, names.1, decode_delayed_counts(value.value()))
            else {
                return Err(self.corrupt("delayed_counts", key.value()));
            };
            out.push((vhost, exchange, count, bytes));
        }
        Ok(out)
    }

    /// Up to `limit` ids of messages `exchange` holds, in (due, seq) order from `from`
    /// (inclusive): the per-exchange index, no body read (listing, purge).
    pub fn delayed_ids_of(
        &self,
        vhost: &str,
        exchange: &str,
        from: DeadlineId,
        limit: usize,
    ) -> Result<Vec<DeadlineId>> {
        let table = self.table(DELAYED_BY_EXCHANGE)?;
        let prefix = name_key(&[vhost, exchange]);
        let start = delayed_by_exchange_key(vhost, exchange, from.due_ms, from.seq);
        let range = table
            .range::<&[u8]>(&start[..]..)
            .map_err(|e| self.damaged(e))?;
        let mut out = Vec::with_capacity(limit.min(4096));
        for entry in range.take(limit) {
            let (key, _) = entry.map_err(|e| self.damaged(e))?;
            let Some(rest) = key.value().strip_prefix(&prefix[..]) else {
                break;
            };
            let (due_ms, seq) =
                split_pair(rest).ok_or_else(|| self.corrupt("delayed_by_exchange", key.value()))?;
            out.push(DeadlineId { due_ms, seq });
        }
        Ok(out)
    }

    /// Whether the delayed index holds `id` (committed).
    pub fn delayed_contains(&self, id: DeadlineId) -> Result<bool> {
        let table = self.table(DELAYED_INDEX)?;
        let key = delayed_index_key(id.due_ms, id.seq);
        let found = table.get(&key[..]).map_err(|e| self.damaged(e))?;
        Ok(found.is_some())
    }

    /// A held message (its body), if it is still held.
    pub fn delayed_message(&self, id: DeadlineId) -> Result<Option<DelayedMessage>> {
        let table = self.table(DELAYED)?;
        let key = delayed_key(id.seq);
        let Some(value) = table.get(&key[..]).map_err(|e| self.damaged(e))? else {
            return Ok(None);
        };
        let (due_ms, vhost, exchange, message) =
            decode_delayed_value(value.value()).ok_or_else(|| self.corrupt("delayed", &key))?;
        if due_ms != id.due_ms {
            return Ok(None);
        }
        Ok(Some(DelayedMessage {
            id,
            vhost,
            exchange,
            message,
        }))
    }
}
