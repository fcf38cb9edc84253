//! Applying a batch of ops inside one write transaction (the stream tables' ops in `stream`).

mod stream;

use std::collections::BTreeMap;

use redb::{ReadableTable, Table, WriteTransaction};

use crate::layout::{
    bucket_shift, bucket_start, held_due_end, held_due_from, held_due_key, message_key, name_key,
    pair, push_held_due_entry, HeldDueRecord, BINDINGS, DELAYED_EXCHANGES, EXCHANGES, HELD_DUE,
    HELD_MESSAGES, MESSAGES, MESSAGE_STATE, META, META_NEXT_DELAYED_EXCHANGE,
    META_NEXT_DELAYED_SEQ, META_NEXT_QUEUE_ID, PERMISSIONS, POLICIES, QUEUES, QUEUE_COUNTS,
    SPILLED, STREAMS, STREAM_INDEX, STREAM_LOG, USERS, VHOSTS,
};
use crate::ops::Op;
use crate::queue_counts::CountChanges;
use crate::records::{
    expiry_word, DeliveryState, HeldBody, HeldBy, HeldHeader, Payload, QueueDef, HELD_HEADER,
    MESSAGE_HEADER,
};

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

/// A `held_due` bucket: (exchange number, bucket start ms, shift).
type BucketOf = (u32, u64, u8);

/// A `held_due` record as read for an edit: its key and its entries.
type HeldDueRow = ([u8; 21], Vec<u8>);

/// This batch's view of `delayed_exchanges`.
#[derive(Default)]
struct HeldByRows {
    rows: BTreeMap<Vec<u8>, HeldBy>,
    /// Rows this batch changed.
    dirty: std::collections::BTreeSet<Vec<u8>>,
    /// The number the next new exchange takes (numbers are never reused).
    next_number: u32,
}

impl HeldByRows {
    /// Takes one message of `body_octets` off the row of the exchange numbered `number` (a
    /// linear search: there are few delayed exchanges, and no name is copied per release).
    fn uncount(&mut self, number: u32, body_octets: u64) {
        let HeldByRows { rows, dirty, .. } = self;
        if let Some((name, row)) = rows.iter_mut().find(|(_, row)| row.number == number) {
            row.count = row.count.saturating_sub(1);
            row.bytes = row.bytes.saturating_sub(body_octets);
            if !dirty.contains(name) {
                dirty.insert(name.clone());
            }
        }
    }
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

    /// Removes the messages (and their state records) of a batch's `Forget`s, applied last
    /// and in key order: consumers ack in queue order, so the forgets of one queue come in
    /// runs of consecutive sequence numbers, and one range removal per run rewrites each leaf
    /// once where a removal per key would descend and rebalance the tree every time.
    ///
    /// Deferring them is safe: a message's key is never written again once forgotten, and a
    /// state write after its forget cannot occur (the message is gone).
    pub(crate) fn forget_all(
        &mut self,
        forgets: &mut [(u64, u64)],
    ) -> Result<(), redb::StorageError> {
        forgets.sort_unstable();
        let mut rest = &forgets[..];
        while let Some(&(queue, first)) = rest.first() {
            let run = 1 + rest
                .windows(2)
                .take_while(|w| w[1].0 == queue && w[1].1 == w[0].1.wrapping_add(1))
                .count();
            let last = rest[run - 1].1;
            if run == 1 {
                self.forget(queue, first)?;
            } else {
                // Every key between the two is one of the run's (sequence numbers are
                // consecutive within the queue's prefix).
                let (from, to) = (message_key(queue, first), message_key(queue, last));
                let counts = &mut self.count_changes;
                self.messages.retain_in(&from[..]..=&to[..], |_, value| {
                    counts.removed(queue, value);
                    false
                })?;
                self.state.retain_in(&from[..]..=&to[..], |_, _| false)?;
            }
            rest = &rest[run..];
        }
        Ok(())
    }

