//! Storage faults through a backend that fails on demand: every affected submission gets the
//! error, the writer keeps going, and later writes succeed once the fault clears.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::{faulty_options, payload, Scratch};
use dwellmq_store::{DeadlineId, Op, Store, StoreError};

fn persist(seq: u64, size: usize) -> Op {
    Op::Persist {
        queue: 1,
        seq,
        expires_at_ms: 0,
        delivered: false,
        message: payload("k", &vec![b'x'; size]),
    }
}

fn stored_seqs(dir: &Scratch) -> Vec<u64> {
    let store = Store::open(dir.path()).expect("reopen without faults");
    let seqs = store
        .snapshot()
        .unwrap()
        .queue_messages(1, 0, 1000)
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    seqs
}

/// Runs: a good commit, a commit under `fault` (must fail with an error `expected` accepts),
/// another failing one, then the fault cleared and a good commit.
fn fails_then_recovers(
    name: &str,
    fault: impl Fn(&crate::common::Faults) -> &AtomicBool,
    expected: impl Fn(&StoreError) -> bool,
) -> Scratch {
    let dir = Scratch::new(name);
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    store.write(vec![persist(1, 100)]).expect("good commit");

    fault(&faults).store(true, Ordering::SeqCst);
    // Large enough to make the file grow (a full disk refuses growth).
    let err = store
        .write(vec![persist(2, 256 * 1024)])
        .expect_err("the commit must fail");
    assert!(expected(&err), "unexpected error: {err:?}");
    // Still failing: each submission hears of it, nothing hangs, nothing panics.
    let (tx, rx) = std::sync::mpsc::channel();
    for seq in 3..6 {
        let tx = tx.clone();
        store.submit(vec![persist(seq, 100)], move |r| {
            let _ = tx.send(r);
        });
    }
    for _ in 3..6 {
        let outcome = rx.recv().expect("every submission completes");
        assert!(outcome.is_err(), "a write during the fault succeeded");
    }
    assert!(store.stats().failed_commits >= 2);

    // Reading while the fault lasts is an error, not a hang or a panic.
    if let Err(e) = store.snapshot() {
        assert!(e.is_transient() || matches!(e, StoreError::Closed), "{e:?}");
    }
    fault(&faults).store(false, Ordering::SeqCst);
    // Reads work again once the writer's own probe has reopened (and verified) the file,
    // before any write.
    let stored = readable(&store).queue_messages(1, 0, 10);
    assert!(stored.expect("read").iter().any(|m| m.seq == 1));
    store
        .write(vec![persist(10, 100)])
        .expect("writes succeed again");
    store
        .write(vec![persist(11, 100)])
        .expect("and keep succeeding");
    store.close();
    dir
}

/// A snapshot, once the writer has the file open again (bounded wait: it probes every few ms).
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
fn a_failed_write_fails_its_submissions_and_later_writes_succeed() {
    let dir = fails_then_recovers(
        "fault-write",
        |f| &f.fail_writes,
        |e| matches!(e, StoreError::Io { .. }) && e.is_transient(),
    );
    // What failed was not stored; everything confirmed was.
    assert_eq!(stored_seqs(&dir), [1, 10, 11]);
}

#[test]
fn a_failed_fsync_fails_its_submissions_and_later_writes_succeed() {
    let dir = fails_then_recovers(
        "fault-fsync",
        |f| &f.fail_sync,
        |e| matches!(e, StoreError::Io { .. }),
    );
    // A commit whose fsync failed may or may not have reached the disk; every confirmed one did.
    let seqs = stored_seqs(&dir);
    for seq in [1, 10, 11] {
        assert!(
            seqs.contains(&seq),
            "confirmed message {seq} lost: {seqs:?}"
        );
    }
}

#[test]
fn a_full_disk_fails_its_submissions_with_disk_full_and_later_writes_succeed() {
    let dir = fails_then_recovers(
        "fault-full",
        |f| &f.disk_full,
        |e| matches!(e, StoreError::DiskFull { .. }) && e.is_transient(),
    );
    assert_eq!(stored_seqs(&dir), [1, 10, 11]);
}

