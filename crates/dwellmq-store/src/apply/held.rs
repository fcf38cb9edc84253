//! Applying the delayed exchanges' ops: a hold writes its message and counts it on its
//! exchange's `delayed_exchanges` row, a release undoes both; the rows and the `held_due`
//! index are written once per batch ([`Tables::finish_delayed`]).

use std::collections::BTreeMap;

use dwellmq_core::schedule::DeadlineId;
use redb::ReadableTable;

use super::{put, Tables};
use crate::layout::{bucket_shift, bucket_start, name_key, META_NEXT_DELAYED_EXCHANGE};
use crate::records::{HeldBody, HeldBy, HeldHeader, Payload, HELD_HEADER};

/// A `held_due` bucket: (exchange number, bucket start ms, shift).
pub(super) type BucketOf = (u32, u64, u8);

/// This batch's view of `delayed_exchanges`.
#[derive(Default)]
pub(super) struct HeldByRows {
    pub(super) rows: BTreeMap<Vec<u8>, HeldBy>,
    /// Rows this batch changed.
    pub(super) dirty: std::collections::BTreeSet<Vec<u8>>,
    /// The number the next new exchange takes (numbers are never reused).
    pub(super) next_number: u32,
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

impl Tables<'_> {
    /// Writes a held message under its seq and counts it on its exchange; its `held_due`
    /// entry waits in `held_buckets` for the end of the batch.
    pub(super) fn hold(
        &mut self,
        id: DeadlineId,
        held_at_ms: u64,
        vhost: &str,
        exchange: &str,
        message: &Payload,
    ) -> Result<(), redb::StorageError> {
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
        let shift = bucket_shift(held_at_ms, id.due_ms);
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

    /// The batch's `delayed_exchanges` rows, read on first use.
    pub(super) fn held_by(&mut self) -> Result<&mut HeldByRows, redb::StorageError> {
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
    pub(super) fn release_held(&mut self, due_ms: u64, seq: u64) -> Result<(), redb::StorageError> {
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

    /// Writes the batch's `held_due` records, then the `delayed_exchanges` rows it changed
    /// and the next exchange number (once per commit, before it). A row stays when its count
    /// reaches 0: its exchange keeps its number until it is deleted.
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
}
