//! A storage backend that models what a disk does, and fails on demand. Writes go to a model
//! of the page cache and reach the file only when an fsync succeeds: a failed fsync loses
//! them (the kernel marks such pages clean: they are still read back until the cache drops
//! them, but never written), and a power cut loses everything not synced. Faults: failed
//! writes, failed fsyncs, a full disk, failed reads, and fsyncs held back (to make batches form
//! deterministically). For the store's and the broker's fault tests; never used unless a
//! caller builds [`options`] with it.

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
    /// Every read fails (so does opening the file).
    pub fail_reads: AtomicBool,
    /// The page cache model: what was written and not yet synced, in write order.
    cache: Mutex<Vec<CachedWrite>>,
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

    /// A power cut: everything written and not synced is gone (the file keeps what the last
    /// successful fsync made durable). Call it with the store closed or abandoned.
    pub fn power_cut(&self) {
        self.cache.lock().clear();
    }

    /// What the disk holds right now, copied to `to`: the store file as the last successful
    /// fsyncs left it, taken between two fsyncs (never halfway through one). Opening the copy
    /// is a restart after a power cut at this moment; the store that wrote it may go on.
    pub fn disk_image(&self, from: &Path, to: &Path) -> io::Result<()> {
        let _between_syncs = self.cache.lock();
        std::fs::copy(from, to).map(|_| ())
    }

    /// Octets written and not yet on disk (dirty, or lost to a failed fsync but still cached).
    pub fn unsynced_bytes(&self) -> usize {
        self.cache.lock().iter().map(|w| w.data.len()).sum()
    }

    /// Octets whose fsync failed and that are still cached (what a reopen must drop before it
    /// reads), leaving out writes still waiting for their first fsync.
    pub fn failed_bytes(&self) -> usize {
        self.cache
            .lock()
            .iter()
            .filter(|w| w.failed)
            .map(|w| w.data.len())
            .sum()
    }

    /// Drops the cached pages whose fsync failed, as `posix_fadvise(DONTNEED)` does: reads
    /// then see what is on disk.
    fn forget_failed(&self) {
        self.cache.lock().retain(|w| !w.failed);
    }

    fn wait_if_paused(&self) {
        let mut paused = self.paused.lock();
        while *paused {
            self.resumed.wait(&mut paused);
        }
    }
}

/// A write the model's page cache holds: dirty until an fsync, or `failed` (its fsync failed:
/// still read back, never written to the file).
#[derive(Debug)]
struct CachedWrite {
    offset: u64,
    data: Vec<u8>,
    failed: bool,
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
        if self.faults.fail_reads.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected read failure"));
        }
        self.inner.read(offset, out)?;
        // What the cache holds over the file, later writes over earlier ones.
        let end = offset + out.len() as u64;
        for write in self.faults.cache.lock().iter() {
            let w_end = write.offset + write.data.len() as u64;
            let (from, to) = (write.offset.max(offset), w_end.min(end));
            if from < to {
                out[(from - offset) as usize..(to - offset) as usize].copy_from_slice(
                    &write.data[(from - write.offset) as usize..(to - write.offset) as usize],
                );
            }
        }
        Ok(())
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
        let mut cache = self.faults.cache.lock();
        if self.faults.fail_sync.load(Ordering::SeqCst) {
            // As Linux after a failed writeback: the dirty pages are marked clean, so they are
            // never written, though reads still find them until the cache drops them.
            for write in cache.iter_mut() {
                write.failed = true;
            }
            return Err(io::Error::other("injected fsync failure"));
        }
        for write in cache.iter().filter(|w| !w.failed) {
            self.inner.write(write.offset, &write.data)?;
        }
        self.inner.sync_data()?;
        cache.retain(|w| w.failed);
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        if self.faults.disk_full.load(Ordering::SeqCst) {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        if self.faults.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write failure"));
        }
        self.faults.cache.lock().push(CachedWrite {
            offset,
            data: data.to_vec(),
            failed: false,
        });
        Ok(())
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
    let faults_for_cache = Arc::clone(&faults);
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
    let forget = faults_for_cache;
    StoreOptions {
        backend: Some(factory),
        forget_cache: Some(Arc::new(move |_: &Path| forget.forget_failed())),
        ..StoreOptions::default()
    }
}

/// Switches are compared by identity (a broker configuration holding them stays comparable).
impl PartialEq for Faults {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
