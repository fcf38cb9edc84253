//! Opening the data directory: its lock file, then the database file, checked before anything
//! is written to it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Builder, Database, DatabaseError, ReadableDatabase, StorageError, TableError};

use crate::backend::{file_backend, BackendFactory, DynBackend};
use crate::error::{Result, StoreError};
use crate::layout::{
    ALL_TABLES, APP, DB_FILE, FORMAT_VERSION, LOCK_FILE, META, META_APP, META_FORMAT, SPILLED,
};
use crate::migrate::{self, overlay::Overlay};

/// How a store is opened.
#[derive(Clone)]
pub struct StoreOptions {
    /// redb's page cache. Bodies held for days should not sit in RAM, so this is small.
    pub cache_bytes: usize,
    /// Saves the allocator state with every commit so that a start after a crash needs no full
    /// scan of the file (slower commits, a fast restart however large the store).
    pub quick_repair: bool,
    /// At most this many submissions go into one commit.
    pub max_batch: usize,
    /// A batch stops taking submissions once it holds this many ops (a single larger
    /// submission still commits whole).
    pub max_batch_ops: usize,
    /// Storage other than the file (fault injection in tests).
    pub backend: Option<BackendFactory>,
    /// Called on the writer thread after the completions of each batch: completions may
    /// gather their results and send them once per batch from here (one confirm frame per
    /// channel instead of one per message).
    pub after_batch: Option<std::sync::Arc<dyn Fn() + Send + Sync>>,
    /// Told when the writer's alarms go on and off (see [`crate::StoreAlarm`]).
    pub on_alarm: Option<crate::alarm::AlarmHook>,
    /// The backlog alarm goes on when more than this many octets (messages' packed size plus
    /// 64 per op) are queued for the writer and not yet committed...
    pub backlog_high: u64,
    /// ...and off once at most this many are.
    pub backlog_low: u64,
    /// After a failed commit the writer probes with an empty commit, first after 10 ms, then
    /// at twice the interval each time, up to this: the write alarm clears by itself once the
    /// disk works again.
    pub retry_interval: std::time::Duration,
    /// Drops the file's cached pages after a failed commit, before the file is reopened and
    /// verified (so that nothing the disk does not hold is read back); `None`: the kernel's
    /// (`posix_fadvise(DONTNEED)` on Linux). The fault backend brings its own.
    pub forget_cache: Option<ForgetCache>,
    /// Makes a directory's entries durable (`fsync` of the directory), called once the
    /// database file exists: a new file's entry is not on disk until then. `None`: the real
    /// fsync. The fault backend brings its own.
    pub sync_dir: Option<SyncDir>,
}

/// See [`StoreOptions::forget_cache`].
pub type ForgetCache = Arc<dyn Fn(&Path) + Send + Sync>;

/// See [`StoreOptions::sync_dir`].
pub type SyncDir = Arc<dyn Fn(&Path) -> io::Result<()> + Send + Sync>;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            cache_bytes: 64 << 20,
            quick_repair: true,
            max_batch: 4096,
            max_batch_ops: 65_536,
            backend: None,
            after_batch: None,
            on_alarm: None,
            backlog_high: 64 << 20,
            backlog_low: 32 << 20,
            retry_interval: std::time::Duration::from_millis(500),
            forget_cache: None,
            sync_dir: None,
        }
    }
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("cache_bytes", &self.cache_bytes)
            .field("quick_repair", &self.quick_repair)
            .field("max_batch", &self.max_batch)
            .field("max_batch_ops", &self.max_batch_ops)
            .field("backend", &self.backend.as_ref().map(|_| "custom"))
            .field("after_batch", &self.after_batch.is_some())
            .field("on_alarm", &self.on_alarm.is_some())
            .field("backlog_high", &self.backlog_high)
            .field("backlog_low", &self.backlog_low)
            .field("retry_interval", &self.retry_interval)
            .finish()
    }
}

