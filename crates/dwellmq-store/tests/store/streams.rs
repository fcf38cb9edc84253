//! Streams' logs (format 5): appends in group commits, reads of a window, the index a restart
//! reads without a message, retention's truncation, deletion, and a failed commit's appends
//! and truncations.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dwellmq_core::stream::{ReadRequest, StoredChunk, RECORD_OVERHEAD};
use dwellmq_store::faults::{DiskModel, Reach};
use dwellmq_store::{Op, QueueDef, Store, StoreError};

use crate::common::{body_of, faulty_options, message, payload, Scratch};

/// An append at `offset` of segment `segment`, chunk `chunk`, stored at `1000 + offset` ms.
fn append(stream: u64, offset: u64, (segment, chunk): (u64, u64), body: &[u8]) -> Op {
    Op::StreamAppend {
        stream,
        offset,
        timestamp_ms: 1_000 + offset,
        segment,
        chunk,
        message: payload("s", body),
    }
}

fn request(from: u64, end: u64, limit: usize) -> ReadRequest {
    ReadRequest {
        read_id: 1,
        consumer_id: 1,
        from_offset: from,
        end_offset: end,
        limit,
        max_bytes: u64::MAX,
        not_before_ms: None,
    }
}

fn offsets(store: &Store, stream: u64, request: &ReadRequest) -> (Vec<u64>, u64) {
    let read = store
        .snapshot()
        .unwrap()
        .stream_read(stream, request)
        .unwrap();
    (
        read.records.iter().map(|r| r.offset).collect(),
        read.next_offset,
    )
}

fn record_bytes(body: &[u8]) -> u64 {
    RECORD_OVERHEAD + dwellmq_core::PackedMessage::packed_len_of(&message("s", body)) as u64
}

/// Ten records in two segments of two chunks each: offsets 0-4 (chunks 0, 3), 5-9 (5, 8).
fn ten(store: &Store, stream: u64) {
    let place = |o: u64| {
        let segment = if o < 5 { 0 } else { 5 };
        let chunk = match o {
            0..=2 => 0,
            3..=4 => 3,
            5..=7 => 5,
            _ => 8,
        };
        (segment, chunk)
    };
    let ops = (0..10)
        .map(|o| append(stream, o, place(o), &[o as u8; 10]))
        .collect();
    store.write(ops).expect("commit");
}

#[test]
fn appends_read_back_in_windows_from_any_offset() {
    let dir = Scratch::new("stream-read");
    let store = Store::open(dir.path()).unwrap();
    ten(&store, 4);
    // Another stream's records are not this one's.
    store.write(vec![append(5, 0, (0, 0), b"other")]).unwrap();
    assert_eq!(
        offsets(&store, 4, &request(0, 10, 100)),
        ((0..10).collect(), 10)
    );
    assert_eq!(
        offsets(&store, 4, &request(3, 10, 4)),
        (vec![3, 4, 5, 6], 7)
    );
    assert_eq!(offsets(&store, 4, &request(8, 9, 4)), (vec![8], 9));
    assert_eq!(offsets(&store, 4, &request(9, 9, 4)), (vec![], 9));
    // At least one record, however small the byte limit.
    let small = ReadRequest {
        max_bytes: 1,
        ..request(2, 10, 100)
    };
    assert_eq!(offsets(&store, 4, &small), (vec![2], 3));
    let two = ReadRequest {
        max_bytes: 2 * record_bytes(&[0; 10]),
        ..request(2, 10, 100)
    };
    assert_eq!(offsets(&store, 4, &two), (vec![2, 3], 4));
    // Records older than a time are skipped without counting.
    let recent = ReadRequest {
        not_before_ms: Some(1_006),
        ..request(0, 10, 2)
    };
    assert_eq!(offsets(&store, 4, &recent), (vec![6, 7], 8));
    let read = store
        .snapshot()
        .unwrap()
        .stream_read(4, &request(1, 2, 1))
        .unwrap();
    assert_eq!(body_of(&read.records[0].message), [1u8; 10]);
    assert_eq!(read.records[0].timestamp_ms, 1_001);
    assert_eq!(read.records[0].bytes(), record_bytes(&[1; 10]));
    store.close();
}

