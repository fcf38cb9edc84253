//! A storage backend that models what a disk does, and fails as real disks fail. Writes go to
//! a model of the kernel's page cache ([`cache`]) and reach the file at an fsync. By default
//! the model is the simplest disk: a failed fsync loses everything it was to write, and a
//! power cut everything not synced. A [`DiskModel`] makes it fail as real disks do: at a power
//! cut a seeded random subset of the unsynced pages reaches the disk, some of them torn at a
//! sector boundary; a failed fsync may have written some pages before it failed (the others
//! stay readable from the cache, marked clean, but never reach the disk); reads fail at
//! random. Switches fail writes, fsyncs, reads, or the whole disk (full) on demand, and hold
//! fsyncs back (to make batches form deterministically). The directory entry of a file the
//! store creates is durable only once the store fsyncs the directory.
//!
//! For the store's and the broker's fault tests; never used unless a caller builds
//! [`options`] with it.

mod backend;
mod cache;

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use redb::backends::FileBackend;
use redb::StorageBackend;

pub use backend::FaultyBackend;
use cache::PageCache;

use crate::backend::BackendFactory;
use crate::open::StoreOptions;

/// Which of the pages not yet on disk still reach it when an fsync fails or the power goes.
#[derive(Clone, Default)]
pub enum Reach {
    /// None of them.
    #[default]
    Nothing,
    /// All of them.
    Everything,
    /// Each with this chance (percent), drawn from the model's seed.
    Some(u8),
    /// Those whose offset (a multiple of 4 KiB) this accepts: a test's exact choice.
    Pages(Arc<dyn Fn(u64) -> bool + Send + Sync>),
}

impl std::fmt::Debug for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reach::Nothing => f.write_str("Nothing"),
            Reach::Everything => f.write_str("Everything"),
            Reach::Some(percent) => write!(f, "Some({percent}%)"),
            Reach::Pages(_) => f.write_str("Pages(..)"),
        }
    }
}

/// How the modelled disk fails. The default is the simplest disk (nothing unsynced survives
/// a failed fsync or a power cut, no torn pages, no read errors).
#[derive(Debug, Clone)]
pub struct DiskModel {
    /// The random source of every draw below.
    pub seed: u64,
    /// Dirty pages that reach the disk at a power cut (the kernel's writeback got to them).
    pub at_power_cut: Reach,
    /// Of those, the share (percent) that tear: only a prefix of their sectors is written.
    pub torn_percent: u8,
    /// The disk's atomic unit: 512 or 4096 octets (a 4 KiB sector never tears a page).
    pub sector_bytes: usize,
    /// Dirty pages that had reached the disk when an fsync failed.
    pub at_failed_sync: Reach,
    /// Reads that fail, per million.
    pub read_errors_per_million: u32,
}

impl Default for DiskModel {
    fn default() -> Self {
        DiskModel {
            seed: 0,
            at_power_cut: Reach::Nothing,
            torn_percent: 0,
            sector_bytes: 512,
            at_failed_sync: Reach::Nothing,
            read_errors_per_million: 0,
        }
    }
}

impl DiskModel {
    /// A disk that fails as real ones do, from `seed`: at a power cut about half the unsynced
    /// pages reach it, a fifth of those torn at a 512-octet sector; a failed fsync wrote about
    /// half its pages first. Reads fail only when asked ([`Faults::fail_next_reads`]).
    pub fn realistic(seed: u64) -> DiskModel {
        DiskModel {
            seed,
            at_power_cut: Reach::Some(50),
            torn_percent: 20,
            sector_bytes: 512,
            at_failed_sync: Reach::Some(50),
            read_errors_per_million: 0,
        }
    }
}

/// What the model did so far.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultStats {
    /// Dirty pages that reached the disk at a power cut (or an image of the disk).
    pub cut_pages_written: u64,
    /// Dirty pages lost at a power cut.
    pub cut_pages_lost: u64,
    /// Of the pages written at a cut, those torn.
    pub torn_pages: u64,
    /// Fsyncs that failed.
    pub failed_syncs: u64,
    /// Pages a failed fsync had written before it failed.
    pub failed_sync_pages_written: u64,
    /// Pages a failed fsync lost (clean in the cache, never on disk).
    pub failed_sync_pages_lost: u64,
    /// Reads that failed.
    pub read_errors: u64,
    /// Reads that returned a lost page: what the cache held and the disk did not.
    pub lost_page_reads: u64,
}