/// Takes the directory's lock file, or says who holds it.
pub(crate) fn lock_dir(dir: &Path) -> Result<File> {
    fs::create_dir_all(dir).map_err(|e| StoreError::io(dir, "creating the data directory", e))?;
    let lock = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
        .map_err(|e| StoreError::io(&lock, "opening the lock file", e))?;
    // A lock our own process holds after its store closed is a forked child's copy of the
    // descriptor, kept until the child's exec closes it (milliseconds on a loaded machine):
    // an embedder that spawns processes while it restarts the broker would otherwise fail at
    // random. Another holder is answered at once.
    let patience = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(fs::TryLockError::WouldBlock) => {
                let mut content = String::new();
                let _ = file
                    .rewind()
                    .and_then(|()| file.read_to_string(&mut content));
                let pid = content.trim().parse::<u32>().ok();
                if pid == Some(std::process::id()) && std::time::Instant::now() < patience {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    continue;
                }
                return Err(StoreError::Locked {
                    dir: dir.to_path_buf(),
                    lock,
                    holder: pid.map(|pid| format!(", pid {pid}")).unwrap_or_default(),
                });
            }
            Err(fs::TryLockError::Error(e)) => {
                return Err(StoreError::io(&lock, "locking the lock file", e))
            }
        }
    }
    // The holder's pid, for the message a second broker prints. Best effort: the lock is
    // what counts.
    let _ = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()));
    Ok(file)
}

/// Opens (or creates) the database file and checks it is a dwellmq store of this format.
pub(crate) struct Opener {
    pub(crate) path: PathBuf,
    pub(crate) options: StoreOptions,
}

impl Opener {
    pub(crate) fn new(dir: &Path, options: StoreOptions) -> Self {
        Opener {
            path: dir.join(DB_FILE),
            options,
        }
    }

    pub(crate) fn open(&self) -> Result<Database> {
        self.open_upgrading().map(|(db, _)| db)
    }

    /// Opens the file as [`Opener::open`] does; also says from which format it was upgraded,
    /// if it was.
    pub(crate) fn open_upgrading(&self) -> Result<(Database, Option<u32>)> {
        let path = &self.path;
        // redb initialises an empty file; an empty file where a store was expected is a store
        // that lost its contents, not a new one.
        if let Ok(meta) = fs::metadata(path) {
            if meta.len() == 0 && self.options.backend.is_none() {
                return Err(StoreError::Damaged {
                    path: path.clone(),
                    reason: "the file is empty".into(),
                });
            }
        }
        let exists = fs::metadata(path).is_ok_and(|m| m.len() > 0);
        if exists {
            self.check_before_writing()?;
        }
        let db = self
            .open_database(|builder, backend| builder.create_with_backend(backend))?
            .map_err(|e| open_error(path, e))?;
        let upgraded = match self.check_meta(&db)? {
            Meta::Dwellmq { format } => {
                self.supported(format)?;
                self.upgrade(&db, format)?.then_some(format)
            }
            Meta::Absent { tables: 0 } => {
                self.initialize(&db)?;
                None
            }
            Meta::Absent { .. } => return Err(self.foreign_redb()),
        };
        Ok((db, upgraded))
    }

    /// Upgrades a store of an earlier format in place (see `migrate`); whether it did.
    fn upgrade(&self, db: &Database, format: u32) -> Result<bool> {
        let path = &self.path;
        let quick_repair = self.options.quick_repair;
        // As at the open: a damaged old record must be an error, not a panic.
        catch_unwind(AssertUnwindSafe(|| {
            migrate::upgrade(db, path, format, quick_repair)
        }))
        .unwrap_or_else(|panic| {
            Err(StoreError::Damaged {
                path: path.clone(),
                reason: panic_message(&panic),
            })
        })
    }

