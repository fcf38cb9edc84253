//! Applying a batch of ops inside one write transaction.

use std::collections::BTreeMap;

use redb::{ReadableTable, Table, WriteTransaction};

use crate::layout::{
    delayed_by_exchange_key, delayed_index_key, delayed_key, message_key, name_key, pair, BINDINGS,
    DELAYED, DELAYED_BY_EXCHANGE, DELAYED_COUNTS, DELAYED_INDEX, EXCHANGES, MESSAGES,
    MESSAGE_STATE, META, META_NEXT_DELAYED_SEQ, META_NEXT_QUEUE_ID, PERMISSIONS, POLICIES, QUEUES,
    USERS, VHOSTS,
};
use crate::ops::Op;
use crate::records::{
    decode_delayed_counts, decode_delayed_value, delayed_counts_value, delayed_header, expiry_word,
    DeliveryState, QueueDef, MESSAGE_HEADER,
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
    delayed_index: T<'t>,
    delayed: T<'t>,
    delayed_by_exchange: T<'t>,
    delayed_counts: T<'t>,
    /// Per exchange, what this batch's holds and releases add to its `delayed_counts` row:
    /// written once per batch, not once per op.
    count_deltas: BTreeMap<Vec<u8>, (i64, i64)>,
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
            delayed_index: tx.open_table(DELAYED_INDEX)?,
            delayed: tx.open_table(DELAYED)?,
            delayed_by_exchange: tx.open_table(DELAYED_BY_EXCHANGE)?,
            delayed_counts: tx.open_table(DELAYED_COUNTS)?,
            count_deltas: BTreeMap::new(),
        })
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
                }
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
                remove_prefix(&mut self.bindings, &name_key(&[vhost, name]))
            }
            Op::PutQueue(q) => put(&mut self.queues, &q.key(), &q.value()),
            Op::DeleteQueue { vhost, name, id } => {
                remove(&mut self.queues, &name_key(&[vhost, name]))?;
                self.purge(*id)
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
                let len = MESSAGE_HEADER + message.packed_len();
                let mut slot = self.messages.insert_reserve(&key[..], len)?;
                let out = slot.as_mut();
                let word = expiry_word(*expires_at_ms, *delivered);
                out[..MESSAGE_HEADER].copy_from_slice(&word.to_be_bytes());
                message.write_packed(&mut out[MESSAGE_HEADER..]);
                Ok(())
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
            Op::Forget { queue, seq } => {
                let key = message_key(*queue, *seq);
                remove(&mut self.messages, &key)?;
                remove(&mut self.state, &key)
            }
            Op::Purge { queue } => self.purge(*queue),
            Op::Hold {
                id,
                vhost,
                exchange,
                message,
            } => {
                let header = delayed_header(id.due_ms, vhost, exchange);
                let len = header.len() + message.packed_len();
                let key = delayed_key(id.seq);
                let mut slot = self.delayed.insert_reserve(&key[..], len)?;
                let out = slot.as_mut();
                out[..header.len()].copy_from_slice(&header);
                message.write_packed(&mut out[header.len()..]);
                drop(slot);
                put(
                    &mut self.delayed_index,
                    &delayed_index_key(id.due_ms, id.seq),
                    &[],
                )?;
                put(
                    &mut self.delayed_by_exchange,
                    &delayed_by_exchange_key(vhost, exchange, id.due_ms, id.seq),
                    &[],
                )?;
                self.count_delayed(vhost, exchange, 1, message.body_len() as i64)
            }
            Op::Release { id } => self.release_delayed(id.due_ms, id.seq),
        }
    }

    /// Removes a held message from `delayed`, both indexes and its exchange's counts. A
    /// `delayed` value whose due time is not `due_ms` belongs to another id: left alone.
    fn release_delayed(&mut self, due_ms: u64, seq: u64) -> Result<(), redb::StorageError> {
        let key = delayed_key(seq);
        let held = match self.delayed.get(&key[..])? {
            Some(value) => decode_delayed_value(value.value()),
            None => None,
        };
        remove(&mut self.delayed_index, &delayed_index_key(due_ms, seq))?;
        let Some((stored_due, vhost, exchange, message)) = held else {
            return Ok(());
        };
        if stored_due != due_ms {
            return Ok(());
        }
        remove(&mut self.delayed, &key)?;
        remove(
            &mut self.delayed_by_exchange,
            &delayed_by_exchange_key(&vhost, &exchange, due_ms, seq),
        )?;
        self.count_delayed(&vhost, &exchange, -1, -(message.body_len() as i64))
    }

    /// Adds to an exchange's (count, body octets) of held messages, in this batch's deltas.
    fn count_delayed(
        &mut self,
        vhost: &str,
        exchange: &str,
        count: i64,
        bytes: i64,
    ) -> Result<(), redb::StorageError> {
        let delta = self
            .count_deltas
            .entry(name_key(&[vhost, exchange]))
            .or_insert((0, 0));
        delta.0 += count;
        delta.1 += bytes;
        Ok(())
    }

    /// Writes the batch's count deltas into `delayed_counts` (once per commit, before it); a
    /// row reaching 0 goes.
    pub(crate) fn write_delayed_counts(&mut self) -> Result<(), redb::StorageError> {
        for (key, (count, bytes)) in std::mem::take(&mut self.count_deltas) {
            if (count, bytes) == (0, 0) {
                continue;
            }
            let (old_count, old_bytes) = self
                .delayed_counts
                .get(&key[..])?
                .and_then(|v| decode_delayed_counts(v.value()))
                .unwrap_or((0, 0));
            let new_count = old_count.saturating_add_signed(count);
            let new_bytes = old_bytes.saturating_add_signed(bytes);
            if new_count == 0 {
                remove(&mut self.delayed_counts, &key)?;
            } else {
                put(
                    &mut self.delayed_counts,
                    &key,
                    &delayed_counts_value(new_count, new_bytes),
                )?;
            }
        }
        Ok(())
    }

    fn purge(&mut self, queue: u64) -> Result<(), redb::StorageError> {
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
