//! The held index as submitted (`Store::held_view`): holds and releases count from their
//! submission, before their commit, and a failed commit takes back only what it does not retry.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{body_of, faulty_options, payload, Faults, Scratch};
use dwellmq_store::{Completion, DeadlineId, Op, Store, StoreOptions};

fn id(due_ms: u64, seq: u64) -> DeadlineId {
    DeadlineId { due_ms, seq }
}

fn hold(id: DeadlineId, body: &[u8]) -> Op {
    Op::Hold {
        id,
        held_at_ms: 0,
        vhost: "/".into(),
        exchange: "d".into(),
        message: payload("k", body),
    }
}

fn release(id: DeadlineId) -> Op {
    Op::Release { id }
}

/// Waits until the writer is inside a commit's fsync (held there by the paused backend).
fn wait_for_sync(faults: &Faults, more_than: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while faults.syncs.load(Ordering::SeqCst) <= more_than {
        assert!(Instant::now() < deadline, "the writer never reached fsync");
        std::thread::yield_now();
    }
}

/// Lets held-back fsyncs go when dropped, so that a failing assertion ends the test rather
/// than leaving the store's shutdown waiting for its writer.
struct ResumeOnDrop(std::sync::Arc<Faults>);

impl Drop for ResumeOnDrop {
    fn drop(&mut self) {
        self.0.resume();
    }
}

/// Submits `ops` and holds the writer in that commit's fsync; returns its completion.
fn submit_held_back(store: &Store, faults: &Faults, ops: Vec<Op>) -> mpsc::Receiver<Completion> {
    let before = faults.syncs.load(Ordering::SeqCst);
    faults.pause();
    let (tx, rx) = mpsc::channel();
    store.submit(ops, move |outcome| {
        let _ = tx.send(outcome);
    });
    wait_for_sync(faults, before);
    rx
}

/// A store on the fault backend whose file has grown past what the test writes: redb syncs
/// while it grows the file, under a lock every new read waits for, so a read during a held-back
/// fsync would wait for it if that fsync were a growth's.
fn open_grown(dir: &Scratch) -> (Store, std::sync::Arc<Faults>) {
    open_grown_with(dir, |_| {})
}

fn open_grown_with(
    dir: &Scratch,
    adjust: impl FnOnce(&mut StoreOptions),
) -> (Store, std::sync::Arc<Faults>) {
    let (mut options, faults) = faulty_options();
    adjust(&mut options);
    let store = Store::open_with(dir.path(), options).expect("open");
    let filler: Vec<DeadlineId> = (0..64).map(|seq| id(1, 1_000 + seq)).collect();
    let body = vec![0u8; 32 * 1024];
    store
        .write(filler.iter().map(|&f| hold(f, &body)).collect())
        .expect("commit");
    store
        .write(filler.iter().map(|&f| release(f)).collect())
        .expect("commit");
    // Freed pages are reused once no commit still refers to them.
    for _ in 0..3 {
        store.write(vec![release(id(1, 1))]).expect("commit");
    }
    (store, faults)
}

/// Stops the writer at the end of each batch once armed (in the store's after-batch callback,
/// which runs after the batch's completions and its settling of the lag list) until let go: a
/// test then reads what a failed batch left before the writer's next probe commits the
/// carried writes. Dropping it lets the writer go for good.
struct BatchGate {
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reached: mpsc::Receiver<()>,
    go: mpsc::Sender<()>,
}

impl BatchGate {
    fn install(options: &mut StoreOptions) -> BatchGate {
        let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (reached_tx, reached) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let go_rx = parking_lot::Mutex::new(go_rx);
        let is_armed = armed.clone();
        options.after_batch = Some(std::sync::Arc::new(move || {
            if is_armed.load(Ordering::SeqCst) {
                let _ = reached_tx.send(());
                let _ = go_rx.lock().recv();
            }
        }));
        BatchGate { armed, reached, go }
    }

