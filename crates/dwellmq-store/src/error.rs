//! What can go wrong, with the file it concerns: an operator reading a start-up error must know
//! which file to look at, and that it was left as it was.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// A store error. `Clone`, because one failed commit fails every submission it carried.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Another broker (or another store in this process) holds the data directory.
    #[error("data directory {dir} is in use by another dwellmq{holder} (lock file {lock})")]
    Locked {
        /// The data directory.
        dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
        /// ", pid N" when the lock file names its holder.
        holder: String,
    },
    /// The file is not a dwellmq store (another program's file or another redb database).
    #[error("{path} is not a dwellmq store ({reason}); it was left untouched")]
    Foreign {
        /// The file.
        path: PathBuf,
        /// What gave it away.
        reason: String,
    },
    /// The file is a store but cannot be read.
    #[error("{path} is damaged ({reason}); it was left untouched")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file was written in a format this build does not read (a newer one, or one older
    /// than any it upgrades).
    #[error("{path} has store format {found}; this dwellmq reads formats {oldest} to {supported}; it was left untouched")]
    Version {
        /// The file.
        path: PathBuf,
        /// The format found in the file.
        found: u32,
        /// The format this build writes (and reads).
        supported: u32,
        /// The oldest format this build reads (upgrading it in place).
        oldest: u32,
    },
    /// A record in a table cannot be decoded.
    #[error("{path}: record {key} in table {table} is malformed")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The table.
        table: &'static str,
        /// The record's key, hex.
        key: String,
    },
    /// The disk is full: nothing of the commit was written.
    #[error("{path}: disk full, the commit was not written")]
    DiskFull {
        /// The file.
        path: PathBuf,
    },
    /// An I/O error (open, read, write or fsync).
    #[error("{path}: {context}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        context: &'static str,
        /// The error.
        source: Arc<io::Error>,
    },
    /// Any other failure of the database (a write transaction that could not start or finish
    /// for a reason other than I/O).
    #[error("{path}: {reason}")]
    Database {
        /// The file.
        path: PathBuf,
        /// What redb said.
        reason: String,
    },
    /// The commit was failed on purpose ([`crate::Store::fail_next_commits`], the test
    /// double's "fail the next writes"): nothing of it was written, as for a real failure.
    #[error("{path}: the commit failed (injected by a test)")]
    Injected {
        /// The file.
        path: PathBuf,
    },
    /// The store was closed (or its writer is gone, or the file is not open because reopening
    /// it after a write failure failed so far).
    #[error("the store is closed")]
    Closed,
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, context: &'static str, source: io::Error) -> Self {
        let path = path.into();
        if source.kind() == io::ErrorKind::StorageFull {
            return StoreError::DiskFull { path };
        }
        StoreError::Io {
            path,
            context,
            source: Arc::new(source),
        }
    }

    /// Whether writes may succeed again later (a full disk, a failed write or fsync) as opposed
    /// to a fault of the data itself: the broker blocks publishers while this holds.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::DiskFull { .. }
                | StoreError::Io { .. }
                | StoreError::Database { .. }
                | StoreError::Injected { .. }
        )
    }
}

/// Results of this crate.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
