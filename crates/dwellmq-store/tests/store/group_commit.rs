//! Group commit: what arrives while a commit runs goes into the next one, together.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{faulty_options, payload, Faults, Scratch};
use dwellmq_store::{Completion, DeadlineId, Op, Receipt, Store, StoreOptions};

fn persist(queue: u64, seq: u64) -> Op {
    Op::Persist {
        queue,
        seq,
        expires_at_ms: 0,
        delivered: false,
        message: payload("k", b"body"),
    }
}

/// Waits until the writer is inside a commit's fsync (held there by the paused backend).
fn wait_for_sync(faults: &Faults, more_than: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while faults.syncs.load(Ordering::SeqCst) <= more_than {
        assert!(Instant::now() < deadline, "the writer never reached fsync");
        std::thread::yield_now();
    }
}

/// Starts a commit and holds it in its fsync; returns the completion of that first commit.
/// A completion that sends its outcome to `tx`.
fn sending_to(tx: &mpsc::Sender<Completion>) -> impl FnOnce(Completion) + Send + 'static {
    let tx = tx.clone();
    move |outcome| {
        let _ = tx.send(outcome);
    }
}

/// The commit numbers of the next `n` completions, in the order they arrive.
fn commit_numbers(rx: &mpsc::Receiver<Completion>, n: usize) -> Vec<u64> {
    (0..n)
        .map(|_| {
            rx.recv()
                .expect("completion")
                .expect("committed")
                .commit
                .expect("written")
        })
        .collect()
}

/// A store whose commits take at most 50 ops, its writer held in a first commit.
fn bounded_store_held_in_a_commit(
    dir: &Scratch,
) -> (Store, Arc<Faults>, mpsc::Receiver<Completion>) {
    let (mut options, faults) = faulty_options();
    options.max_batch_ops = 50;
    let store = Store::open_with(dir.path(), options).expect("open");
    let first = hold_writer_in_a_commit(&store, &faults);
    (store, faults, first)
}

fn hold_writer_in_a_commit(store: &Store, faults: &Faults) -> mpsc::Receiver<Completion> {
    let before = faults.syncs.load(Ordering::SeqCst);
    faults.pause();
    let (tx, rx) = mpsc::channel();
    store.submit(vec![persist(1, 0)], sending_to(&tx));
    wait_for_sync(faults, before);
    rx
}

#[test]
fn submissions_from_many_producers_during_a_commit_share_the_next_one() {
    let dir = Scratch::new("group");
    let (options, faults) = faulty_options();
    let store = Arc::new(Store::open_with(dir.path(), options).expect("open"));
    let first = hold_writer_in_a_commit(&store, &faults);

    let (tx, rx) = mpsc::channel();
    let producers: Vec<_> = (0..4u64)
        .map(|p| {
            let store = store.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for seq in 0..50u64 {
                    let tx = tx.clone();
                    store.submit(vec![persist(10 + p, seq)], move |r| {
                        let _ = tx.send(r);
                    });
                }
            })
        })
        .collect();
    for producer in producers {
        producer.join().expect("producer");
    }
    // Nothing is confirmed while the commit before is not durable.
    assert!(rx.try_recv().is_err());
    faults.resume();

    assert_eq!(
        first.recv().unwrap().expect("first"),
        Receipt { commit: Some(1) }
    );
    for _ in 0..200 {
        let receipt = rx.recv().expect("completion").expect("committed");
        assert_eq!(receipt.commit, Some(2), "all 200 went into one commit");
    }
    let stats = store.stats();
    assert_eq!(stats.commits, 2);
    assert_eq!(stats.submissions, 201);
    assert_eq!(stats.ops_written, 201);
    let snap = store.snapshot().unwrap();
    for queue in 10..14 {
        assert_eq!(snap.queue_messages(queue, 0, 100).unwrap().len(), 50);
    }
}

#[test]
fn a_message_persisted_and_forgotten_before_its_commit_started_is_never_written() {
    let dir = Scratch::new("elide");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    let first = hold_writer_in_a_commit(&store, &faults);

    let id = DeadlineId {
        due_ms: 9_000,
        seq: 5,
    };
    let (tx, rx) = mpsc::channel();
    let ops = [
        vec![persist(2, 1)],
        vec![persist(2, 2)],
        vec![Op::Hold {
            held_at_ms: 0,
            id,
            vhost: "/".into(),
            exchange: "d".into(),
            message: crate::common::packed("k", b"held"),
        }],
        // Delivered and acked (or released) before the commit that would write it.
        vec![Op::Forget { queue: 2, seq: 1 }, Op::Release { id }],
    ];
    for ops in ops {
        let tx = tx.clone();
        store.submit(ops, move |r| {
            let _ = tx.send(r);
        });
    }
    faults.resume();
    first.recv().unwrap().expect("first commit");
    for _ in 0..4 {
        rx.recv().unwrap().expect("completed");
    }
    let stats = store.stats();
    assert_eq!(stats.ops_elided, 4);
    assert_eq!(stats.ops_written, 2, "the first persist and persist(2, 2)");
    let snap = store.snapshot().unwrap();
    let seqs: Vec<u64> = snap
        .queue_messages(2, 0, 10)
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, [2]);
    assert_eq!(snap.delayed_count().unwrap(), 0);
}