#[test]
fn a_restart_reads_the_index_and_goes_on_after_the_last_offset() {
    let dir = Scratch::new("stream-index");
    let store = Store::open(dir.path()).unwrap();
    ten(&store, 4);
    store.close();
    let store = Store::open(dir.path()).unwrap();
    let log = store.snapshot().unwrap().stream_log(4).unwrap();
    assert_eq!(log.next_offset, 10);
    let b = record_bytes(&[0; 10]);
    let chunk = |segment, first, end: u64| StoredChunk {
        segment,
        first_offset: first,
        end_offset: end,
        count: end - first,
        bytes: (end - first) * b,
        first_ts: 1_000 + first,
        last_ts: 1_000 + end - 1,
    };
    assert_eq!(
        log.chunks,
        [
            chunk(0, 0, 3),
            chunk(0, 3, 5),
            chunk(5, 5, 8),
            chunk(5, 8, 10)
        ]
    );
    // Unknown streams have an empty log.
    assert_eq!(
        store.snapshot().unwrap().stream_log(99).unwrap(),
        Default::default()
    );
    store.close();
}

#[test]
fn truncation_drops_records_and_index_but_never_lowers_the_next_offset() {
    let dir = Scratch::new("stream-truncate");
    let store = Store::open(dir.path()).unwrap();
    ten(&store, 4);
    store
        .write(vec![Op::StreamTruncate {
            stream: 4,
            before_offset: 5,
        }])
        .unwrap();
    let snapshot = store.snapshot().unwrap();
    let log = snapshot.stream_log(4).unwrap();
    assert_eq!(log.next_offset, 10);
    assert_eq!(
        log.chunks
            .iter()
            .map(|c| c.first_offset)
            .collect::<Vec<_>>(),
        [5, 8]
    );
    drop(snapshot);
    assert_eq!(
        offsets(&store, 4, &request(0, 10, 100)),
        ((5..10).collect(), 10)
    );
    // Everything goes: the next offset stays, so no offset is given again after a restart.
    store
        .write(vec![Op::StreamTruncate {
            stream: 4,
            before_offset: 10,
        }])
        .unwrap();
    store.close();
    let store = Store::open(dir.path()).unwrap();
    let log = store.snapshot().unwrap().stream_log(4).unwrap();
    assert_eq!((log.next_offset, log.chunks.len()), (10, 0));
    // An append below the cut (a replay) is not written back.
    store.write(vec![append(4, 7, (5, 5), b"late")]).unwrap();
    assert_eq!(
        offsets(&store, 4, &request(0, 11, 100)).0,
        Vec::<u64>::new()
    );
    store.close();
}

#[test]
fn an_append_written_twice_is_counted_once() {
    let dir = Scratch::new("stream-twice");
    let store = Store::open(dir.path()).unwrap();
    store.write(vec![append(4, 0, (0, 0), b"a")]).unwrap();
    store.write(vec![append(4, 0, (0, 0), b"a")]).unwrap();
    let log = store.snapshot().unwrap().stream_log(4).unwrap();
    assert_eq!(log.chunks[0].count, 1);
    store.close();
}

