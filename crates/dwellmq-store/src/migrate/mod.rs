//! Stores written by earlier formats: upgraded in place when they open, and looked at without
//! writing (`inspect`). DESIGN.md ("Opening", "Upgrades") has the rules.
//!
//! Every format a landed main has written since format 2 opens: the store converts it to the
//! current format in **one write transaction** when it opens it, before anything else writes.
//! A crash during the upgrade leaves the file in its old format (the transaction is not
//! committed), and the next start upgrades it again. Each step converts one format to the next
//! and knows only those two; a store of format 2 takes every step in turn, within the same
//! transaction. Only the tables of delayed messages and `queue_counts` ever changed: the
//! definitions, `messages` and `message_state` read the same in every format.
//!
//! A new format comes with its step here and a fixture written by the code of the last commit
//! that wrote the format before it (crates/dwellmq-store/tests/fixtures/).

mod counts;
mod held_due_v4;
mod held_first_layout;
mod held_v2;
pub(crate) mod inspect;
pub(crate) mod overlay;
mod streams_v5;
pub(crate) mod tally;
pub(crate) mod tally_held;
pub(crate) mod tally_stream;

use std::path::Path;

use redb::{Database, ReadableDatabase, TableDefinition, TableError, WriteTransaction};

use crate::error::{Result, StoreError};
use crate::layout::{Bin, ALL_TABLES, FORMAT_VERSION, META, META_FORMAT, QUEUE_COUNTS};

/// The oldest format this build opens (and upgrades).
pub const OLDEST_FORMAT: u32 = 2;

/// Whether this build opens a store of `format` (upgrading it if older than its own).
pub(crate) fn can_open(format: u32) -> bool {
    (OLDEST_FORMAT..=FORMAT_VERSION).contains(&format)
}

/// Format 2's held messages (format 3 split them into `held_messages` and `held_due`).
pub(crate) const HELD_V2: Bin = TableDefinition::new("held");
/// The tables of format 2's first layout (what main wrote for its first hour of format 2):
/// every hold as four records.
pub(crate) const FIRST_LAYOUT_DELAYED: Bin = TableDefinition::new("delayed");
pub(crate) const FIRST_LAYOUT_TABLES: [Bin; 4] = [
    FIRST_LAYOUT_DELAYED,
    TableDefinition::new("delayed_index"),
    TableDefinition::new("delayed_by_exchange"),
    TableDefinition::new("delayed_counts"),
];

/// What a step could not do.
#[derive(Debug)]
pub(crate) enum StepError {
    /// redb failed.
    Database(String),
    /// A record of the old format does not decode: (table, key).
    Corrupt(&'static str, Vec<u8>),
}

macro_rules! from_redb {
    ($($error:ty),*) => {$(
        impl From<$error> for StepError {
            fn from(e: $error) -> Self {
                StepError::Database(e.to_string())
            }
        }
    )*};
}

from_redb!(
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError
);

pub(crate) type StepResult<T> = std::result::Result<T, StepError>;

/// What an upgrade did, for the log.
#[derive(Debug, Default)]
struct Upgraded {
    first_layout_holds: u64,
    holds_split: u64,
    due_entries: u64,
    queues_counted: u64,
    stream_tables: u64,
}

/// Whether a store of `format` needs an upgrade: an older format, or a store of this format
/// that lacks `queue_counts` (the first builds of format 4 lacked it; an older store upgrades
/// anyway).
pub(crate) fn needed(db: &Database, format: u32) -> Result<bool> {
    if format != FORMAT_VERSION {
        return Ok(true);
    }
    let read = db.begin_read().map_err(|e| StoreError::Database {
        path: Default::default(),
        reason: e.to_string(),
    })?;
    Ok(matches!(
        read.open_table(QUEUE_COUNTS),
        Err(TableError::TableDoesNotExist(_))
    ))
}

/// Brings a store of `format` (which [`can_open`]) to this build's format, in one commit; does
/// nothing (and says `false`) when it is already there.
pub(crate) fn upgrade(db: &Database, path: &Path, format: u32, quick_repair: bool) -> Result<bool> {
    let failed = |e: StepError| match e {
        StepError::Database(reason) => StoreError::Database {
            path: path.to_path_buf(),
            reason: format!("upgrading from store format {format}: {reason}"),
        },
        StepError::Corrupt(table, key) => StoreError::Corrupt {
            path: path.to_path_buf(),
            table,
            key: crate::codec::hex(&key),
        },
    };
    if !needed(db, format).map_err(|e| with_path(e, path))? {
        return Ok(false);
    }
    let started = std::time::Instant::now();
    let mut tx = db.begin_write().map_err(|e| failed(e.into()))?;
    tx.set_quick_repair(quick_repair);
    let done = steps(&tx, format, now_ms()).map_err(failed)?;
    tx.commit().map_err(|e| failed(e.into()))?;
    tracing::info!(
        path = %path.display(),
        from = format,
        to = FORMAT_VERSION,
        first_layout_holds = done.first_layout_holds,
        holds_split = done.holds_split,
        due_entries = done.due_entries,
        queues_counted = done.queues_counted,
        stream_tables = done.stream_tables,
        ms = started.elapsed().as_millis() as u64,
        "upgraded the store"
    );
    Ok(true)
}

/// Every step from `format` on, in order, in `tx`.
fn steps(tx: &WriteTransaction, format: u32, now_ms: u64) -> StepResult<Upgraded> {
    let mut done = Upgraded::default();
    if format <= 2 {
        done.first_layout_holds = held_first_layout::to_held(tx)?;
        done.holds_split = held_v2::to_format3(tx, now_ms)?;
    }
    if format <= 3 {
        done.due_entries = held_due_v4::to_format4(tx)?;
    }
    if !table_exists(tx, QUEUE_COUNTS)? {
        done.queues_counted = counts::count_queues(tx)?;
    }
    if format <= 4 {
        done.stream_tables = streams_v5::to_format5(tx)?;
    }
    // Tables a format lacked (`permissions` in the first format-2 stores): a read never meets
    // a missing table.
    for table in ALL_TABLES {
        tx.open_table(table)?;
    }
    let mut meta = tx.open_table(META)?;
    meta.insert(META_FORMAT, &FORMAT_VERSION.to_be_bytes()[..])?;
    Ok(done)
}

pub(crate) fn table_exists(tx: &WriteTransaction, table: Bin) -> StepResult<bool> {
    let name = redb::TableHandle::name(&table);
    Ok(tx
        .list_tables()?
        .any(|t| redb::TableHandle::name(&t) == name))
}

/// The clock, once: a held message's bucket width depends on how far ahead it is due (an
/// upgraded hold is bucketed as if held now; widths affect cost only, never what is read).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn with_path(e: StoreError, path: &Path) -> StoreError {
    match e {
        StoreError::Database { reason, .. } => StoreError::Database {
            path: path.to_path_buf(),
            reason,
        },
        other => other,
    }
}

/// A `u64` from the first 8 octets of `bytes`.
pub(crate) fn be_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}