#[test]
fn a_batch_undone_entirely_needs_no_commit() {
    let dir = Scratch::new("elide-all");
    let store = Store::open(dir.path()).expect("open");
    let receipt = store
        .write(vec![persist(3, 1), Op::Forget { queue: 3, seq: 1 }])
        .expect("completed");
    assert_eq!(receipt, Receipt { commit: None });
    assert_eq!(store.stats().commits, 0);
    // A forget alone is a real removal.
    store.write(vec![persist(3, 2)]).unwrap();
    store.write(vec![Op::Forget { queue: 3, seq: 2 }]).unwrap();
    assert_eq!(store.stats().commits, 2);
    assert!(store
        .snapshot()
        .unwrap()
        .queue_messages(3, 0, 10)
        .unwrap()
        .is_empty());
}

#[test]
fn a_state_write_forgotten_in_the_same_batch_is_dropped() {
    let dir = Scratch::new("elide-state");
    let store = Store::open(dir.path()).expect("open");
    let delivered = Op::SetState {
        queue: 4,
        seq: 1,
        state: dwellmq_store::DeliveryState {
            redelivered: true,
            ..Default::default()
        },
    };
    // Persisted, delivered and acked within one batch: nothing at all is written.
    let receipt = store
        .write(vec![
            persist(4, 1),
            delivered.clone(),
            Op::Forget { queue: 4, seq: 1 },
        ])
        .expect("completed");
    assert_eq!(receipt, Receipt { commit: None });
    assert_eq!(store.stats().ops_elided, 3);
    // Persisted earlier: the state write goes, the forget stays.
    store.write(vec![persist(4, 1)]).unwrap();
    store
        .write(vec![delivered.clone(), Op::Forget { queue: 4, seq: 1 }])
        .unwrap();
    let stats = store.stats();
    assert_eq!(stats.ops_elided, 4);
    assert_eq!(stats.ops_written, 2, "the persist, then the forget alone");
    // Not forgotten: the state is written.
    store.write(vec![persist(4, 2)]).unwrap();
    let mut later = delivered;
    if let Op::SetState { seq, .. } = &mut later {
        *seq = 2;
    }
    store.write(vec![later]).unwrap();
    let stored = store.snapshot().unwrap().queue_messages(4, 0, 10).unwrap();
    assert_eq!(stored.len(), 1);
    assert!(stored[0].state.redelivered);
}

