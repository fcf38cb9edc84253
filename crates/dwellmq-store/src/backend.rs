//! Where the database's bytes go: the file by default, or any [`StorageBackend`] a caller
//! supplies (tests inject faults this way). The writer reopens the database after an I/O error
//! (redb refuses every later operation on a handle that saw one), so it needs a factory, not a
//! single backend.

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

use crate::open::StoreOptions;

/// Makes the storage for the database file at a path (called at open and at every reopen).
pub type BackendFactory =
    Arc<dyn Fn(&Path) -> io::Result<Box<dyn StorageBackend>> + Send + Sync + 'static>;

/// The default: the file itself, created if absent.
pub(crate) fn file_backend(path: &Path) -> io::Result<Box<dyn StorageBackend>> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let backend = FileBackend::new(file).map_err(|e| io::Error::other(e.to_string()))?;
    Ok(Box::new(backend))
}

/// Drops the store file's cached pages (the options' own way, or the kernel's), so that what
/// is read next comes from the disk: after a failed fsync the kernel keeps the pages it could
/// not write, marked clean, and reads would return them although the disk never got them.
pub(crate) fn forget_cached_pages(options: &StoreOptions, path: &Path) {
    match &options.forget_cache {
        Some(forget) => forget(path),
        None => drop_kernel_cache(path),
    }
}

/// `posix_fadvise(DONTNEED)` on the file: its clean pages leave the page cache (the store
/// never maps the file, so none is kept for a mapping).
fn drop_kernel_cache(path: &Path) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        match std::fs::File::open(path) {
            Ok(file) => {
                // SAFETY: a plain advisory call on an open descriptor this function owns.
                let rc = unsafe {
                    libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
                };
                if rc != 0 {
                    tracing::warn!(path = %path.display(), rc, "dropping the store file's cached pages failed");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "opening the store file to drop its cached pages")
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}

/// Makes the entries of `dir` durable (the options' own way, or an fsync of the directory): a
/// file just created is not on disk, whatever its own fsyncs did, until its directory is.
pub(crate) fn sync_dir(options: &StoreOptions, dir: &Path) -> io::Result<()> {
    match &options.sync_dir {
        Some(sync) => sync(dir),
        None => fsync_dir(dir),
    }
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)?.sync_all()
    }
    // Elsewhere a directory cannot be opened as a file; NTFS journals its entries itself.
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// A boxed backend as a backend (redb takes `impl StorageBackend`).
pub(crate) struct DynBackend(pub(crate) Box<dyn StorageBackend>);

impl fmt::Debug for DynBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl StorageBackend for DynBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), io::Error> {
        self.0.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.0.write(offset, data)
    }
    fn close(&self) -> Result<(), io::Error> {
        self.0.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}
