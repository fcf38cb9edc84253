//! Format 2's first layout to format 2: the holds main wrote during the first hour of format 2
//! (before its `held` table), each as a `delayed` record keyed by seq (`u64 due_ms ‖ str16
//! vhost ‖ str16 exchange ‖ packed message`) plus three index and count records, become
//! `held` records under their exchange's number.
//!
//! A store of that layout opened since by a later format-2 build may hold both: the later
//! build wrote `held` and `delayed_exchanges` and never read `delayed`. Those holds were
//! confirmed and never released, so both sets are kept, each exchange's row counting both.

use std::collections::BTreeMap;

use dwellmq_core::PackedMessage;
use redb::{ReadableTable, WriteTransaction};

use super::{
    be_u64, table_exists, StepError, StepResult, FIRST_LAYOUT_DELAYED, FIRST_LAYOUT_TABLES, HELD_V2,
};
use crate::codec::{Dec, Enc};
use crate::layout::{name_key, DELAYED_EXCHANGES, META, META_NEXT_DELAYED_EXCHANGE};
use crate::records::HeldBy;

/// Moves every `delayed` record into `held`; returns how many.
pub(crate) fn to_held(tx: &WriteTransaction) -> StepResult<u64> {
    if !table_exists(tx, FIRST_LAYOUT_DELAYED)? {
        return Ok(0);
    }
    let mut rows = read_rows(tx)?;
    let mut next = next_number(tx, &rows)?;
    let mut moved = 0;
    {
        let old = tx.open_table(FIRST_LAYOUT_DELAYED)?;
        let mut held = tx.open_table(HELD_V2)?;
        for entry in old.iter()? {
            let (key, value) = entry?;
            let corrupt = || StepError::Corrupt("delayed", key.value().to_vec());
            let seq = be_u64(key.value())
                .filter(|_| key.value().len() == 8)
                .ok_or_else(corrupt)?;
            let mut v = Dec::new(value.value());
            let (Some(due_ms), Some(vhost), Some(exchange)) = (v.u64(), v.str16(), v.str16())
            else {
                return Err(corrupt());
            };
            let packed = v.rest();
            let body = PackedMessage::body_len_of(packed).ok_or_else(corrupt)? as u64;
            let row = rows
                .entry(name_key(&[&vhost, &exchange]))
                .or_insert_with(|| {
                    next += 1;
                    HeldBy {
                        number: next - 1,
                        count: 0,
                        bytes: 0,
                    }
                });
            row.count += 1;
            row.bytes += body;
            let held_key = held_key(row.number, due_ms, seq);
            let mut record = Enc::new().u64(body).done();
            record.extend_from_slice(packed);
            if held.insert(&held_key[..], &record[..])?.is_some() {
                return Err(StepError::Corrupt("held", held_key.to_vec()));
            }
            moved += 1;
        }
    }
    {
        let mut table = tx.open_table(DELAYED_EXCHANGES)?;
        for (name, row) in &rows {
            table.insert(&name[..], &row.value()[..])?;
        }
        let mut meta = tx.open_table(META)?;
        meta.insert(
            META_NEXT_DELAYED_EXCHANGE,
            &u64::from(next).to_be_bytes()[..],
        )?;
    }
    for table in FIRST_LAYOUT_TABLES {
        tx.delete_table(table)?;
    }
    Ok(moved)
}

/// The `delayed_exchanges` rows a later format-2 build may have written.
fn read_rows(tx: &WriteTransaction) -> StepResult<BTreeMap<Vec<u8>, HeldBy>> {
    let table = tx.open_table(DELAYED_EXCHANGES)?;
    let mut rows = BTreeMap::new();
    for entry in table.iter()? {
        let (key, value) = entry?;
        let row = HeldBy::decode(value.value())
            .ok_or_else(|| StepError::Corrupt("delayed_exchanges", key.value().to_vec()))?;
        rows.insert(key.value().to_vec(), row);
    }
    Ok(rows)
}

/// The first exchange number no row has and the counter has not given.
fn next_number(tx: &WriteTransaction, rows: &BTreeMap<Vec<u8>, HeldBy>) -> StepResult<u32> {
    let meta = tx.open_table(META)?;
    let counter = match meta.get(META_NEXT_DELAYED_EXCHANGE)? {
        None => 0,
        Some(v) => be_u64(v.value()).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
    };
    let above_rows = rows.values().map(|r| r.number.saturating_add(1)).max();
    Ok(counter.max(above_rows.unwrap_or(0)))
}

/// A format-2 `held` key: `u32 number ‖ u64 due_ms ‖ u64 seq`.
pub(crate) fn held_key(number: u32, due_ms: u64, seq: u64) -> [u8; 20] {
    let mut key = [0u8; 20];
    key[..4].copy_from_slice(&number.to_be_bytes());
    key[4..12].copy_from_slice(&due_ms.to_be_bytes());
    key[12..].copy_from_slice(&seq.to_be_bytes());
    key
}