#[test]
fn removals_in_a_failed_commit_are_retried_with_the_next_one() {
    let dir = Scratch::new("fault-retry-removal");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    let id = DeadlineId { due_ms: 50, seq: 1 };
    store
        .write(vec![
            persist(1, 10),
            persist(2, 10),
            Op::Hold {
                held_at_ms: 0,
                id,
                vhost: "/".into(),
                exchange: "d".into(),
                message: crate::common::packed("k", b"held"),
            },
        ])
        .expect("commit");
    faults.fail_writes.store(true, Ordering::SeqCst);
    // Acked and released while the disk fails: the broker has moved on.
    assert!(store
        .write(vec![Op::Forget { queue: 1, seq: 1 }, Op::Release { id }])
        .is_err());
    faults.fail_writes.store(false, Ordering::SeqCst);
    store.write(vec![persist(3, 10)]).expect("commit");
    store.close();
    // Nothing acked comes back after a restart.
    assert_eq!(stored_seqs(&dir), [2, 3]);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap().delayed_count().unwrap(), 0);
}

/// A delayed release: the copy in its queue and the removal of its hold, in one group. When
/// their commit fails, both are retried: the removal never commits without the copy.
#[test]
fn a_failed_group_with_a_removal_is_retried_whole() {
    let dir = Scratch::new("fault-retry-group");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    let id = DeadlineId { due_ms: 50, seq: 1 };
    store
        .write(vec![Op::Hold {
            held_at_ms: 0,
            id,
            vhost: "/".into(),
            exchange: "d".into(),
            message: crate::common::packed("k", b"held"),
        }])
        .expect("commit");
    faults.fail_writes.store(true, Ordering::SeqCst);
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let _group = store.group();
        let copy = tx.clone();
        store.submit(vec![persist(7, 10)], move |r| {
            let _ = copy.send(r);
        });
        store.submit(vec![Op::Release { id }], move |r| {
            let _ = tx.send(r);
        });
    }
    for _ in 0..2 {
        assert!(rx.recv().expect("completion").is_err(), "the commit failed");
    }
    faults.fail_writes.store(false, Ordering::SeqCst);
    // A plain write that fails is not retried; the group is, with the next commit.
    assert!(store.write(vec![persist(8, 10)]).is_ok());
    store.close();
    assert_eq!(stored_seqs(&dir), [7, 8], "the copy came with the removal");
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.snapshot().unwrap().delayed_count().unwrap(), 0);
}

/// A submission's removal is not written without the rest of that submission (a
/// dead-lettering's source removal with its copy, when both are one submission).
#[test]
fn a_failed_submission_with_a_removal_is_retried_whole_and_plain_writes_are_not() {
    let dir = Scratch::new("fault-retry-submission");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    store.write(vec![persist(1, 10)]).expect("commit");
    faults.fail_writes.store(true, Ordering::SeqCst);
    assert!(store.write(vec![persist(2, 10)]).is_err(), "nacked");
    assert!(store
        .write(vec![Op::Forget { queue: 1, seq: 1 }, persist(3, 10)])
        .is_err());
    faults.fail_writes.store(false, Ordering::SeqCst);
    store.write(Vec::new()).expect("writes work again");
    store.close();
    assert_eq!(stored_seqs(&dir), [3]);
}

/// A quorum queue's delivery count is written as a state record: one whose commit failed is
/// retried, so a crash cannot reset the count (and so bypass the delivery limit).
#[test]
fn a_failed_state_write_is_retried() {
    let dir = Scratch::new("fault-retry-state");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    store.write(vec![persist(1, 10)]).expect("commit");
    faults.fail_writes.store(true, Ordering::SeqCst);
    let state = dwellmq_store::DeliveryState {
        redelivered: true,
        delivery_count: 3,
        acquired_count: 4,
        ready_at_ms: 0,
        dead_letter_reason: None,
    };
    assert!(store
        .write(vec![Op::SetState {
            queue: 1,
            seq: 1,
            state
        }])
        .is_err());
    faults.fail_writes.store(false, Ordering::SeqCst);
    store.write(Vec::new()).expect("writes work again");
    store.close();
    let store = Store::open(dir.path()).expect("reopen");
    let stored = store.snapshot().unwrap().queue_messages(1, 0, 10).unwrap();
    assert_eq!(stored[0].state, state);
}

