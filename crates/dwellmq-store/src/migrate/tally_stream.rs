//! What an inspected store's streams hold (format 5): each stream's records, decoded one by
//! one, checked against its index entries and its row (none of it in an older format).

use std::collections::BTreeMap;
use std::path::Path;

use redb::{ReadTransaction, ReadableTable, TableError};

use super::inspect::damaged;
use crate::codec::hex;
use crate::error::Result;
use crate::layout::{split_pair, Bin, STREAMS, STREAM_INDEX, STREAM_LOG};
use crate::stream_records::{decode_log_value, ChunkRow, StreamRow};

/// One stream's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamTally {
    /// Its id (its queue's store id).
    pub id: u64,
    /// Records it holds.
    pub records: u64,
    /// Their octets (timestamp and packed message).
    pub bytes: u64,
    /// The first offset it holds, if any.
    pub first_offset: Option<u64>,
    /// The offset its next append takes.
    pub next_offset: u64,
}

#[derive(Default)]
struct Seen {
    row: Option<StreamRow>,
    records: u64,
    bytes: u64,
    first: Option<u64>,
    last: Option<u64>,
    indexed: (u64, u64),
}

pub(crate) fn tally(
    read: &ReadTransaction,
    path: &Path,
    problems: &mut Vec<String>,
) -> Result<Vec<StreamTally>> {
    let mut seen: BTreeMap<u64, Seen> = BTreeMap::new();
    each(read, path, STREAMS, |key, value| {
        match (
            key.try_into().map(u64::from_be_bytes),
            StreamRow::decode(value),
        ) {
            (Ok(id), Some(row)) => seen.entry(id).or_default().row = Some(row),
            _ => problems.push(malformed("streams", key)),
        }
    })?;
    each(read, path, STREAM_INDEX, |key, value| {
        match (split_pair(key), ChunkRow::decode(value)) {
            (Some((id, _)), Some(chunk)) => {
                let s = seen.entry(id).or_default();
                s.indexed.0 += chunk.count;
                s.indexed.1 += chunk.bytes;
            }
            _ => problems.push(malformed("stream_index", key)),
        }
    })?;
    each(read, path, STREAM_LOG, |key, value| {
        match (split_pair(key), decode_log_value(value)) {
            (Some((id, offset)), Some(_)) => {
                let s = seen.entry(id).or_default();
                s.records += 1;
                s.bytes += value.len() as u64;
                s.first = Some(s.first.map_or(offset, |f| f.min(offset)));
                s.last = Some(offset);
            }
            _ => problems.push(malformed("stream_log", key)),
        }
    })?;
    let mut out = Vec::new();
    for (id, s) in seen {
        let row = s.row.unwrap_or_default();
        if s.row.is_none() {
            problems.push(format!("stream {id} has records but no `streams` row"));
        }
        if (s.records, s.bytes) != s.indexed {
            problems.push(format!(
                "stream_index of stream {id} counts {} records of {} octets; `stream_log` \
                 holds {} of {} (a restart counts the stream as its index says)",
                s.indexed.0, s.indexed.1, s.records, s.bytes
            ));
        }
        if s.first.is_some_and(|first| first < row.first_offset) {
            problems.push(format!(
                "stream {id} holds records below its retention cut {}",
                row.first_offset
            ));
        }
        let next_offset = row.next_offset.max(s.last.map_or(0, |last| last + 1));
        if next_offset != row.next_offset {
            problems.push(format!(
                "stream {id}'s row says its next offset is {}, below its last record {}",
                row.next_offset,
                next_offset - 1
            ));
        }
        out.push(StreamTally {
            id,
            records: s.records,
            bytes: s.bytes,
            first_offset: s.first,
            next_offset,
        });
    }
    Ok(out)
}

fn malformed(table: &str, key: &[u8]) -> String {
    format!("record {} in table {table} is malformed", hex(key))
}

/// Each record of `def` (none when the store's format lacks the table).
fn each(
    read: &ReadTransaction,
    path: &Path,
    def: Bin,
    mut f: impl FnMut(&[u8], &[u8]),
) -> Result<()> {
    let table = match read.open_table(def) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(damaged(path, e)),
    };
    for entry in table.iter().map_err(|e| damaged(path, e))? {
        let (key, value) = entry.map_err(|e| damaged(path, e))?;
        f(key.value(), value.value());
    }
    Ok(())
}