    /// Looks at an existing file without writing to it (a writable open of a redb file writes
    /// its header even if nothing else is done), so that a foreign file, or one of a format this
    /// build cannot read, is refused as it is. A file not closed cleanly cannot be opened
    /// read-only (redb wants to repair it first); it is opened writable over an [`Overlay`]
    /// instead, which repairs it in memory: the file itself is repaired only by the writable
    /// open that follows, once its format is known to be one this build opens.
    fn check_before_writing(&self) -> Result<()> {
        let opened =
            self.open_database(|builder, backend| builder.open_read_only_with_backend(backend))?;
        let meta = match opened {
            Ok(db) => {
                let meta = self.check_meta(&db);
                let _ = db.close();
                meta?
            }
            Err(DatabaseError::RepairAborted) => self.check_repaired_in_memory()?,
            Err(e) => return Err(open_error(&self.path, e)),
        };
        match meta {
            Meta::Absent { tables } if tables > 0 => Err(self.foreign_redb()),
            Meta::Dwellmq { format } => self.supported(format),
            Meta::Absent { .. } => Ok(()),
        }
    }

    /// The meta table of a file that needs a repair, read after repairing it in memory.
    fn check_repaired_in_memory(&self) -> Result<Meta> {
        let db = self
            .open_database(|builder, backend| {
                let overlay = Overlay::new(Box::new(backend)).map_err(redb::StorageError::from)?;
                builder.create_with_backend(overlay)
            })?
            .map_err(|e| open_error(&self.path, e))?;
        let meta = self.check_meta(&db);
        drop(db);
        meta
    }

    /// Refuses a format this build does not open.
    fn supported(&self, format: u32) -> Result<()> {
        if migrate::can_open(format) {
            return Ok(());
        }
        Err(StoreError::Version {
            path: self.path.clone(),
            found: format,
            supported: FORMAT_VERSION,
            oldest: migrate::OLDEST_FORMAT,
        })
    }

    fn foreign_redb(&self) -> StoreError {
        StoreError::Foreign {
            path: self.path.clone(),
            reason: "a redb database without dwellmq's meta table".into(),
        }
    }

    /// Runs `open` on a fresh backend. The outer error is the backend's or a panic; the inner
    /// one is redb's, for the caller to interpret.
    fn open_database<D>(
        &self,
        open: impl FnOnce(&Builder, DynBackend) -> std::result::Result<D, DatabaseError>,
    ) -> Result<std::result::Result<D, DatabaseError>> {
        let path = &self.path;
        let backend = match &self.options.backend {
            Some(factory) => factory(path),
            None => file_backend(path),
        }
        .map_err(|e| StoreError::io(path, "opening the store file", e))?;
        let mut builder = Builder::new();
        builder.set_cache_size(self.options.cache_bytes);
        // redb checks some invariants of what it reads with debug assertions; a damaged file
        // must be an error at start, not a panic, in every build.
        match catch_unwind(AssertUnwindSafe(|| open(&builder, DynBackend(backend)))) {
            Ok(opened) => Ok(opened),
            Err(panic) => Err(StoreError::Damaged {
                path: path.clone(),
                reason: panic_message(&panic),
            }),
        }
    }

    fn check_meta(&self, db: &impl ReadableDatabase) -> Result<Meta> {
        read_meta(db, &self.path)
    }

    fn initialize(&self, db: &Database) -> Result<()> {
        let path = &self.path;
        let fail = |e: &dyn std::fmt::Display| StoreError::Database {
            path: path.clone(),
            reason: format!("initializing: {e}"),
        };
        let tx = db.begin_write().map_err(|e| fail(&e))?;
        for table in ALL_TABLES {
            tx.open_table(table).map_err(|e| fail(&e))?;
        }
        {
            let mut meta = tx.open_table(META).map_err(|e| fail(&e))?;
            meta.insert(META_APP, APP).map_err(|e| fail(&e))?;
            meta.insert(META_FORMAT, &FORMAT_VERSION.to_be_bytes()[..])
                .map_err(|e| fail(&e))?;
        }
        tx.commit().map_err(|e| fail(&e))?;
        tracing::info!(path = %path.display(), "created a new store");
        Ok(())
    }
}

