//! The store file under the fault model: writes go to the model's page cache, reads see the
//! cache over the file, and an fsync decides what reaches the file.

use std::io;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use super::Faults;

/// The store file, with faults injected on demand.
#[derive(Debug)]
pub struct FaultyBackend {
    pub(super) inner: FileBackend,
    pub(super) faults: Arc<Faults>,
}

impl FaultyBackend {
    fn disk(&self) -> &dyn StorageBackend {
        &self.inner
    }
}

impl StorageBackend for FaultyBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        if self.faults.read_fails() {
            return Err(io::Error::other("injected read failure (EIO)"));
        }
        self.inner.read(offset, out)?;
        if self.faults.cache.lock().overlay(offset, out) {
            self.faults.lost_page_reads.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        let old = self.inner.len()?;
        if self.faults.disk_full.load(Ordering::SeqCst) && len > old {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        let mut cache = self.faults.cache.lock();
        if len < old {
            cache.truncate(len);
        }
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), io::Error> {
        self.faults.syncs.fetch_add(1, Ordering::SeqCst);
        self.faults.wait_if_paused();
        let mut cache = self.faults.cache.lock();
        let (cached, lost) = cache.sizes();
        if self.faults.sync_fails(cached > lost) {
            // As Linux after a failed writeback: what did not reach the disk is marked clean,
            // so it is never written, though reads still find it until the cache drops it.
            cache.sync_failed(self.disk())?;
            return Err(io::Error::other("injected fsync failure"));
        }
        // The file is the model's disk: what is written to it is durable as far as the model
        // goes (a real fsync would only make the tests slow).
        cache.sync_ok(self.disk())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        if self.faults.disk_full.load(Ordering::SeqCst) {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        if self.faults.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected write failure"));
        }
        self.faults.cache.lock().write(self.disk(), offset, data)
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