    /// Removes one stored message and its state record.
    fn forget(&mut self, queue: u64, seq: u64) -> Result<(), redb::StorageError> {
        let key = message_key(queue, seq);
        if let Some(old) = self.messages.remove(&key[..])? {
            self.count_changes.removed(queue, old.value());
        }
        remove(&mut self.state, &key)
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

    pub(crate) fn apply(&mut self, op: &Op) -> Result<(), redb::StorageError> {
        match op {
            Op::PutVhost(v) => put(&mut self.vhosts, &v.key(), &v.value()),
            Op::DeleteVhost { name } => {
                self.vhosts.remove(&name_key(&[name])[..])?;
                let prefix = name_key(&[name]);
                let ids = queue_ids(&self.queues, &prefix)?;
                for id in ids {
                    self.purge(id)?;
                    self.drop_stream(id)?;
                }
                self.drop_held_under(&prefix)?;
                for table in [
                    &mut self.exchanges,
                    &mut self.queues,
                    &mut self.bindings,
                    &mut self.policies,
                    &mut self.permissions,
                ] {
                    remove_prefix(table, &prefix)?;
                }
                Ok(())
            }
            Op::PutUser(u) => put(&mut self.users, &u.key(), &u.value()),
            Op::DeleteUser { name } => remove(&mut self.users, &name_key(&[name])),
            Op::PutPermission(p) => put(&mut self.permissions, &p.key(), &p.value()),
            Op::DeletePermission { vhost, user } => {
                remove(&mut self.permissions, &name_key(&[vhost, user]))
            }
            Op::PutExchange(x) => put(&mut self.exchanges, &x.key(), &x.value()),
            Op::DeleteExchange { vhost, name } => {
                remove(&mut self.exchanges, &name_key(&[vhost, name]))?;
                remove_prefix(&mut self.bindings, &name_key(&[vhost, name]))?;
                self.drop_held_under(&name_key(&[vhost, name]))
            }
            Op::PutQueue(q) => put(&mut self.queues, &q.key(), &q.value()),
            Op::DeleteQueue { vhost, name, id } => {
                remove(&mut self.queues, &name_key(&[vhost, name]))?;
                self.purge(*id)?;
                self.drop_stream(*id)
            }
            Op::PutBinding(b) => put(&mut self.bindings, &b.key(), &[]),
            Op::DeleteBinding(b) => remove(&mut self.bindings, &b.key()),
            Op::PutPolicy(p) => put(&mut self.policies, &p.key(), &p.value()),
            Op::DeletePolicy { vhost, name } => {
                remove(&mut self.policies, &name_key(&[vhost, name]))
            }
            Op::Persist {
                queue,
                seq,
                expires_at_ms,
                delivered,
                message,
            } => {
                let key = message_key(*queue, *seq);
                if let Some(old) = self.messages.get(&key[..])? {
                    // Written again (never the case today): counted once.
                    self.count_changes.removed(*queue, old.value());
                }
                self.count_changes.added(*queue, message.body_len() as u64);
                put_message(
                    &mut self.messages,
                    &key,
                    *expires_at_ms,
                    *delivered,
                    message,
                )
            }
            Op::SetState { queue, seq, state } => {
                let key = message_key(*queue, *seq);
                if self.messages.get(&key[..])?.is_none() {
                    return Ok(());
                }
                if *state == DeliveryState::default() {
                    remove(&mut self.state, &key)
                } else {
                    debug_assert_eq!(state.value().len(), DeliveryState::LEN);
                    put(&mut self.state, &key, &state.value())
                }
            }
            Op::Forget { queue, seq } => self.forget(*queue, *seq),
            Op::ForgetRange {
                queue,
                from_seq,
                end_seq,
            } => {
                let (from, to) = (
                    message_key(*queue, *from_seq),
                    message_key(*queue, *end_seq),
                );
                let (counts, queue) = (&mut self.count_changes, *queue);
                self.messages.retain_in(&from[..]..&to[..], |_, value| {
                    counts.removed(queue, value);
                    false
                })?;
                self.state.retain_in(&from[..]..&to[..], |_, _| false)
            }
            Op::Spill {
                spill,
                seq,
                expires_at_ms,
                message,
            } => {
                let key = message_key(*spill, *seq);
                put_message(&mut self.spilled, &key, *expires_at_ms, false, message)
            }
            Op::Unspill {
                spill,
                from_seq,
                end_seq,
            } => {
                let from = message_key(*spill, *from_seq);
                if end_seq.saturating_sub(*from_seq) == 1 {
                    return remove(&mut self.spilled, &from);
                }
                let to = message_key(*spill, *end_seq);
                self.spilled.retain_in(&from[..]..&to[..], |_, _| false)
            }
            Op::Purge { queue } => self.purge(*queue),
            Op::Hold {
                id,
                held_at_ms,
                vhost,
                exchange,
                message,
            } => {
                let seq_key = id.seq.to_be_bytes();
                if self.held_messages.get(&seq_key[..])?.is_some() {
                    // Held already (a seq is held once): a hold replayed after a commit that
                    // failed late, when its pages had reached the disk all the same. Counted
                    // and indexed once.
                    return Ok(());
                }
                let body_octets = message.body_len() as u64;
                let name = self.held_name(vhost, exchange);
                let counted = self.count_held(&name, 1, body_octets);
                if let Some((_, _, key)) = self.last_hold_name.as_mut() {
                    *key = name;
                }
                let number = counted?;
                let shift = bucket_shift(*held_at_ms, id.due_ms);
                self.packed.clear();
                self.packed.resize(message.packed_len(), 0);
                message.write_packed(&mut self.packed);
                let Some(body) = HeldBody::of(&self.packed, exchange.as_bytes()) else {
                    // Never: `write_packed` writes a whole layout.
                    return Err(redb::StorageError::Io(std::io::Error::other(
                        "a held message did not pack",
                    )));
                };
                let header = HeldHeader {
                    exchange: number,
                    shift,
                    exchange_elided: body.exchange_elided,
                    due_ms: id.due_ms,
                    body_octets,
                };
                let len = HELD_HEADER + body.len();
                let mut slot = self.held_messages.insert_reserve(&seq_key[..], len)?;
                let out = slot.as_mut();
                header.write(&mut out[..HELD_HEADER]);
                body.write(&mut out[HELD_HEADER..]);
                drop(slot);
                let bucket = (number, bucket_start(id.due_ms, shift), shift);
                self.held_buckets
                    .entry(bucket)
                    .or_default()
                    .push((id.seq, id.due_ms));
                Ok(())
            }
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

    /// The batch's `delayed_exchanges` rows, read on first use.
    fn held_by(&mut self) -> Result<&mut HeldByRows, redb::StorageError> {
        if self.held_by.is_none() {
            let mut rows = BTreeMap::new();
            for entry in self.delayed_exchanges.iter()? {
                let (key, value) = entry?;
                // A malformed row is skipped here; reads report it as corrupt.
                if let Some(row) = HeldBy::decode(value.value()) {
                    rows.insert(key.value().to_vec(), row);
                }
            }
            let stored = self
                .meta
                .get(META_NEXT_DELAYED_EXCHANGE)?
                .and_then(|v| v.value().try_into().ok().map(u64::from_be_bytes))
                .unwrap_or(0);
            // Cover every number in use whatever the counter says.
            let in_use = rows.values().map(|r| u64::from(r.number) + 1).max();
            let next = stored.max(in_use.unwrap_or(0));
            self.held_by = Some(HeldByRows {
                rows,
                dirty: Default::default(),
                next_number: u32::try_from(next).unwrap_or(u32::MAX),
            });
        }
        Ok(self.held_by.get_or_insert_with(HeldByRows::default))
    }

    /// The `delayed_exchanges` key of an exchange, taken out of the last hold's cache (the
    /// caller puts it back): no allocation while holds name the same exchange.
    fn held_name(&mut self, vhost: &str, exchange: &str) -> Vec<u8> {
        let same = matches!(&self.last_hold_name, Some((v, e, _)) if v == vhost && e == exchange);
        if !same {
            let key = name_key(&[vhost, exchange]);
            self.last_hold_name = Some((vhost.to_owned(), exchange.to_owned(), key));
        }
        match self.last_hold_name.as_mut() {
            Some((_, _, key)) => std::mem::take(key),
            None => name_key(&[vhost, exchange]),
        }
    }

    /// Adds to an exchange's (count, body octets), giving it a number on its first hold;
    /// returns its number.
    fn count_held(
        &mut self,
        name: &[u8],
        count: i64,
        bytes: u64,
    ) -> Result<u32, redb::StorageError> {
        let rows = self.held_by()?;
        let row = match rows.rows.get_mut(name) {
            Some(row) => row,
            None => {
                let number = rows.next_number;
                // 2^32 exchanges would have to be created (each holding once) to get here.
                rows.next_number = number.checked_add(1).ok_or_else(|| {
                    redb::StorageError::Io(std::io::Error::other(
                        "delayed exchange numbers exhausted",
                    ))
                })?;
                rows.rows.entry(name.to_vec()).or_insert(HeldBy {
                    number,
                    count: 0,
                    bytes: 0,
                })
            }
        };
        if count >= 0 {
            row.count = row.count.saturating_add(count as u64);
            row.bytes = row.bytes.saturating_add(bytes);
        } else {
            row.count = row.count.saturating_sub(count.unsigned_abs());
            row.bytes = row.bytes.saturating_sub(bytes);
        }
        let number = row.number;
        // Once per exchange and batch, not per message: the writer is the bottleneck of holds.
        if !rows.dirty.contains(name) {
            rows.dirty.insert(name.to_vec());
        }
        Ok(number)
    }

    /// Removes a held message and its share of its exchange's counts: one removal by seq in
    /// `held_messages`, whose header names the `held_due` entry and the exchange. An id held
    /// by none (or held under another due time) is left alone.
    fn release_held(&mut self, due_ms: u64, seq: u64) -> Result<(), redb::StorageError> {
        let seq_key = seq.to_be_bytes();
        let found = match self.held_messages.remove(&seq_key[..])? {
            None => return Ok(()),
            Some(value) => match HeldHeader::read(value.value()) {
                Some(header) if header.due_ms == due_ms => Ok(header),
                // Not this id (or a damaged record, which reads report): put back as it was.
                _ => Err(value.value().to_vec()),
            },
        };
        let header = match found {
            Ok(header) => header,
            Err(value) => return put(&mut self.held_messages, &seq_key, &value),
        };
        let bucket = (
            header.exchange,
            bucket_start(due_ms, header.shift),
            header.shift,
        );
        self.released.push((bucket, seq));
        self.held_by()?.uncount(header.exchange, header.body_octets);
        Ok(())
    }

    /// Writes the batch's `held_due` records: one per bucket its holds fell into, then takes
    /// its releases out of theirs. Runs before anything reads `held_due` in this batch.
    fn write_held_index(&mut self) -> Result<(), redb::StorageError> {
        for ((number, start, shift), mut holds) in std::mem::take(&mut self.held_buckets) {
            holds.sort_unstable();
            // A record's entries count seqs from its first in a u32: holds of one commit are
            // never 2^32 seqs apart, but a record is cut where they would be.
            let mut rest = &holds[..];
            while let Some(&(first, _)) = rest.first() {
                let fits = rest
                    .iter()
                    .take_while(|(seq, _)| seq - first <= u64::from(u32::MAX))
                    .count();
                let key = held_due_key(number, start, shift, first);
                let mut record = match self.held_due.get(&key[..])? {
                    Some(existing) => existing.value().to_vec(),
                    None => Vec::with_capacity(fits * crate::layout::HELD_DUE_ENTRY),
                };
                for &(seq, due) in &rest[..fits] {
                    push_held_due_entry(&mut record, first, start, seq, due);
                }
                put(&mut self.held_due, &key, &record)?;
                rest = &rest[fits..];
            }
        }
        let mut released = std::mem::take(&mut self.released);
        released.sort_unstable();
        let mut rest = &released[..];
        while let Some(&(bucket, seq)) = rest.first() {
            let Some((key, record)) = self.held_due_record_naming(bucket, seq)? else {
                // Not indexed (a damaged record, which reads report): nothing to take out.
                rest = &rest[1..];
                continue;
            };
            let (number, start, shift) = bucket;
            let Some(named) = HeldDueRecord::split(number, &key, &record) else {
                rest = &rest[1..];
                continue;
            };
            // The releases of this batch that the same record names come next in order.
            let run = rest
                .iter()
                .take_while(|(b, s)| *b == bucket && named.names(*s))
                .count();
            let gone = &rest[..run];
            let left = named.without(|s| gone.binary_search_by_key(&s, |(_, g)| *g).is_ok());
            if left.is_empty() {
                remove(&mut self.held_due, &key)?;
            } else {
                put(&mut self.held_due, &key, &left)?;
            }
            debug_assert_eq!(named.shift, shift);
            debug_assert_eq!(named.start_ms, start);
            rest = &rest[run.max(1)..];
        }
        Ok(())
    }

    /// The `held_due` record of `bucket` that names the hold `seq`: the one with the greatest
    /// first seq not above it, unless commits interleaved their seqs (then an earlier one).
    fn held_due_record_naming(
        &self,
        (number, start, shift): BucketOf,
        seq: u64,
    ) -> Result<Option<HeldDueRow>, redb::StorageError> {
        let from = held_due_key(number, start, shift, 0);
        let to = held_due_key(number, start, shift, seq);
        for entry in self.held_due.range(&from[..]..=&to[..])?.rev() {
            let (key, value) = entry?;
            let found = HeldDueRecord::split(number, key.value(), value.value())
                .is_some_and(|record| record.names(seq));
            if found {
                let mut out = [0u8; 21];
                out.copy_from_slice(key.value());
                return Ok(Some((out, value.value().to_vec())));
            }
        }
        Ok(None)
    }

    /// Removes the held messages and the `delayed_exchanges` rows of every exchange whose key
    /// starts with `prefix` (an exchange or a vhost was deleted).
    fn drop_held_under(&mut self, prefix: &[u8]) -> Result<(), redb::StorageError> {
        self.write_held_index()?;
        let rows = self.held_by()?;
        let gone: Vec<(Vec<u8>, u32)> = rows
            .rows
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .map(|(name, row)| (name.clone(), row.number))
            .collect();
        for (name, _) in &gone {
            rows.rows.remove(name);
            rows.dirty.remove(name);
        }
        for (name, number) in gone {
            let start = held_due_from(number, 0);
            let end = held_due_end(number);
            let mut seqs = Vec::new();
            {
                let range = match &end {
                    Some(end) => self.held_due.range(&start[..]..&end[..])?,
                    None => self.held_due.range(&start[..]..)?,
                };
                for entry in range {
                    let (key, value) = entry?;
                    // A malformed record is skipped here (its bodies stay; reads report it).
                    if let Some(record) = HeldDueRecord::split(number, key.value(), value.value()) {
                        seqs.extend(record.holds().map(|(seq, _)| seq));
                    }
                }
            }
            seqs.sort_unstable();
            for seq in seqs {
                remove(&mut self.held_messages, &seq.to_be_bytes())?;
            }
            match end {
                Some(end) => self
                    .held_due
                    .retain_in(&start[..]..&end[..], |_, _| false)?,
                None => self.held_due.retain_in(&start[..].., |_, _| false)?,
            }
            remove(&mut self.delayed_exchanges, &name)?;
        }
        Ok(())
    }

    /// Writes the batch's `held_due` records, then the `delayed_exchanges` rows it changed
    /// and the next exchange number (once per commit, before it). A row stays when its count reaches 0: its exchange keeps
    /// its number until it is deleted.
    pub(crate) fn finish_delayed(&mut self) -> Result<(), redb::StorageError> {
        self.write_held_index()?;
        let Some(rows) = self.held_by.take() else {
            return Ok(());
        };
        for name in &rows.dirty {
            if let Some(row) = rows.rows.get(name) {
                put(&mut self.delayed_exchanges, name, &row.value())?;
            }
        }
        let stored = self
            .meta
            .get(META_NEXT_DELAYED_EXCHANGE)?
            .and_then(|v| v.value().try_into().ok().map(u64::from_be_bytes))
            .unwrap_or(0);
        let next = u64::from(rows.next_number);
        if next > stored {
            self.meta
                .insert(META_NEXT_DELAYED_EXCHANGE, &next.to_be_bytes()[..])?;
        }
        Ok(())
    }

    fn purge(&mut self, queue: u64) -> Result<(), redb::StorageError> {
        self.count_changes.reset(queue);
        let (start, end) = (pair(queue, 0), queue_end(queue));
        for table in [&mut self.messages, &mut self.state] {
            match &end {
                Some(end) => table.retain_in(&start[..]..&end[..], |_, _| false)?,
                None => table.retain_in(&start[..].., |_, _| false)?,
            }
        }
        Ok(())
    }
}

fn queue_end(queue: u64) -> Option<[u8; 16]> {
    queue.checked_add(1).map(|next| pair(next, 0))
}

/// Writes a `messages` (or `spilled_messages`) record: the expiry word, then the message
/// packed straight into redb's page (one copy).
fn put_message(
    table: &mut T<'_>,
    key: &[u8],
    expires_at_ms: u64,
    delivered: bool,
    message: &Payload,
) -> Result<(), redb::StorageError> {
    let len = MESSAGE_HEADER + message.packed_len();
    let mut slot = table.insert_reserve(key, len)?;
    let out = slot.as_mut();
    let word = expiry_word(expires_at_ms, delivered);
    out[..MESSAGE_HEADER].copy_from_slice(&word.to_be_bytes());
    message.write_packed(&mut out[MESSAGE_HEADER..]);
    Ok(())
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

fn remove_prefix(table: &mut T<'_>, prefix: &[u8]) -> Result<(), redb::StorageError> {
    match prefix_end(prefix) {
        Some(end) => table.retain_in(prefix..end.as_slice(), |_, _| false),
        None => table.retain_in(prefix.., |_, _| false),
    }
}

fn queue_ids(queues: &T<'_>, prefix: &[u8]) -> Result<Vec<u64>, redb::StorageError> {
    let mut ids = Vec::new();
    let range = match prefix_end(prefix) {
        Some(end) => queues.range(prefix..end.as_slice())?,
        None => queues.range(prefix..)?,
    };
    for entry in range {
        let (key, value) = entry?;
        if let Some(q) = QueueDef::decode(key.value(), value.value()) {
            ids.push(q.id);
        }
    }
    Ok(ids)
}