/// Drops what queues spilled before this start (transient messages do not survive a restart)
/// and creates the table empty. Only at start: a reopen after a failed commit keeps it, as
/// the queues that spilled are still running.
pub(crate) fn drop_spilled(db: &Database, path: &Path) -> Result<()> {
    let fail = |e: &dyn std::fmt::Display| StoreError::Database {
        path: path.to_path_buf(),
        reason: format!("dropping spilled messages: {e}"),
    };
    // A start with nothing to drop writes nothing (no commit, no fsync).
    let read = db.begin_read().map_err(|e| fail(&e))?;
    let empty = match read.open_table(SPILLED) {
        Ok(table) => redb::ReadableTableMetadata::is_empty(&table).map_err(|e| fail(&e))?,
        Err(redb::TableError::TableDoesNotExist(_)) => false,
        Err(e) => return Err(fail(&e)),
    };
    drop(read);
    if empty {
        return Ok(());
    }
    let tx = db.begin_write().map_err(|e| fail(&e))?;
    tx.delete_table(SPILLED).map_err(|e| fail(&e))?;
    tx.open_table(SPILLED).map_err(|e| fail(&e))?;
    tx.commit().map_err(|e| fail(&e))?;
    Ok(())
}

/// What the `meta` table says about a database (not whether this build opens its format).
pub(crate) fn read_meta(db: &impl ReadableDatabase, path: &Path) -> Result<Meta> {
    let path = &path.to_path_buf();
    let damaged = |e: &dyn std::fmt::Display| StoreError::Damaged {
        path: path.clone(),
        reason: e.to_string(),
    };
    let read = db.begin_read().map_err(|e| damaged(&e))?;
    match read.open_table(META) {
        Ok(meta) => {
            let app = redb::ReadableTable::get(&meta, META_APP).map_err(|e| damaged(&e))?;
            if app.as_ref().map(|v| v.value()) != Some(APP) {
                return Err(StoreError::Foreign {
                    path: path.clone(),
                    reason: "its meta table is not dwellmq's".into(),
                });
            }
            let format = redb::ReadableTable::get(&meta, META_FORMAT)
                .map_err(|e| damaged(&e))?
                .and_then(|v| v.value().try_into().ok().map(u32::from_be_bytes));
            match format {
                Some(format) => Ok(Meta::Dwellmq { format }),
                None => Err(damaged(&"its format version is missing")),
            }
        }
        Err(TableError::TableDoesNotExist(_)) => Ok(Meta::Absent {
            tables: read.list_tables().map_err(|e| damaged(&e))?.count(),
        }),
        Err(TableError::TableTypeMismatch { .. }) => Err(StoreError::Foreign {
            path: path.clone(),
            reason: "its meta table has other types".into(),
        }),
        Err(e) => Err(damaged(&e)),
    }
}

pub(crate) fn open_error(path: &Path, error: DatabaseError) -> StoreError {
    let path = path.to_path_buf();
    match error {
        DatabaseError::DatabaseAlreadyOpen => StoreError::Locked {
            lock: path.clone(),
            dir: path,
            holder: String::new(),
        },
        DatabaseError::Storage(StorageError::Io(e)) => match e.kind() {
            io::ErrorKind::InvalidData => StoreError::Foreign {
                path,
                reason: e.to_string(),
            },
            io::ErrorKind::UnexpectedEof => StoreError::Damaged {
                path,
                reason: format!("truncated ({e})"),
            },
            _ => StoreError::io(path, "opening the store file", e),
        },
        DatabaseError::Storage(StorageError::Corrupted(reason)) => {
            StoreError::Damaged { path, reason }
        }
        DatabaseError::UpgradeRequired(version) => StoreError::Foreign {
            path,
            reason: format!("written by an old redb (file format {version})"),
        },
        other => StoreError::Damaged {
            path,
            reason: other.to_string(),
        },
    }
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unreadable".into()
    }
}

/// What the meta table says about a database.
pub(crate) enum Meta {
    /// A dwellmq store of this format (perhaps one this build does not open).
    Dwellmq {
        /// `meta["format"]`.
        format: u32,
    },
    /// No meta table, and this many other tables.
    Absent {
        /// Tables of the database.
        tables: usize,
    },
}

/// Shared with the writer thread: the database handle, swapped when the writer reopens it.
pub(crate) type DbSlot = parking_lot::RwLock<Option<Arc<Database>>>;
