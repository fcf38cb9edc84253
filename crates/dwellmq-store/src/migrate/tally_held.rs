//! Messages held by delayed exchanges, counted in the layout of the store's own format, each
//! exchange's count checked against its `delayed_exchanges` row, and (formats 3 and 4) every
//! due-time index entry checked against the message it names.

use std::collections::BTreeMap;
use std::path::Path;

use dwellmq_core::PackedMessage;
use redb::{ReadOnlyTable, ReadTransaction, ReadableTable, ReadableTableMetadata, TableError};

use super::held_v2::split_key;
use super::inspect::damaged;
use super::{be_u64, FIRST_LAYOUT_DELAYED, HELD_V2};
use crate::codec::{hex, Dec};
use crate::error::Result;
use crate::layout::{Bin, HeldDueRecord, DELAYED_EXCHANGES, HELD_DUE, HELD_MESSAGES};
use crate::records::{decode_held_value, HeldBy, HeldHeader};

/// What one delayed exchange holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldTally {
    /// Its vhost.
    pub vhost: String,
    /// Its name (`None`: messages under a number no `delayed_exchanges` row has).
    pub exchange: Option<String>,
    /// Messages held.
    pub messages: u64,
    /// Their body octets.
    pub bytes: u64,
    /// When the first of them is due (ms since the epoch).
    pub first_due_ms: Option<u64>,
}

type Table = ReadOnlyTable<&'static [u8], &'static [u8]>;

#[derive(Default)]
struct Sum {
    messages: u64,
    bytes: u64,
    first_due_ms: Option<u64>,
}

impl Sum {
    fn add(&mut self, bytes: u64, due_ms: u64) {
        self.messages += 1;
        self.bytes += bytes;
        self.first_due_ms = Some(self.first_due_ms.map_or(due_ms, |d| d.min(due_ms)));
    }
}

pub(crate) fn tally(
    read: &ReadTransaction,
    format: u32,
    path: &Path,
    problems: &mut Vec<String>,
) -> Result<Vec<HeldTally>> {
    let open = |def: Bin| -> Result<Option<Table>> {
        match read.open_table(def) {
            Ok(table) => Ok(Some(table)),
            Err(TableError::TableDoesNotExist(_)) => Ok(None),
            Err(e) => Err(damaged(path, e)),
        }
    };
    let fail = |e: redb::StorageError| damaged(path, e);
    // (vhost, exchange, row) by number.
    let mut rows: BTreeMap<u32, (String, String, HeldBy)> = BTreeMap::new();
    if let Some(table) = open(DELAYED_EXCHANGES)? {
        for entry in table.iter().map_err(fail)? {
            let (key, value) = entry.map_err(fail)?;
            let mut k = Dec::new(key.value());
            match (k.str16(), k.str16(), HeldBy::decode(value.value())) {
                (Some(vhost), Some(exchange), Some(row)) => {
                    rows.insert(row.number, (vhost, exchange, row));
                }
                _ => problems.push(malformed("delayed_exchanges", key.value())),
            }
        }
    }
    let mut by_number: BTreeMap<u32, Sum> = BTreeMap::new();
    let mut by_name: BTreeMap<(String, String), Sum> = BTreeMap::new();
    if let Some(table) = open(FIRST_LAYOUT_DELAYED)? {
        first_layout(&table, &mut by_name, problems).map_err(fail)?;
    }
    if format <= 2 {
        if let Some(table) = open(HELD_V2)? {
            format2(&table, &mut by_number, problems).map_err(fail)?;
        }
    } else if let Some(messages) = open(HELD_MESSAGES)? {
        let holder = |n: u32| rows.get(&n).map(|(_, x, _)| x.clone());
        held_messages(&messages, holder, &mut by_number, problems).map_err(fail)?;
        if let Some(due) = open(HELD_DUE)? {
            due_index(&due, &messages, format, problems).map_err(fail)?;
        }
    }
    let mut out = Vec::new();
    for (number, sum) in by_number {
        match rows.get(&number) {
            Some((vhost, exchange, row)) => {
                if (row.count, row.bytes) != (sum.messages, sum.bytes) {
                    problems.push(format!(
                        "delayed_exchanges row of '{exchange}' in vhost '{vhost}' says {} \
                         messages of {} octets; it holds {} of {}",
                        row.count, row.bytes, sum.messages, sum.bytes
                    ));
                }
                let slot = by_name
                    .entry((vhost.clone(), exchange.clone()))
                    .or_default();
                *slot = merge(std::mem::take(slot), sum);
            }
            None => {
                problems.push(format!(
                    "{} held messages under exchange number {number}, which no \
                     delayed_exchanges row names",
                    sum.messages
                ));
                out.push(tally_of(String::new(), None, &sum));
            }
        }
    }
    for (vhost, exchange, row) in rows.values() {
        if row.count > 0 && !by_name.contains_key(&(vhost.clone(), exchange.clone())) {
            problems.push(format!(
                "delayed_exchanges row of '{exchange}' in vhost '{vhost}' says {} messages; it \
                 holds none",
                row.count
            ));
        }
    }
    out.extend(
        by_name
            .into_iter()
            .map(|((vhost, exchange), sum)| tally_of(vhost, Some(exchange), &sum)),
    );
    Ok(out)
}