    /// Waits until the writer has ended a batch and stopped there.
    fn wait(&self) {
        self.reached
            .recv_timeout(Duration::from_secs(10))
            .expect("the writer never ended its batch");
    }

    /// Lets the stopped writer go on.
    fn release(&self) {
        let _ = self.go.send(());
    }
}

/// Every id the view lists, through both listings (all exchanges, and exchange `d`'s).
fn listed(store: &Store) -> Vec<DeadlineId> {
    let view = store.held_view().expect("view");
    let all = view.delayed_ids(None, 100).expect("ids");
    let of_d = view
        .delayed_ids_of("/", "d", id(0, 0), 100)
        .expect("ids of");
    assert_eq!(all, of_d);
    all
}

#[test]
fn a_hold_is_listed_and_readable_from_its_submission_on() {
    let dir = Scratch::new("lag-hold");
    let (store, faults) = open_grown(&dir);
    let _resume = ResumeOnDrop(faults.clone());
    let (a, b) = (id(5_000, 1), id(9_000, 2));
    store.write(vec![hold(a, b"a")]).expect("commit");

    let done = submit_held_back(&store, &faults, vec![hold(b, b"b")]);
    // Not committed: the snapshot does not show it, the view does.
    let snapshot = store.snapshot().expect("snapshot");
    assert!(!snapshot.delayed_contains(b).expect("contains"));
    assert_eq!(listed(&store), vec![a, b]);
    let view = store.held_view().expect("view");
    assert!(view.delayed_contains(b).expect("contains"));
    let message = view.delayed_message(b).expect("read").expect("held");
    assert_eq!(
        (message.vhost.as_str(), message.exchange.as_str()),
        ("/", "d")
    );
    assert_eq!(body_of(&message.message), b"b");
    assert_eq!(view.delayed_count().expect("count"), 2);
    // A page after the committed one starts with the submitted one.
    assert_eq!(view.delayed_ids(Some(a), 1).expect("ids"), vec![b]);
    drop((snapshot, view));

    faults.resume();
    done.recv().expect("completion").expect("committed");
    assert_eq!(store.lag_len(), (0, 0), "settled once committed");
    assert_eq!(listed(&store), vec![a, b]);
}

#[test]
fn a_release_hides_its_id_from_its_submission_on() {
    let dir = Scratch::new("lag-release");
    let (store, faults) = open_grown(&dir);
    let _resume = ResumeOnDrop(faults.clone());
    let (a, b, c) = (id(5_000, 1), id(6_000, 2), id(7_000, 3));
    store
        .write(vec![hold(a, b"a"), hold(b, b"b"), hold(c, b"c")])
        .expect("commit");

    let done = submit_held_back(&store, &faults, vec![release(a)]);
    assert!(store
        .snapshot()
        .expect("snapshot")
        .delayed_contains(a)
        .expect("contains"));
    let view = store.held_view().expect("view");
    assert!(!view.delayed_contains(a).expect("contains"));
    assert!(view.delayed_message(a).expect("read").is_none());
    assert_eq!(view.delayed_count().expect("count"), 2);
    // A page is still full though the hidden id took a place in the snapshot's.
    assert_eq!(view.delayed_ids(None, 2).expect("ids"), vec![b, c]);
    drop(view);
    assert_eq!(listed(&store), vec![b, c]);

    faults.resume();
    done.recv().expect("completion").expect("committed");
    assert_eq!(store.lag_len(), (0, 0));
    assert_eq!(listed(&store), vec![b, c]);
}

