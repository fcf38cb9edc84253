//! `queue_counts`: how many messages each durable queue holds in `messages`, and their body
//! octets, kept by the writer in the same commit as the messages themselves, so that a
//! restart knows a queue's length without reading it (DESIGN.md has the layout).

use std::collections::BTreeMap;

use dwellmq_core::PackedMessage;
use redb::{ReadableTable, Table};

use crate::records::MESSAGE_HEADER;

type T<'t> = Table<'t, &'static [u8], &'static [u8]>;

/// A `queue_counts` value: `u64 count ‖ u64 body octets`.
pub(crate) const COUNT_VALUE: usize = 16;

/// One queue's change in this batch.
#[derive(Debug, Default, Clone, Copy)]
struct Change {
    /// The queue's messages were all removed first (purge, deletion): the row starts at 0.
    reset: bool,
    count: i64,
    bytes: i64,
}

/// The changes a batch makes to `queue_counts`, written once before its commit.
#[derive(Debug, Default)]
pub(crate) struct CountChanges {
    changes: BTreeMap<u64, Change>,
}

impl CountChanges {
    /// A message of `body` octets was written.
    pub(crate) fn added(&mut self, queue: u64, body: u64) {
        let change = self.changes.entry(queue).or_default();
        change.count += 1;
        change.bytes += body as i64;
    }

    /// A `messages` record was removed; its value says its body size.
    pub(crate) fn removed(&mut self, queue: u64, value: &[u8]) {
        let change = self.changes.entry(queue).or_default();
        change.count -= 1;
        change.bytes -= body_octets(value) as i64;
    }

    /// Every message of `queue` was removed.
    pub(crate) fn reset(&mut self, queue: u64) {
        self.changes.insert(
            queue,
            Change {
                reset: true,
                ..Change::default()
            },
        );
    }

    /// Writes the changed rows (a row whose count reaches 0 is removed).
    pub(crate) fn write(&mut self, table: &mut T<'_>) -> Result<(), redb::StorageError> {
        for (queue, change) in std::mem::take(&mut self.changes) {
            let key = queue.to_be_bytes();
            let (count, bytes) = if change.reset {
                (0, 0)
            } else {
                table
                    .get(&key[..])?
                    .and_then(|v| decode_count(v.value()))
                    .unwrap_or((0, 0))
            };
            let count = count.saturating_add_signed(change.count);
            let bytes = bytes.saturating_add_signed(change.bytes);
            if count == 0 {
                table.remove(&key[..])?;
            } else {
                table.insert(&key[..], &encode_count(count, bytes)[..])?;
            }
        }
        Ok(())
    }
}

/// The body size a `messages` value holds (0 for a malformed one: it is reported when read).
fn body_octets(value: &[u8]) -> u64 {
    value
        .get(MESSAGE_HEADER..)
        .and_then(PackedMessage::body_len_of)
        .unwrap_or(0) as u64
}

pub(crate) fn encode_count(count: u64, bytes: u64) -> [u8; COUNT_VALUE] {
    let mut value = [0u8; COUNT_VALUE];
    value[..8].copy_from_slice(&count.to_be_bytes());
    value[8..].copy_from_slice(&bytes.to_be_bytes());
    value
}

/// (count, body octets) from a `queue_counts` value; `None` if malformed.
pub(crate) fn decode_count(value: &[u8]) -> Option<(u64, u64)> {
    if value.len() != COUNT_VALUE {
        return None;
    }
    let count = u64::from_be_bytes(value[..8].try_into().ok()?);
    let bytes = u64::from_be_bytes(value[8..].try_into().ok()?);
    Some((count, bytes))
}