#[test]
fn a_panicking_completion_does_not_stop_the_writer() {
    let dir = Scratch::new("panic");
    let store = Store::open(dir.path()).expect("open");
    store.submit(vec![persist(1, 1)], |_| panic!("a broken callback"));
    assert!(store.write(vec![persist(1, 2)]).is_ok());
    assert_eq!(
        store
            .snapshot()
            .unwrap()
            .queue_messages(1, 0, 10)
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn closing_commits_what_was_submitted() {
    let dir = Scratch::new("close");
    let store = Store::open(dir.path()).expect("open");
    for seq in 0..100 {
        store.submit_detached(vec![persist(4, seq)]);
    }
    store.close();
    let store = Store::open(dir.path()).expect("reopen");
    let recovered = store
        .snapshot()
        .unwrap()
        .queue_messages(4, 0, 1000)
        .unwrap();
    assert_eq!(recovered.len(), 100);
}

#[test]
fn the_last_handle_may_be_dropped_in_a_completion() {
    let dir = Scratch::new("drop-in-callback");
    let (options, faults) = faulty_options();
    let store = Arc::new(Store::open_with(dir.path(), options).expect("open"));
    let first = hold_writer_in_a_commit(&store, &faults);
    let (tx, rx) = mpsc::channel();
    let last = store.clone();
    store.submit(vec![persist(5, 1)], move |outcome| {
        drop(last);
        let _ = tx.send(outcome.is_ok());
    });
    // The completion now holds the only handle; it is dropped on the writer thread.
    drop(store);
    faults.resume();
    assert!(first.recv().expect("first").is_ok());
    assert!(rx.recv().expect("completion ran"));
}

#[test]
fn a_burst_is_split_into_commits_of_bounded_size() {
    let dir = Scratch::new("bounded");
    let (store, faults, first) = bounded_store_held_in_a_commit(&dir);
    let (tx, rx) = mpsc::channel();
    for seq in 0..200 {
        store.submit(vec![persist(6, seq)], sending_to(&tx));
    }
    faults.resume();
    first.recv().unwrap().expect("first");
    let mut commits = commit_numbers(&rx, 200);
    commits.dedup();
    assert_eq!(
        commits,
        [2, 3, 4, 5],
        "four commits of 50, in submission order"
    );
}

#[test]
fn what_a_group_submits_goes_into_one_commit_even_while_the_writer_is_idle() {
    let dir = Scratch::new("group");
    // One submission per commit unless grouped: without the group the two submissions below
    // could only be committed apart, whenever the writer picks them up.
    let options = StoreOptions {
        max_batch: 1,
        ..StoreOptions::default()
    };
    let store = Store::open_with(dir.path(), options).expect("open");
    // A commit waited for: the writer is idle, waiting for the next submission.
    let before = store.write(vec![persist(1, 0)]).expect("committed").commit;
    let commits_before = store.stats().commits;
    let (tx, rx) = mpsc::channel();
    let group = store.group();
    store.submit(vec![persist(1, 1)], sending_to(&tx));
    store.submit(vec![Op::Forget { queue: 1, seq: 7 }], sending_to(&tx));
    drop(group);
    let first = rx.recv().unwrap().expect("committed");
    let second = rx.recv().unwrap().expect("committed");
    assert!(first.commit > before);
    assert_eq!(first, second, "one commit for the whole group");
    assert_eq!(
        store.stats().commits,
        commits_before + 1,
        "the group made one commit"
    );
    store.close();
}

#[test]
fn a_group_larger_than_the_batch_limits_still_commits_whole() {
    let dir = Scratch::new("big-group");
    let (store, faults, first) = bounded_store_held_in_a_commit(&dir);
    let (tx, rx) = mpsc::channel();
    // Ungrouped submissions before and after the group are still split at the limit.
    for seq in 0..30 {
        store.submit(vec![persist(7, seq)], sending_to(&tx));
    }
    let group = store.group();
    for seq in 30..150 {
        store.submit(vec![persist(7, seq)], sending_to(&tx));
    }
    drop(group);
    for seq in 150..200 {
        store.submit(vec![persist(7, seq)], sending_to(&tx));
    }
    faults.resume();
    first.recv().unwrap().expect("first");
    let commits = commit_numbers(&rx, 200);
    let grouped = commits[30];
    assert!(
        commits[30..150].iter().all(|&c| c == grouped),
        "the group's 120 submissions in one commit: {commits:?}"
    );
    assert!(
        commits.is_sorted(),
        "commits in submission order: {commits:?}"
    );
    // Every other commit keeps to the limit of 50 ops: those after the group do not ride
    // along with it, however many are queued when the writer gathers.
    for commit in commits.iter().copied().filter(|&c| c != grouped) {
        let ops = commits.iter().filter(|&&c| c == commit).count();
        assert!(ops <= 50, "commit {commit} took {ops} ops: {commits:?}");
    }
    assert!(
        commits[150] > grouped,
        "the 50 after the group commit apart: {commits:?}"
    );
}

fn hold(id: DeadlineId) -> Op {
    Op::Hold {
        held_at_ms: 0,
        id,
        vhost: "/".into(),
        exchange: "d".into(),
        message: crate::common::packed("k", b"held"),
    }
}

/// A held message moved to now and released before the writer's next commit: the move's new
/// hold and the release's removal of it meet in one batch and are elided, and that commit
/// fails. The release's group (its removal, and the copy it put in a queue) is still retried:
/// the next commit writes the queue's copy.
#[test]
fn a_release_elided_with_its_hold_in_a_failed_commit_still_retries_its_queue_copy() {
    let dir = Scratch::new("elide-fail");
    let (options, faults) = faulty_options();
    let store = Store::open_with(dir.path(), options).expect("open");
    let old = DeadlineId {
        due_ms: 9_000,
        seq: 1,
    };
    store.write(vec![hold(old)]).expect("commit");
    let first = hold_writer_in_a_commit(&store, &faults);
    store.fail_next_commits(1);
    let new = DeadlineId {
        due_ms: 5_000,
        seq: 2,
    };
    let (tx, rx) = mpsc::channel();
    // The move: the old hold's removal and the new hold, in one submission.
    store.submit(vec![Op::Release { id: old }, hold(new)], sending_to(&tx));
    // The release: the new hold's removal and the queue's copy, in one group.
    {
        let _group = store.group();
        store.submit(vec![Op::Release { id: new }], sending_to(&tx));
        store.submit(vec![persist(2, 1)], sending_to(&tx));
    }
    faults.resume();
    first.recv().expect("first").expect("the first commit");
    for _ in 0..3 {
        let outcome = rx.recv_timeout(Duration::from_secs(10)).expect("completed");
        assert!(outcome.is_err(), "the batch's commit failed");
    }
    store.write(Vec::new()).expect("the next commit");
    let snap = store.snapshot().expect("snapshot");
    let seqs: Vec<u64> = snap
        .queue_messages(2, 0, 10)
        .expect("read")
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, [1], "the released message's queue copy");
    assert_eq!(snap.delayed_count().expect("count"), 0, "no hold left");
}
