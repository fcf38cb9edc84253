//! A storage backend that fails on demand: failed writes, failed fsyncs, a full disk, and
//! fsyncs held back (to make batches form deterministically). For the store's and the
//! broker's fault tests; never used unless a caller builds [`options`] with it.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use crate::backend::BackendFactory;
use crate::open::StoreOptions;

/// Switches for [`FaultyBackend`], shared with the test.
#[derive(Debug, Default)]
pub struct Faults {
    /// Every write fails with an I/O error.
    pub fail_writes: AtomicBool,
    /// Every fsync fails.
    pub fail_sync: AtomicBool,
    /// Writes and growth fail with "no space left on device".
    pub disk_full: AtomicBool,
    /// Fsyncs wait while this is set (to make batches form deterministically).
    paused: Mutex<bool>,
    resumed: Condvar,
    /// Fsyncs started (waiting or done).
    pub syncs: AtomicU64,
}

impl Faults {
    pub fn pause(&self) {
        *self.paused.lock() = true;
    }

    pub fn resume(&self) {
        *self.paused.lock() = false;
        self.resumed.notify_all();
    }

    fn wait_if_paused(&self) {
        let mut paused = self.paused.lock();
        while *paused {
            self.resumed.wait(&mut paused);
        }
    }
}

/// The store file, with faults injected on demand.
#[derive(Debug)]
pub struct FaultyBackend {
    inner: FileBackend,
    faults: Arc<Faults>,
}

impl StorageBackend for FaultyBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        if self.faults.disk_full.load(Ordering::SeqCst) && len > self.inner.len()? {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), io::Error> {
        self.faults.syncs.fetch_add(1, Ordering::SeqCst);
        self.faults.wait_if_paused();
        if self.faults.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fsync failure"));
        }
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        if self.faults.disk_full.load(Ordering::SeqCst) {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        if self.faults.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write failure"));
        }
        self.inner.write(offset, data)
    }
    fn close(&self) -> Result<(), io::Error> {
        self.inner.close()
    }
    fn try_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(s, e)
    }
    fn try_lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(s, e)
    }
    fn lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(s, e)
    }
    fn lock_shared_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(s, e)
    }
    fn unlock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(s, e)
    }
    fn query_lock_range(&self, s: Bound<u64>, e: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(s, e)
    }
}

/// Default options, with the database on a [`FaultyBackend`] switched by `faults`.
pub fn options(faults: Arc<Faults>) -> StoreOptions {
    let shared = faults;
    let factory: BackendFactory = Arc::new(move |path: &Path| {
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let inner = FileBackend::new(file).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Box::new(FaultyBackend {
            inner,
            faults: shared.clone(),
        }) as Box<dyn StorageBackend>)
    });
    StoreOptions {
        backend: Some(factory),
        ..StoreOptions::default()
    }
}

/// Switches are compared by identity (a broker configuration holding them stays comparable).
impl PartialEq for Faults {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
