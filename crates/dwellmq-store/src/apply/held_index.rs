//! The `held_due` index of the delayed exchanges: written once per batch from its holds and
//! releases, and cleared with an exchange.

use redb::ReadableTable;

use super::held::BucketOf;
use super::{put, remove, Tables};
use crate::layout::{
    held_due_end, held_due_from, held_due_key, push_held_due_entry, HeldDueRecord,
};

/// A `held_due` record as read for an edit: its key and its entries.
type HeldDueRow = ([u8; 21], Vec<u8>);

impl Tables<'_> {
    /// Writes the batch's `held_due` records: one per bucket its holds fell into, then takes
    /// its releases out of theirs. Runs before anything reads `held_due` in this batch.
    pub(super) fn write_held_index(&mut self) -> Result<(), redb::StorageError> {
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
    pub(super) fn drop_held_under(&mut self, prefix: &[u8]) -> Result<(), redb::StorageError> {
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
}
