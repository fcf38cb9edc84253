//! Looking at a data directory without writing to it (`dwellmq --check`): its format, whether
//! this build opens it (upgrading it or not), whether it needs a repair, redb's check of every
//! page, and what it holds, record by record.
//!
//! Nothing is written, not even redb's header: the file is opened read-only, and redb's
//! writable open (which the page check and a pending repair need) runs over an [`Overlay`] that
//! keeps its writes in memory. A store of an earlier format is read in its own layout, not
//! upgraded.

use std::fs::{File, OpenOptions};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use redb::backends::FileBackend;
use redb::{Builder, DatabaseError, ReadTransaction, ReadableDatabase};

use super::can_open;
use super::overlay::Overlay;
use super::tally::{self, Tally};
use crate::error::{Result, StoreError};
use crate::layout::{DB_FILE, LOCK_FILE, QUEUE_COUNTS};
use crate::open::{open_error, panic_message, read_meta, Meta};

/// What [`inspect`] found.
#[derive(Debug, Clone)]
pub struct Inspection {
    /// The store file.
    pub path: PathBuf,
    /// Its `meta["format"]`.
    pub format: u32,
    /// What this build does with it.
    pub opens: Opens,
    /// It was not shut down cleanly and was written without saving redb's allocator state:
    /// the next open repairs it (which rewrites redb's bookkeeping, not records).
    pub needs_repair: bool,
    /// redb's check of every page's checksum.
    pub pages: PageCheck,
    /// What it holds; `None` for a format this build cannot read.
    pub tally: Option<Tally>,
    /// Records that do not decode, and counts that disagree with the records they count.
    pub problems: Vec<String>,
}

/// What this build does with a store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opens {
    /// It opens it as it is.
    AsIs,
    /// It upgrades it when it opens it, in one commit, taking these steps.
    Upgrading(Vec<&'static str>),
    /// It refuses it (newer, or older than any format it upgrades), leaving it untouched.
    Refused,
}

/// redb's own check of the file (`Database::check_integrity`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageCheck {
    /// Every page of the committed trees verified.
    Verified,
    /// The check had to repair redb's bookkeeping (in memory here; an open does it on disk).
    Repaired,
    /// The check failed: what redb said.
    Failed(String),
}

/// Looks at the store in `dir` without writing anything there. Refused like an open when
/// another process holds the directory, or when the file is missing, foreign or unreadable.
pub fn inspect(dir: &Path) -> Result<Inspection> {
    let path = dir.join(DB_FILE);
    let _lock = lock_if_present(dir)?;
    let file = || File::open(&path).map_err(|e| StoreError::io(&path, "opening the store file", e));
    if file()?
        .metadata()
        .map_err(|e| StoreError::io(&path, "reading the store file", e))?
        .len()
        == 0
    {
        return Err(StoreError::Damaged {
            path,
            reason: "the file is empty".into(),
        });
    }
    let needs_repair = guarded(&path, || {
        match builder().open_read_only_with_backend(backend(file()?)?) {
            Ok(db) => {
                let _ = db.close();
                Ok(false)
            }
            Err(DatabaseError::RepairAborted) => Ok(true),
            Err(e) => Err(open_error(&path, e)),
        }
    })?;
    guarded(&path, || {
        let overlay = Overlay::new(Box::new(backend(file()?)?))
            .map_err(|e| StoreError::io(&path, "reading the store file", e))?;
        let mut db = builder()
            .create_with_backend(overlay)
            .map_err(|e| open_error(&path, e))?;
        let pages = match db.check_integrity() {
            Ok(true) => PageCheck::Verified,
            Ok(false) => PageCheck::Repaired,
            Err(e) => PageCheck::Failed(e.to_string()),
        };
        let format = match read_meta(&db, &path)? {
            Meta::Dwellmq { format } => format,
            Meta::Absent { .. } => {
                return Err(StoreError::Foreign {
                    path: path.clone(),
                    reason: "a redb database without dwellmq's meta table".into(),
                })
            }
        };
        let read = db.begin_read().map_err(|e| damaged(&path, e))?;
        let mut problems = Vec::new();
        let (opens, tally) = if can_open(format) {
            let tally = tally::tally(&read, format, &path, &mut problems)?;
            (opens(&read, format, &path)?, Some(tally))
        } else {
            (Opens::Refused, None)
        };
        Ok(Inspection {
            path: path.clone(),
            format,
            opens,
            needs_repair,
            pages,
            tally,
            problems,
        })
    })
}

/// The upgrade steps an open takes on a store of `format` (see `migrate::steps`).
fn opens(read: &ReadTransaction, format: u32, path: &Path) -> Result<Opens> {
    let exists = |name: &str| -> Result<bool> {
        Ok(read
            .list_tables()
            .map_err(|e| damaged(path, e))?
            .any(|t| redb::TableHandle::name(&t) == name))
    };
    let mut steps = Vec::new();
    if format <= 2 && exists("delayed")? {
        steps.push("held messages of format 2's first layout into its `held` table");
    }
    if format <= 2 {
        steps.push("format 2's held messages into `held_messages` and `held_due` (format 3)");
    }
    if format <= 3 {
        steps.push("format 3's `held_due` entries into records (format 4)");
    }
    if !exists(redb::TableHandle::name(&QUEUE_COUNTS))? {
        steps.push("`queue_counts` counted from `messages`");
    }
    if format <= 4 {
        steps.push("the stream tables created (format 5)");
    }
    Ok(if steps.is_empty() {
        Opens::AsIs
    } else {
        Opens::Upgrading(steps)
    })
}

/// The directory's lock, when it has a lock file (a directory without one is not created
/// one: nothing is written). Refused as an open is when another process holds it.
fn lock_if_present(dir: &Path) -> Result<Option<File>> {
    let lock = dir.join(LOCK_FILE);
    let file = match OpenOptions::new().read(true).open(&lock) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StoreError::io(&lock, "opening the lock file", e)),
    };
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => {
            let pid = std::fs::read_to_string(&lock).unwrap_or_default();
            let pid = pid.trim();
            Err(StoreError::Locked {
                dir: dir.to_path_buf(),
                lock,
                holder: if pid.is_empty() {
                    String::new()
                } else {
                    format!(", pid {pid}")
                },
            })
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(StoreError::io(&lock, "locking the lock file", e))
        }
    }
}

/// redb's page cache is 1 GiB unless told: a check reads every page once, so a small one.
fn builder() -> Builder {
    let mut builder = Builder::new();
    builder.set_cache_size(16 << 20);
    builder
}

fn backend(file: File) -> Result<FileBackend> {
    // Infallible unless redb's experimental API says otherwise.
    FileBackend::new(file).map_err(|e| StoreError::Database {
        path: PathBuf::new(),
        reason: e.to_string(),
    })
}

/// Runs `f`, turning a panic of redb's debug assertions on a damaged file into `Damaged`.
fn guarded<T>(path: &Path, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        Err(StoreError::Damaged {
            path: path.to_path_buf(),
            reason: panic_message(&panic),
        })
    })
}

pub(crate) fn damaged(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Damaged {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}
