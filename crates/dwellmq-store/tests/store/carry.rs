//! What a failed commit carries into the next one: every removal, once (however often it was
//! submitted while the disk failed), and a replayed write counted once when the failed commit
//! had reached the disk after all.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::{faulty_options, packed, payload, Scratch};
use dwellmq_store::faults::{DiskModel, Reach};
use dwellmq_store::{DeadlineId, DeliveryState, Op, Store, StoreError};

fn persist(queue: u64, seq: u64) -> Op {
    Op::Persist {
        queue,
        seq,
        expires_at_ms: 0,
        delivered: false,
        message: payload("k", b"body"),
    }
}

fn hold(id: DeadlineId) -> Op {
    Op::Hold {
        held_at_ms: 0,
        id,
        vhost: "/".into(),
        exchange: "d".into(),
        message: packed("k", b"held"),
    }
}

fn state(delivery_count: u32) -> DeliveryState {
    DeliveryState {
        redelivered: true,
        delivery_count,
        acquired_count: delivery_count,
        ready_at_ms: 0,
        dead_letter_reason: None,
    }
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

/// A quorum queue redelivering one message over and over, an operator purging a queue again
/// and again, a forget and a release submitted twice: while every commit fails, the writer
/// carries each of them once (the latest state write), not once per submission.
#[test]
fn a_store_that_keeps_failing_carries_each_removal_once() {
    let dir = Scratch::new("carry-bounded");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    let id = DeadlineId { due_ms: 50, seq: 1 };
    store
        .write(vec![persist(1, 1), persist(1, 2), persist(2, 1), hold(id)])
        .expect("commit");
    faults.fail_writes.store(true, Ordering::SeqCst);
    const ROUNDS: u32 = 200;
    let (tx, rx) = std::sync::mpsc::channel();
    for round in 0..ROUNDS {
        let submissions = [
            vec![Op::SetState {
                queue: 1,
                seq: 1,
                state: state(round + 1),
            }],
            vec![Op::Purge { queue: 2 }],
            vec![Op::Forget { queue: 1, seq: 2 }],
            vec![Op::Release { id }],
        ];
        for ops in submissions {
            let tx = tx.clone();
            store.submit(ops, move |outcome| {
                let _ = tx.send(outcome.is_ok());
            });
        }
    }
    for _ in 0..ROUNDS * 4 {
        assert!(!rx.recv().expect("every submission completes"), "failed");
    }
    let written_before = store.stats().ops_written;
    faults.fail_writes.store(false, Ordering::SeqCst);
    store.write(Vec::new()).expect("writes work again");
    let carried = store.stats().ops_written - written_before;
    assert!(
        carried <= 4,
        "{carried} ops carried for 4 distinct removals ({} submitted)",
        ROUNDS * 4
    );
    // What was carried is what all those submissions meant.
    let snapshot = readable(&store);
    let left = snapshot.queue_messages(1, 0, 10).expect("read");
    assert_eq!(left.len(), 1);
    assert_eq!((left[0].seq, left[0].state), (1, state(ROUNDS)));
    assert!(snapshot.queue_messages(2, 0, 10).expect("read").is_empty());
    assert_eq!(snapshot.delayed_count().expect("count"), 0);
    drop(snapshot);
    store.close();
}

/// A dead-lettering into a delayed exchange: the removal from its queue and the hold, in one
/// group. Its commit's last fsync fails after everything had reached the disk: the commit is
/// there, though its submitters heard it failed, and the writer replays the group. The hold is
/// counted once, and indexed once.
#[test]
fn a_replayed_hold_whose_failed_commit_reached_the_disk_is_counted_once() {
    let dir = Scratch::new("carry-replayed-hold");
    let (options, faults) = faulty_options();
    faults.set_model(DiskModel {
        at_failed_sync: Reach::Everything,
        ..DiskModel::default()
    });
    let store = Store::open_with(dir.path(), options).expect("open");
    store
        .write(vec![persist(1, 1), persist(1, 9)])
        .expect("commit");
    let id = DeadlineId {
        due_ms: 5_000,
        seq: 7,
    };
    // The commit's first fsync (its pages) succeeds; the second (the header that makes it
    // the current one) fails, after the header reached the disk.
    faults.fail_syncs(1, 1);
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let _group = store.group();
        for ops in [vec![Op::Forget { queue: 1, seq: 1 }], vec![hold(id)]] {
            let tx = tx.clone();
            store.submit(ops, move |outcome| {
                let _ = tx.send(outcome.is_ok());
            });
        }
    }
    for _ in 0..2 {
        assert!(
            !rx.recv().expect("completion"),
            "the commit was reported failed"
        );
    }
    assert_eq!(faults.stats().failed_syncs, 1);
    // It reached the disk all the same: the writer reopened the file from the disk.
    assert_eq!(
        readable(&store).delayed_ids(None, 10).expect("read"),
        [id],
        "the failed commit is on disk"
    );
    // The writer replays the group with the next commit.
    store.write(Vec::new()).expect("commit");
    let expect_counts = |store: &Store| {
        let snapshot = readable(store);
        let counts = snapshot.delayed_counts().expect("counts");
        assert_eq!(counts.len(), 1, "{counts:?}");
        assert_eq!(counts[0].2, 1, "the hold is counted once: {counts:?}");
        assert_eq!(snapshot.delayed_ids(None, 10).expect("read"), [id]);
        assert_eq!(snapshot.delayed_count().expect("count"), 1);
        let left = snapshot.queue_messages(1, 0, 10).expect("read");
        assert_eq!(left.iter().map(|m| m.seq).collect::<Vec<_>>(), [9]);
    };
    expect_counts(&store);
    store.close();
    let store = Store::open(dir.path()).expect("reopen");
    expect_counts(&store);
    store.close();
}