/// The test double's injected failure fails a commit carrying a message write as a failed
/// write does (its submitters get the error, what it removes is retried), without an alarm,
/// and a commit without a message write is not counted.
#[test]
fn an_injected_failure_fails_the_next_commit_with_a_message_write() {
    let dir = Scratch::new("fault-injected");
    let store = Store::open(dir.path()).expect("open");
    store.write(vec![persist(1, 10)]).expect("commit");
    store.fail_next_commits(1);
    assert_eq!(store.commits_to_fail(), 1);
    store
        .write(vec![Op::PutVhost(dwellmq_store::VhostDef {
            name: "v".into(),
            metadata: Vec::new(),
        })])
        .expect("no message write: not failed");
    let err = store
        .write(vec![Op::Forget { queue: 1, seq: 1 }, persist(2, 10)])
        .expect_err("failed on purpose");
    assert!(matches!(err, StoreError::Injected { .. }), "{err:?}");
    assert!(!store.writes_failing(), "the disk works: no alarm");
    assert_eq!(store.commits_to_fail(), 0);
    store.write(vec![persist(3, 10)]).expect("commit");
    store.close();
    assert_eq!(stored_seqs(&dir), [2, 3]);
}

/// What a failed commit left to retry is written without another submission (by the writer's
/// own retry, or at the latest when the store closes).
#[test]
fn what_a_failed_commit_left_to_retry_is_written_without_another_submission() {
    let dir = Scratch::new("fault-retry-at-close");
    let store = Store::open(dir.path()).expect("open");
    store
        .write(vec![persist(1, 10), persist(2, 10)])
        .expect("commit");
    store.fail_next_commits(1);
    assert!(store
        .write(vec![Op::Forget { queue: 1, seq: 1 }, persist(3, 10)])
        .is_err());
    store.close();
    assert_eq!(stored_seqs(&dir), [2, 3]);
}

/// The disk model: a failed fsync loses what it was to make durable (the kernel keeps the
/// pages, marked clean, and reads return them until they are dropped). The writer drops them
/// and verifies the file before it goes on, so a power cut afterwards finds exactly the
/// confirmed commits, in a file that verifies.
#[test]
fn after_a_failed_fsync_the_writer_goes_on_from_what_the_disk_holds() {
    let dir = Scratch::new("fault-fsync-model");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    store.write(vec![persist(1, 100)]).expect("commit");
    assert_eq!(faults.unsynced_bytes(), 0, "a commit syncs what it wrote");

    faults.fail_sync.store(true, Ordering::SeqCst);
    assert!(store.write(vec![persist(2, 100)]).is_err(), "nacked");
    assert!(
        faults.unsynced_bytes() > 0,
        "its pages are cached, never written"
    );
    faults.fail_sync.store(false, Ordering::SeqCst);
    readable(&store);
    // Only the failed commit's pages: the writer's probe commits may be between a write and
    // its fsync at this moment.
    assert_eq!(faults.failed_bytes(), 0, "the reopen dropped them first");
    store.write(vec![persist(3, 100)]).expect("commit");
    store
        .write(vec![Op::Forget { queue: 1, seq: 1 }])
        .expect("commit");
    // The power goes: nothing that was not synced survives. What the disk holds is the file
    // itself (the model keeps unsynced writes out of it): a copy of it is the disk after the cut.
    faults.power_cut();
    let after_cut = Scratch::new("fault-fsync-model-after-cut");
    std::fs::create_dir_all(after_cut.path()).expect("a directory");
    std::fs::copy(dir.db_file(), after_cut.db_file()).expect("copy the disk");
    assert_eq!(stored_seqs(&after_cut), [3]);
    store.close();
}

/// While the writer cannot reopen the file after a failure, a snapshot says so at once
/// instead of waiting for the writer (whose completions may need the caller's locks); once the
/// disk works, the writer reopens the file by itself.
#[test]
fn a_snapshot_does_not_wait_for_a_writer_that_cannot_reopen_the_file() {
    let dir = Scratch::new("fault-snapshot-closed");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    store.write(vec![persist(1, 100)]).expect("commit");
    faults.fail_reads.store(true, Ordering::SeqCst);
    faults.fail_writes.store(true, Ordering::SeqCst);
    assert!(store.write(vec![persist(2, 100)]).is_err());
    assert!(matches!(store.snapshot(), Err(StoreError::Closed)));
    assert!(store.writes_failing());
    faults.fail_reads.store(false, Ordering::SeqCst);
    faults.fail_writes.store(false, Ordering::SeqCst);
    let snapshot = readable(&store);
    let seqs: Vec<u64> = snapshot
        .queue_messages(1, 0, 10)
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, [1]);
    drop(snapshot);
    store.close();
}

