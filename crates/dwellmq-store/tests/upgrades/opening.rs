//! The format is checked before anything is written: a newer (or too old) store is refused
//! octet for octet as it was, even when it needs a repair; an older one that needs a repair is
//! repaired once it is known that this build upgrades it. A failed upgrade leaves the old
//! format whole.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dwellmq_store::{Store, StoreError, DB_FILE, FORMAT_VERSION, OLDEST_FORMAT};
use redb::{ReadableDatabase, TableDefinition};

use crate::common::Scratch;
use crate::fixtures::{contents, ALL};
use crate::records::{check_every_record, dump};

const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("meta");

/// Sets `meta["format"]` of the store at `path` to `format` in a commit that does not save
/// redb's allocator state, and returns the file as a crash right after that commit leaves it:
/// a file redb must repair before it can be read.
pub fn crash_image_with_format(path: &Path, format: u32) -> Vec<u8> {
    let db = redb::Database::open(path).expect("redb opens the store");
    let mut tx = db.begin_write().unwrap();
    tx.set_quick_repair(false);
    tx.open_table(META)
        .unwrap()
        .insert(&b"format"[..], &format.to_be_bytes()[..])
        .unwrap();
    tx.commit().unwrap();
    // Copied while the database is still open: what the disk holds if the process died now.
    let image = contents(path);
    drop(db);
    image
}

/// Whether redb refuses to read `path` without a repair (the case under test).
fn needs_repair(path: &Path) -> bool {
    matches!(
        redb::Builder::new().open_read_only(path),
        Err(redb::DatabaseError::RepairAborted)
    )
}

fn refused_untouched(dir: &Scratch, found: u32) {
    let file = dir.db_file();
    let before = contents(&file);
    let err = Store::open(dir.path()).expect_err("refused");
    match &err {
        StoreError::Version {
            found: f,
            supported,
            oldest,
            ..
        } => assert_eq!(
            (*f, *supported, *oldest),
            (found, FORMAT_VERSION, OLDEST_FORMAT)
        ),
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "reads formats {OLDEST_FORMAT} to {FORMAT_VERSION}"
        )),
        "{text}"
    );
    assert!(text.contains("left untouched"), "{text}");
    assert!(contents(&file) == before, "the refused file was changed");
}

#[test]
fn a_newer_store_that_needs_a_repair_is_refused_and_left_octet_for_octet() {
    for newer in [FORMAT_VERSION + 1, 1] {
        let dir = ALL[4].copy();
        let image = crash_image_with_format(&dir.db_file(), newer);
        std::fs::write(dir.db_file(), &image).unwrap();
        assert!(needs_repair(&dir.db_file()), "the image must need a repair");
        refused_untouched(&dir, newer);
        // Still a file that needs its repair: nothing repaired it.
        assert!(needs_repair(&dir.db_file()));
    }
}

#[test]
fn a_newer_store_is_refused_and_left_octet_for_octet() {
    let dir = ALL[4].copy();
    crash_image_with_format(&dir.db_file(), FORMAT_VERSION + 1);
    assert!(!needs_repair(&dir.db_file()), "closed cleanly");
    refused_untouched(&dir, FORMAT_VERSION + 1);
}

#[test]
fn an_older_store_that_needs_a_repair_is_repaired_and_upgraded_with_every_record() {
    for fixture in &ALL {
        let dir = fixture.copy();
        let image = crash_image_with_format(&dir.db_file(), fixture.format);
        std::fs::write(dir.db_file(), &image).unwrap();
        assert!(needs_repair(&dir.db_file()), "{}", fixture.dir);
        let store = Store::open(dir.path()).expect("repaired and upgraded");
        assert_eq!(store.upgraded_from(), Some(fixture.format));
        check_every_record(&store.snapshot().unwrap(), *fixture);
        store.close();
    }
}

#[test]
fn an_upgrade_whose_commit_fails_leaves_the_old_format_whole() {
    let fixture = ALL[1];
    let dir = fixture.copy();
    let before = dump(&dir.db_file());
    let faults = Arc::new(dwellmq_store::faults::Faults::default());
    faults.fail_sync.store(true, Ordering::SeqCst);
    let err = Store::open_with(dir.path(), dwellmq_store::faults::options(faults.clone()))
        .expect_err("the upgrade cannot commit");
    assert!(err.is_transient(), "{err:?}");
    // The power goes: what was not synced is gone.
    faults.power_cut();
    assert!(dump(&dir.db_file()) == before, "the old format changed");
    let store = Store::open(dir.path()).expect("upgrades on the next start");
    assert_eq!(store.upgraded_from(), Some(fixture.format));
    check_every_record(&store.snapshot().unwrap(), fixture);
    store.close();
}

#[test]
fn a_store_of_a_new_build_is_not_upgraded_and_has_every_table() {
    let dir = Scratch::new("new");
    let store = Store::open(dir.path()).expect("created");
    assert_eq!(store.upgraded_from(), None);
    store.close();
    let tables = dump(&dir.path().join(DB_FILE));
    for table in [
        "queue_counts",
        "held_due",
        "held_messages",
        "permissions",
        "streams",
        "stream_index",
        "stream_log",
    ] {
        assert!(tables.contains_key(table), "{table}");
    }
    let db = redb::Builder::new()
        .open_read_only(dir.path().join(DB_FILE))
        .unwrap();
    let read = db.begin_read().unwrap();
    let meta = read.open_table(META).unwrap();
    let format = redb::ReadableTable::get(&meta, &b"format"[..])
        .unwrap()
        .map(|v| v.value().to_vec());
    assert_eq!(format, Some(FORMAT_VERSION.to_be_bytes().to_vec()));
}
