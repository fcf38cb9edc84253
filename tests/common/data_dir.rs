//! A broker data directory for a test, removed when dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A data directory under the system's temporary directory, named after the test and the
/// process (test binaries run side by side), empty at first and removed when dropped.
pub struct DataDir(PathBuf);

impl DataDir {
    pub fn new(name: &str) -> DataDir {
        // The counter keeps two tests of one binary apart when they pick the same name.
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "dwellmq-test-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        DataDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
