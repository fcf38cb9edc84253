//! Format 4 → 5: a store written by format 4's own code gets the stream tables at its open,
//! keeps every record, takes stream writes, and opens again as format 5 without an upgrade.

use dwellmq_core::stream::{ReadRequest, StoredLog};
use dwellmq_store::{Op, Store, FORMAT_VERSION};

use crate::fixtures::ALL;
use crate::records::{check_every_record, dump};

fn append(stream: u64, offset: u64, body: &[u8]) -> Op {
    Op::StreamAppend {
        stream,
        offset,
        timestamp_ms: 1_000 + offset,
        segment: 0,
        chunk: 0,
        message: crate::common::payload("s", body),
    }
}

#[test]
fn a_format_4_store_gets_the_stream_tables_and_keeps_every_record() {
    assert_eq!(FORMAT_VERSION, 5);
    let fixture = ALL[4];
    assert_eq!((fixture.dir, fixture.format), ("format-4", 4));
    let dir = fixture.copy();
    let before = dump(&dir.db_file());
    for table in ["streams", "stream_index", "stream_log"] {
        assert!(!before.contains_key(table), "format 4 has no {table}");
    }
    let store = Store::open(dir.path()).expect("upgraded");
    assert_eq!(store.upgraded_from(), Some(4));
    let snapshot = store.snapshot().unwrap();
    check_every_record(&snapshot, fixture);
    // A queue of the fixture (id 1) has no log: an empty one.
    assert_eq!(snapshot.stream_log(1).unwrap(), StoredLog::default());
    drop(snapshot);
    // A stream declared after the upgrade (a new id) appends and reads.
    let stream = store.allocate_queue_id();
    store
        .write(vec![
            append(stream, 0, b"first"),
            append(stream, 1, b"second"),
        ])
        .expect("commit");
    store.close();

    let store = Store::open(dir.path()).expect("opens again");
    assert_eq!(store.upgraded_from(), None);
    let snapshot = store.snapshot().unwrap();
    check_every_record(&snapshot, fixture);
    let log = snapshot.stream_log(stream).unwrap();
    assert_eq!((log.next_offset, log.chunks.len()), (2, 1));
    let read = snapshot
        .stream_read(
            stream,
            &ReadRequest {
                read_id: 1,
                consumer_id: 1,
                from_offset: 0,
                end_offset: 2,
                limit: 10,
                max_bytes: u64::MAX,
                not_before_ms: None,
            },
        )
        .unwrap();
    let bodies: Vec<Vec<u8>> = read
        .records
        .iter()
        .map(|r| crate::common::body_of(&r.message))
        .collect();
    assert_eq!(bodies, [b"first".to_vec(), b"second".to_vec()]);
    drop(snapshot);
    store.close();
    // Every format-4 table reads as it did; the new ones are all that was added.
    let after = dump(&dir.db_file());
    for (table, records) in &before {
        if table != "meta" {
            assert_eq!(Some(records), after.get(table), "{table}");
        }
    }
}
