//! The checked-in fixtures, copied to a scratch directory before a test opens them (an open
//! upgrades in place).

use std::path::{Path, PathBuf};

use crate::common::Scratch;

/// A fixture: the directory under tests/fixtures/ and the store format its commit wrote.
#[derive(Debug, Clone, Copy)]
pub struct Fixture {
    pub dir: &'static str,
    pub format: u32,
}

/// Every fixture, oldest first (tests/fixtures/README.md names the commit that wrote each).
pub const ALL: [Fixture; 5] = [
    Fixture {
        dir: "format-2-first-layout",
        format: 2,
    },
    Fixture {
        dir: "format-2",
        format: 2,
    },
    Fixture {
        dir: "format-3",
        format: 3,
    },
    Fixture {
        dir: "format-4-without-queue-counts",
        format: 4,
    },
    Fixture {
        dir: "format-4",
        format: 4,
    },
];

impl Fixture {
    pub fn file(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(self.dir)
            .join(dwellmq_store::DB_FILE)
    }

    /// A scratch data directory holding a copy of the fixture's file.
    pub fn copy(&self) -> Scratch {
        let scratch = Scratch::new(self.dir);
        std::fs::create_dir_all(scratch.path()).expect("scratch directory");
        std::fs::copy(self.file(), scratch.db_file()).expect("fixture copied");
        scratch
    }
}

/// A file's contents, to compare before and after.
pub fn contents(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("file readable")
}
