//! A broker data directory for a test, removed when dropped.

use std::path::{Path, PathBuf};

/// A data directory under the system's temporary directory, named after the test and the
/// process (test binaries run side by side), empty at first and removed when dropped.
pub struct DataDir(PathBuf);

impl DataDir {
    pub fn new(name: &str) -> DataDir {
        let dir = std::env::temp_dir().join(format!("dwellmq-test-{name}-{}", std::process::id()));
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