/// Records every alarm change, and lets a test wait for one.
#[derive(Default)]
struct AlarmLog {
    changes: std::sync::Mutex<Vec<(dwellmq_store::StoreAlarm, bool)>>,
    changed: std::sync::Condvar,
}

impl AlarmLog {
    fn hook(self: &std::sync::Arc<Self>) -> dwellmq_store::AlarmHook {
        let log = self.clone();
        std::sync::Arc::new(move |alarm, on| {
            log.changes.lock().unwrap().push((alarm, on));
            log.changed.notify_all();
        })
    }

    /// Waits until `change` was recorded (and returns everything recorded so far).
    fn wait_for(
        &self,
        change: (dwellmq_store::StoreAlarm, bool),
    ) -> Vec<(dwellmq_store::StoreAlarm, bool)> {
        let mut changes = self.changes.lock().unwrap();
        while !changes.contains(&change) {
            changes = self.changed.wait(changes).unwrap();
        }
        changes.clone()
    }
}

#[test]
fn a_failing_disk_raises_the_write_alarm_and_a_probe_clears_it_without_new_submissions() {
    use dwellmq_store::StoreAlarm::WritesFailing;
    for (name, fault) in [
        ("alarm-write", 0usize),
        ("alarm-fsync", 1),
        ("alarm-full", 2),
    ] {
        let dir = Scratch::new(name);
        let (mut options, faults) = faulty_options();
        let log = std::sync::Arc::new(AlarmLog::default());
        options.on_alarm = Some(log.hook());
        options.retry_interval = std::time::Duration::from_millis(20);
        let store = Store::open_with(dir.path(), options).expect("open");
        let switch = [&faults.fail_writes, &faults.fail_sync, &faults.disk_full][fault];
        switch.store(true, Ordering::SeqCst);
        assert!(store.write(vec![persist(1, 256 * 1024)]).is_err());
        assert!(store.writes_failing());
        assert_eq!(log.wait_for((WritesFailing, true)), [(WritesFailing, true)]);
        // Nothing more is submitted: the writer's own probe finds the disk working again.
        switch.store(false, Ordering::SeqCst);
        assert_eq!(
            log.wait_for((WritesFailing, false)),
            [(WritesFailing, true), (WritesFailing, false)],
            "{name}"
        );
        assert!(!store.writes_failing());
        store.write(vec![persist(2, 10)]).expect("writes work");
        store.close();
    }
}

#[test]
fn a_backlog_over_the_limit_raises_the_backlog_alarm_until_it_drains_below_the_low_mark() {
    use dwellmq_store::StoreAlarm::Backlog;
    let dir = Scratch::new("alarm-backlog");
    let (mut options, faults) = faulty_options();
    let log = std::sync::Arc::new(AlarmLog::default());
    options.on_alarm = Some(log.hook());
    options.backlog_high = 10_000;
    options.backlog_low = 5_000;
    let store = Store::open_with(dir.path(), options).expect("open");
    // The writer is stuck in an fsync: what is submitted meanwhile queues up.
    faults.pause();
    let (tx, rx) = std::sync::mpsc::channel();
    for seq in 0..20 {
        let tx = tx.clone();
        store.submit(vec![persist(seq, 1_000)], move |r| {
            let _ = tx.send(r.is_ok());
        });
    }
    assert!(store.backlog_bytes() > 10_000);
    assert_eq!(log.wait_for((Backlog, true)), [(Backlog, true)]);
    faults.resume();
    for _ in 0..20 {
        assert!(rx.recv().unwrap(), "every queued write commits");
    }
    assert_eq!(
        log.wait_for((Backlog, false)),
        [(Backlog, true), (Backlog, false)]
    );
    // The last batch's octets are given back just after its completions ran (and the alarm
    // may have gone off with an earlier batch): wait for that, bounded.
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.backlog_bytes() != 0 && Instant::now() < deadline {
        std::thread::yield_now();
    }
    assert_eq!(store.backlog_bytes(), 0);
    store.close();
    assert_eq!(stored_seqs(&dir), (0..20).collect::<Vec<_>>());
}