#[test]
fn a_failed_commit_keeps_its_release_hidden_and_retried_and_drops_its_hold() {
    let dir = Scratch::new("lag-failed");
    let mut gate = None;
    let (store, faults) = open_grown_with(&dir, |options| gate = Some(BatchGate::install(options)));
    let gate = gate.expect("installed");
    let _resume = ResumeOnDrop(faults.clone());
    let (a, b, c) = (id(5_000, 1), id(6_000, 2), id(7_000, 3));
    store.write(vec![hold(a, b"a")]).expect("commit");

    // The writer is held in a commit; the next batch gathers a release of `a`, a hold of `b`,
    // and a hold of `c` with its release (a pair that meets in one batch), and fails.
    let first = submit_held_back(&store, &faults, vec![hold(id(1, 9), b"x")]);
    let (tx, failed) = mpsc::channel();
    let to = tx.clone();
    store.submit(vec![hold(b, b"b")], move |outcome| {
        let _ = to.send(("b", outcome.is_ok()));
    });
    store.submit_detached(vec![release(a)]);
    store.submit(vec![hold(c, b"c")], move |outcome| {
        let _ = tx.send(("c", outcome.is_ok()));
    });
    store.submit_detached(vec![release(c)]);
    assert_eq!(listed(&store), vec![id(1, 9), b], "before the failure");
    store.fail_next_commits(1);
    gate.armed.store(true, Ordering::SeqCst);
    faults.resume();
    first.recv().expect("completion").expect("the first commit");
    gate.wait();
    gate.release();
    let mut outcomes: Vec<_> = (0..2).map(|_| failed.recv().expect("completion")).collect();
    outcomes.sort();
    assert_eq!(outcomes, vec![("b", false), ("c", false)]);
    // The writer stops at the end of the failed batch, before its probe retries.
    gate.wait();

    // The failed hold is gone from the view; the release of `a` is carried, so `a` stays
    // hidden though the snapshot still holds it.
    let view = store.held_view().expect("view");
    assert!(view.snapshot().delayed_contains(a).expect("contains"));
    assert!(view.releasing(a));
    assert!(!view.delayed_contains(a).expect("contains"));
    assert!(view.delayed_message(b).expect("read").is_none());
    assert_eq!(view.delayed_count().expect("count"), 1);
    drop(view);
    assert_eq!(listed(&store), vec![id(1, 9)]);
    assert_eq!(
        store.lag_len(),
        (0, 1),
        "only the carried release is listed"
    );

    // The next commit writes the carried release.
    gate.armed.store(false, Ordering::SeqCst);
    gate.release();
    store.write(Vec::new()).expect("commit");
    assert!(!store
        .snapshot()
        .expect("snapshot")
        .delayed_contains(a)
        .expect("contains"));
    assert_eq!(store.lag_len(), (0, 0));
    assert_eq!(listed(&store), vec![id(1, 9)]);
}

#[test]
fn a_failed_holds_completion_still_sees_the_release_that_met_it_in_the_batch() {
    let dir = Scratch::new("lag-failed-pair");
    let (store, faults) = open_grown(&dir);
    let store = std::sync::Arc::new(store);
    let _resume = ResumeOnDrop(faults.clone());
    let c = id(7_000, 3);
    let first = submit_held_back(&store, &faults, vec![hold(id(1, 9), b"x")]);
    // Its completion asks whether the hold had been released (a far tier deciding whether a
    // failed hold was still its own), and whether the writer still writes it.
    let (tx, seen) = mpsc::channel();
    let reader = std::sync::Arc::downgrade(&store);
    store.submit(vec![hold(c, b"c")], move |outcome| {
        let lag = reader.upgrade().map(|store| {
            let view = store.held_view().expect("view");
            (
                store.release_submitted(c),
                view.releasing(c),
                store.hold_submitted(c),
            )
        });
        let _ = tx.send((outcome.is_ok(), lag));
    });
    store.submit_detached(vec![release(c)]);
    // A hold of its own, so that the batch still writes a hold once the pair is elided (a
    // batch of nothing to write does not commit, and so does not fail).
    store.submit_detached(vec![hold(id(8_000, 4), b"d")]);
    store.fail_next_commits(1);
    faults.resume();
    first.recv().expect("completion").expect("the first commit");
    assert_eq!(
        seen.recv().expect("completion"),
        (false, Some((true, true, false)))
    );
    // Settled after the completions: nothing is left listed.
    store.write(Vec::new()).expect("commit");
    assert_eq!(store.lag_len(), (0, 0));
}
