//! Opening: one store per directory; a foreign, damaged or newer file is refused, untouched.

use crate::common::{payload, Scratch};
use dwellmq_store::{Op, Store, StoreError, VhostDef, FORMAT_VERSION};

fn store_with_data(dir: &Scratch) {
    let store = Store::open(dir.path()).expect("open");
    store
        .write(vec![
            Op::PutVhost(VhostDef {
                name: "/".into(),
                metadata: vec![],
            }),
            Op::Persist {
                queue: 1,
                seq: 1,
                expires_at_ms: 0,
                delivered: false,
                message: payload("k", &[7u8; 10_000]),
            },
        ])
        .expect("commit");
    store.close();
}

#[test]
fn a_second_store_on_the_same_directory_is_refused_until_the_first_closes() {
    let dir = Scratch::new("lock");
    let first = Store::open(dir.path()).expect("open");
    let err = Store::open(dir.path()).expect_err("second open must be refused");
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("in use by another dwellmq"), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
    drop(first);
    Store::open(dir.path()).expect("open after the first closed");
}

fn assert_untouched(path: &std::path::Path, before: &[u8]) {
    let after = std::fs::read(path).expect("file still there");
    assert!(after == before, "the file was changed");
}

#[test]
fn a_file_that_is_not_a_database_is_refused_and_left_alone() {
    let dir = Scratch::new("foreign");
    std::fs::create_dir_all(dir.path()).unwrap();
    let content = b"these are somebody's notes, not a database\n".repeat(200);
    std::fs::write(dir.db_file(), &content).unwrap();
    let err = Store::open(dir.path()).expect_err("refused");
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert!(err.to_string().contains(dwellmq_store::DB_FILE), "{err}");
    assert!(err.to_string().contains("left untouched"), "{err}");
    assert_untouched(&dir.db_file(), &content);
}

#[test]
fn another_programs_redb_database_is_refused_and_left_alone() {
    let dir = Scratch::new("foreign-redb");
    std::fs::create_dir_all(dir.path()).unwrap();
    {
        let db = redb::Database::create(dir.db_file()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("theirs");
            tx.open_table(def).unwrap().insert(1, 2).unwrap();
        }
        tx.commit().unwrap();
    }
    let before = std::fs::read(dir.db_file()).unwrap();
    let err = Store::open(dir.path()).expect_err("refused");
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert_untouched(&dir.db_file(), &before);
}

#[test]
fn a_store_of_another_format_version_is_refused() {
    for other in [FORMAT_VERSION + 1, 1] {
        refuses_format(other);
    }
}

/// A store whose `meta["format"]` says `other` is refused with `Version`, untouched.
fn refuses_format(other: u32) {
    let dir = Scratch::new(&format!("version-{other}"));
    store_with_data(&dir);
    {
        let db = redb::Database::open(dir.db_file()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("meta");
            let mut meta = tx.open_table(def).unwrap();
            meta.insert(&b"format"[..], &other.to_be_bytes()[..])
                .unwrap();
        }
        tx.commit().unwrap();
    }
    let before = std::fs::read(dir.db_file()).unwrap();
    let err = Store::open(dir.path()).expect_err("refused");
    match &err {
        StoreError::Version {
            found, supported, ..
        } => assert_eq!((*found, *supported), (other, FORMAT_VERSION)),
        other => panic!("{other:?}"),
    }
    assert_untouched(&dir.db_file(), &before);
}

#[test]
fn a_truncated_store_is_refused_as_damaged_and_left_alone() {
    let dir = Scratch::new("truncated");
    store_with_data(&dir);
    let whole = std::fs::read(dir.db_file()).unwrap();
    let cut = whole[..300].to_vec();
    std::fs::write(dir.db_file(), &cut).unwrap();
    let err = Store::open(dir.path()).expect_err("refused");
    assert!(matches!(err, StoreError::Damaged { .. }), "{err:?}");
    assert!(err.to_string().contains(dwellmq_store::DB_FILE), "{err}");
    assert_untouched(&dir.db_file(), &cut);
}

#[test]
fn a_store_with_a_scrambled_header_is_refused_and_left_alone() {
    let dir = Scratch::new("scrambled");
    store_with_data(&dir);
    let mut bytes = std::fs::read(dir.db_file()).unwrap();
    // Past redb's magic number: the god byte, page size, commit slots.
    for (i, b) in bytes[9..512].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(dir.db_file(), &bytes).unwrap();
    let err = Store::open(dir.path()).expect_err("refused");
    assert!(
        matches!(err, StoreError::Damaged { .. } | StoreError::Foreign { .. }),
        "{err:?}"
    );
    assert_untouched(&dir.db_file(), &bytes);
}

#[test]
fn an_empty_store_file_is_damaged_not_new() {
    let dir = Scratch::new("empty");
    std::fs::create_dir_all(dir.path()).unwrap();
    std::fs::write(dir.db_file(), b"").unwrap();
    let err = Store::open(dir.path()).expect_err("refused");
    assert!(matches!(err, StoreError::Damaged { .. }), "{err:?}");
    assert_untouched(&dir.db_file(), b"");
}

#[test]
fn a_good_store_reopens_with_its_data() {
    let dir = Scratch::new("reopen");
    store_with_data(&dir);
    let store = Store::open(dir.path()).expect("reopen");
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.definitions().unwrap().vhosts.len(), 1);
    assert_eq!(snap.queue_messages(1, 0, 10).unwrap().len(), 1);
}

#[test]
fn a_malformed_record_is_an_error_naming_its_table_and_key() {
    let dir = Scratch::new("malformed");
    store_with_data(&dir);
    {
        let db = redb::Database::open(dir.db_file()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("queues");
            let mut queues = tx.open_table(def).unwrap();
            // A key that is not two length-prefixed names.
            queues.insert(&b"\x00\x09bad"[..], &b"\x01"[..]).unwrap();
        }
        tx.commit().unwrap();
    }
    let err = Store::open(dir.path()).expect_err("refused");
    match &err {
        StoreError::Corrupt { table, key, .. } => {
            assert_eq!(*table, "queues");
            assert_eq!(key, "0009626164");
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains(dwellmq_store::DB_FILE), "{err}");
}