/// Switches for [`FaultyBackend`], shared with the test.
#[derive(Debug)]
pub struct Faults {
    /// Every write fails with an I/O error.
    pub fail_writes: AtomicBool,
    /// Every fsync fails.
    pub fail_sync: AtomicBool,
    /// Writes and growth fail with "no space left on device".
    pub disk_full: AtomicBool,
    /// Every read fails (so does opening the file).
    pub fail_reads: AtomicBool,
    /// The next this many reads fail, one each.
    pub fail_next_reads: AtomicU64,
    /// Fsyncs to let through before the planned failures ([`Faults::fail_syncs`]).
    syncs_to_skip: AtomicU64,
    /// Planned fsync failures still to come.
    syncs_to_fail: AtomicU64,
    /// The page cache model, the model's random source and the new files.
    cache: Mutex<PageCache>,
    /// While set, fsyncs wait once this many more have passed (to make batches form
    /// deterministically, or to cut the power in the middle of a commit).
    paused: Mutex<Option<u64>>,
    resumed: Condvar,
    /// Fsyncs started (waiting or done).
    pub syncs: AtomicU64,
    read_errors: AtomicU64,
    lost_page_reads: AtomicU64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults::with_model(DiskModel::default())
    }
}

impl Faults {
    /// Switches over a disk that fails as `model` says.
    pub fn with_model(model: DiskModel) -> Faults {
        Faults {
            fail_writes: AtomicBool::new(false),
            fail_sync: AtomicBool::new(false),
            disk_full: AtomicBool::new(false),
            fail_reads: AtomicBool::new(false),
            fail_next_reads: AtomicU64::new(0),
            syncs_to_skip: AtomicU64::new(0),
            syncs_to_fail: AtomicU64::new(0),
            cache: Mutex::new(PageCache::new(model)),
            paused: Mutex::new(None),
            resumed: Condvar::new(),
            syncs: AtomicU64::new(0),
            read_errors: AtomicU64::new(0),
            lost_page_reads: AtomicU64::new(0),
        }
    }

    /// Changes how the disk fails from now on (its random source restarts from the seed).
    pub fn set_model(&self, model: DiskModel) {
        self.cache.lock().set_model(model);
    }

    /// After `skip` more fsyncs succeed, the next `count` fail (what they had to write
    /// reaches the disk as the model's `at_failed_sync` says). Only fsyncs with pages to
    /// write count (not the one that makes a file's new length durable). Replaces an earlier
    /// plan.
    pub fn fail_syncs(&self, skip: u64, count: u64) {
        self.syncs_to_skip.store(skip, Ordering::SeqCst);
        self.syncs_to_fail.store(count, Ordering::SeqCst);
    }

    /// Fsyncs wait from now on, until [`Faults::resume`].
    pub fn pause(&self) {
        self.pause_after(0);
    }

    /// Lets `n` more fsyncs through, then makes the next ones wait until [`Faults::resume`].
    pub fn pause_after(&self, n: u64) {
        *self.paused.lock() = Some(n);
    }

    pub fn resume(&self) {
        *self.paused.lock() = None;
        self.resumed.notify_all();
    }

    /// A power cut: the unsynced pages the model lets through reach the file (some torn),
    /// the rest are gone, and a file whose directory entry was never synced is gone whole.
    /// Call it with the store closed or abandoned.
    pub fn power_cut(&self) {
        let mut cache = self.cache.lock();
        for file in std::mem::take(&mut cache.new_files) {
            // Its directory entry never reached the disk.
            let _ = std::fs::remove_file(&file);
        }
        let written = cache
            .path
            .as_ref()
            .map(|path| OpenOptions::new().write(true).open(path));
        match written.unwrap_or_else(|| Err(io::ErrorKind::NotFound.into())) {
            Ok(file) => {
                if let Err(e) = cache.cut(file, true) {
                    tracing::warn!(error = %e, "the model's power cut could not write the file");
                }
            }
            Err(_) => cache.cut(Discard, true).unwrap_or(()),
        }
    }