fn merge(a: Sum, b: Sum) -> Sum {
    Sum {
        messages: a.messages + b.messages,
        bytes: a.bytes + b.bytes,
        first_due_ms: match (a.first_due_ms, b.first_due_ms) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        },
    }
}

fn tally_of(vhost: String, exchange: Option<String>, sum: &Sum) -> HeldTally {
    HeldTally {
        vhost,
        exchange,
        messages: sum.messages,
        bytes: sum.bytes,
        first_due_ms: sum.first_due_ms,
    }
}

fn malformed(table: &str, key: &[u8]) -> String {
    format!("record {} in table {table} is malformed", hex(key))
}

/// Format 2's first layout: `delayed`, by seq, naming its exchange.
fn first_layout(
    table: &Table,
    by_name: &mut BTreeMap<(String, String), Sum>,
    problems: &mut Vec<String>,
) -> std::result::Result<(), redb::StorageError> {
    for entry in table.iter()? {
        let (key, value) = entry?;
        let mut v = Dec::new(value.value());
        let (Some(due_ms), Some(vhost), Some(exchange)) = (v.u64(), v.str16(), v.str16()) else {
            problems.push(malformed("delayed", key.value()));
            continue;
        };
        match PackedMessage::body_len_of(v.rest()) {
            Some(body) => by_name
                .entry((vhost, exchange))
                .or_default()
                .add(body as u64, due_ms),
            None => problems.push(malformed("delayed", key.value())),
        }
    }
    Ok(())
}

/// Format 2: `held`, by exchange number, due time and seq.
fn format2(
    table: &Table,
    by_number: &mut BTreeMap<u32, Sum>,
    problems: &mut Vec<String>,
) -> std::result::Result<(), redb::StorageError> {
    for entry in table.iter()? {
        let (key, value) = entry?;
        let value = value.value();
        let decoded = split_key(key.value())
            .zip(be_u64(value))
            .filter(|(_, body)| {
                PackedMessage::body_len_of(&value[8..]).is_some_and(|len| len as u64 == *body)
            });
        match decoded {
            Some(((number, due_ms, _), body)) => {
                by_number.entry(number).or_default().add(body, due_ms)
            }
            None => problems.push(malformed("held", key.value())),
        }
    }
    Ok(())
}

/// Formats 3 and 4: `held_messages`, by seq, each message decoded.
fn held_messages(
    table: &Table,
    holder: impl Fn(u32) -> Option<String>,
    by_number: &mut BTreeMap<u32, Sum>,
    problems: &mut Vec<String>,
) -> std::result::Result<(), redb::StorageError> {
    for entry in table.iter()? {
        let (key, value) = entry?;
        let Some(header) = HeldHeader::read(value.value()) else {
            problems.push(malformed("held_messages", key.value()));
            continue;
        };
        let name = holder(header.exchange).unwrap_or_default();
        let decoded = decode_held_value(value.value(), &name)
            .filter(|(_, m)| m.body_len() as u64 == header.body_octets);
        if decoded.is_none() || key.value().len() != 8 {
            problems.push(malformed("held_messages", key.value()));
        }
        by_number
            .entry(header.exchange)
            .or_default()
            .add(header.body_octets, header.due_ms);
    }
    Ok(())
}

/// Formats 3 and 4: every `held_due` entry names a held message of its exchange due at its
/// time, and there are as many entries as messages.
fn due_index(
    due: &Table,
    messages: &Table,
    format: u32,
    problems: &mut Vec<String>,
) -> std::result::Result<(), redb::StorageError> {
    let mut entries = 0u64;
    for entry in due.iter()? {
        let (key, value) = entry?;
        let Some(holds) = due_holds(key.value(), value.value(), format) else {
            problems.push(malformed("held_due", key.value()));
            continue;
        };
        for (number, seq, due_ms) in holds {
            entries += 1;
            let named = messages
                .get(&seq.to_be_bytes()[..])?
                .and_then(|v| HeldHeader::read(v.value()));
            if !named.is_some_and(|h| h.exchange == number && h.due_ms == due_ms) {
                problems.push(format!(
                    "held_due record {} names seq {seq} due at {due_ms}, which \
                     held_messages does not hold",
                    hex(key.value())
                ));
            }
        }
    }
    let held = messages.len()?;
    if entries != held {
        problems.push(format!(
            "held_due has {entries} entries for {held} held messages"
        ));
    }
    Ok(())
}

/// (exchange number, seq, due ms) of each hold a `held_due` record lists.
fn due_holds(key: &[u8], value: &[u8], format: u32) -> Option<Vec<(u32, u64, u64)>> {
    let number = u32::from_be_bytes(key.get(..4)?.try_into().ok()?);
    if format >= 4 {
        let record = HeldDueRecord::split(number, key, value)?;
        return Some(
            record
                .holds()
                .map(|(seq, due)| (number, seq, due))
                .collect(),
        );
    }
    // Format 3: one hold per key, `… ‖ u64 seq`, value the `u32` offset in the bucket.
    if key.len() != 21 || value.len() != 4 {
        return None;
    }
    let start = be_u64(&key[4..])?;
    let seq = be_u64(&key[13..])?;
    let offset = u32::from_be_bytes(value.try_into().ok()?);
    Some(vec![(number, seq, start + u64::from(offset))])
}