#[test]
fn deleting_its_queue_or_vhost_deletes_a_stream() {
    let dir = Scratch::new("stream-delete");
    let store = Store::open(dir.path()).unwrap();
    let def = |name: &str, id| QueueDef {
        vhost: "v".into(),
        name: name.into(),
        id,
        auto_delete: false,
        arguments: Vec::new(),
    };
    store
        .write(vec![Op::PutQueue(def("s1", 4)), Op::PutQueue(def("s2", 5))])
        .unwrap();
    ten(&store, 4);
    ten(&store, 5);
    store
        .write(vec![Op::DeleteQueue {
            vhost: "v".into(),
            name: "s1".into(),
            id: 4,
        }])
        .unwrap();
    let snapshot = store.snapshot().unwrap();
    assert_eq!(snapshot.stream_log(4).unwrap(), Default::default());
    assert_eq!(snapshot.stream_log(5).unwrap().next_offset, 10);
    drop(snapshot);
    store
        .write(vec![Op::DeleteVhost { name: "v".into() }])
        .unwrap();
    assert_eq!(
        store.snapshot().unwrap().stream_log(5).unwrap(),
        Default::default()
    );
    store.close();
}

/// A snapshot, once the writer has the file open again (bounded wait).
fn readable(store: &Store) -> dwellmq_store::Snapshot {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.snapshot() {
            Ok(snapshot) => return snapshot,
            Err(e) if Instant::now() < deadline => {
                assert!(matches!(e, StoreError::Closed), "{e:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("the store never became readable again: {e:?}"),
        }
    }
}

#[test]
fn a_failed_commit_loses_its_appends_and_retries_its_truncation() {
    let dir = Scratch::new("stream-failed");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).unwrap();
    ten(&store, 4);
    faults.fail_writes.store(true, Ordering::SeqCst);
    let failed = store.write(vec![
        append(4, 10, (5, 8), b"nacked"),
        Op::StreamTruncate {
            stream: 4,
            before_offset: 5,
        },
    ]);
    assert!(failed.is_err());
    faults.fail_writes.store(false, Ordering::SeqCst);
    store.write(vec![append(4, 11, (5, 8), b"next")]).unwrap();
    let snapshot = readable(&store);
    // The truncation was carried into the next commit, with the append of its submission
    // (a submission is retried whole); the next append follows.
    let read = snapshot.stream_read(4, &request(0, 12, 100)).unwrap();
    assert_eq!(
        read.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [5, 6, 7, 8, 9, 10, 11]
    );
    drop(snapshot);
    store.close();
}

#[test]
fn a_replayed_append_whose_failed_commit_reached_the_disk_is_counted_once() {
    let dir = Scratch::new("stream-replayed");
    let (options, faults) = faulty_options();
    faults.set_model(DiskModel {
        at_failed_sync: Reach::Everything,
        ..DiskModel::default()
    });
    let store = Store::open_with(dir.path(), options).unwrap();
    ten(&store, 4);
    // The header's fsync fails after it reached the disk; a truncation in the submission
    // makes the writer replay it whole.
    faults.fail_syncs(1, 1);
    let failed = store.write(vec![
        append(4, 10, (5, 8), b"x"),
        Op::StreamTruncate {
            stream: 4,
            before_offset: 5,
        },
    ]);
    assert!(failed.is_err());
    store.write(Vec::new()).unwrap();
    let log = readable(&store).stream_log(4).unwrap();
    let last = log.chunks.last().copied().unwrap();
    assert_eq!((last.first_offset, last.count, last.end_offset), (8, 3, 11));
    store.close();
}

#[test]
fn an_inspection_counts_each_stream_against_its_index() {
    let dir = Scratch::new("stream-inspect");
    let store = Store::open(dir.path()).unwrap();
    ten(&store, 4);
    store
        .write(vec![Op::StreamTruncate {
            stream: 4,
            before_offset: 5,
        }])
        .unwrap();
    store.close();
    let inspection = dwellmq_store::inspect(dir.path()).expect("inspected");
    assert_eq!(inspection.problems, Vec::<String>::new());
    let streams = inspection.tally.expect("tally").streams;
    assert_eq!(
        streams,
        [dwellmq_store::StreamTally {
            id: 4,
            records: 5,
            bytes: 5 * record_bytes(&[0; 10]),
            first_offset: Some(5),
            next_offset: 10,
        }]
    );
}