    /// What the disk holds right now, copied to `to`: the store file as the fsyncs left it,
    /// with the unsynced pages the model lets through (as at a power cut), taken between two
    /// fsyncs (never halfway through one). No file at `to` if the file's directory entry was
    /// never synced. Opening the copy is a restart after a power cut at this moment; the
    /// store that wrote it goes on.
    pub fn disk_image(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut cache = self.cache.lock();
        if cache.new_files.iter().any(|f| f == from) {
            return match std::fs::remove_file(to) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        std::fs::copy(from, to)?;
        let image = OpenOptions::new().write(true).open(to)?;
        cache.cut(image, false)
    }

    /// Octets written and not yet on disk (dirty, or lost to a failed fsync but still cached),
    /// in whole pages.
    pub fn unsynced_bytes(&self) -> usize {
        self.cache.lock().sizes().0 * cache::PAGE as usize
    }

    /// Octets whose fsync failed and that are still cached (what a reopen must drop before it
    /// reads), leaving out pages still waiting for their first fsync.
    pub fn failed_bytes(&self) -> usize {
        self.cache.lock().sizes().1 * cache::PAGE as usize
    }

    /// What the model did so far.
    pub fn stats(&self) -> FaultStats {
        let counts = self.cache.lock().counts;
        FaultStats {
            cut_pages_written: counts.cut_pages_written,
            cut_pages_lost: counts.cut_pages_lost,
            torn_pages: counts.torn_pages,
            failed_syncs: counts.failed_syncs,
            failed_sync_pages_written: counts.failed_sync_pages_written,
            failed_sync_pages_lost: counts.failed_sync_pages_lost,
            read_errors: self.read_errors.load(Ordering::Relaxed),
            lost_page_reads: self.lost_page_reads.load(Ordering::Relaxed),
        }
    }

    /// Drops the cached pages whose fsync failed, as `posix_fadvise(DONTNEED)` does: reads
    /// then see what is on disk.
    fn forget_failed(&self) {
        self.cache.lock().forget_lost();
    }

    /// The store fsynced `dir`: the entries of the files it created there are durable.
    fn dir_synced(&self, dir: &Path) {
        self.cache
            .lock()
            .new_files
            .retain(|file| file.parent() != Some(dir));
    }

    /// Whether this fsync fails; a planned failure ([`Faults::fail_syncs`]) counts only
    /// fsyncs with pages to write.
    fn sync_fails(&self, writes_pages: bool) -> bool {
        if self.fail_sync.load(Ordering::SeqCst) {
            return true;
        }
        if !writes_pages || self.syncs_to_fail.load(Ordering::SeqCst) == 0 {
            return false;
        }
        let skipped = self
            .syncs_to_skip
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        skipped.is_err()
            && self
                .syncs_to_fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
    }

    fn read_fails(&self) -> bool {
        let fails = self.fail_reads.load(Ordering::SeqCst)
            || self
                .fail_next_reads
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            || {
                let mut cache = self.cache.lock();
                let rate = u64::from(cache.model.read_errors_per_million);
                rate > 0 && cache.draw() % 1_000_000 < rate
            };
        if fails {
            self.read_errors.fetch_add(1, Ordering::Relaxed);
        }
        fails
    }

    fn wait_if_paused(&self) {
        let mut paused = self.paused.lock();
        if let Some(passing) = paused.as_mut().filter(|n| **n > 0) {
            *passing -= 1;
            return;
        }
        while paused.is_some() {
            self.resumed.wait(&mut paused);
        }
    }
}

/// A disk that drops what it is given (a power cut when the file is gone anyway).
struct Discard;

impl cache::Disk for Discard {
    fn put(&mut self, _: u64, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(0)
    }
}

/// Default options, with the database on a [`FaultyBackend`] switched by `faults`: it notes
/// the file when it creates it (its directory entry is not durable until the store fsyncs the
/// directory), drops the lost pages when the store asks the kernel to drop the file's cached
/// pages, and learns when the store fsyncs the directory.
pub fn options(faults: Arc<Faults>) -> StoreOptions {
    let for_backend = Arc::clone(&faults);
    let factory: BackendFactory = Arc::new(move |path: &Path| {
        let created = !path.exists();
        let file: File = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        for_backend.cache.lock().opened(path, created);
        let inner = FileBackend::new(file).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Box::new(FaultyBackend {
            inner,
            faults: for_backend.clone(),
        }) as Box<dyn StorageBackend>)
    });
    let for_forget = Arc::clone(&faults);
    let for_sync_dir = faults;
    StoreOptions {
        backend: Some(factory),
        forget_cache: Some(Arc::new(move |_: &Path| for_forget.forget_failed())),
        sync_dir: Some(Arc::new(move |dir: &Path| {
            for_sync_dir.dir_synced(dir);
            Ok(())
        })),
        ..StoreOptions::default()
    }
}

/// Switches are compared by identity (a broker configuration holding them stays comparable).
impl PartialEq for Faults {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}
