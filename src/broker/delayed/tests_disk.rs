//! The disk tier with a real store: what RAM keeps of messages held on disk, and that they
//! all come back out at their due times.

use std::sync::Arc;

use dwellmq_codec::BasicProperties;
use dwellmq_core::Message;

use super::disk::WINDOW_BATCH;
use super::held::Held;
use super::DelayedMessages;
use crate::broker::exchange::Exchange;
use crate::broker::memory::MemoryMonitor;
use crate::broker::queue::Queue;
use crate::broker::vhost::VHost;

const DAY_MS: u64 = 86_400_000;

/// A store in a fresh temporary directory, removed when dropped.
pub(super) struct TempStore {
    dir: std::path::PathBuf,
    pub(super) store: Arc<dwellmq_store::Store>,
}

impl TempStore {
    pub(super) fn new(name: &str) -> TempStore {
        let dir = std::env::temp_dir().join(format!("dwellmq-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Arc::new(dwellmq_store::Store::open(&dir).expect("store opens"));
        TempStore { dir, store }
    }
}

impl TempStore {
    /// As `new`, over a backend that fails on demand.
    fn faulty(name: &str) -> (TempStore, Arc<dwellmq_store::faults::Faults>) {
        let dir = std::env::temp_dir().join(format!("dwellmq-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let faults = Arc::new(dwellmq_store::faults::Faults::default());
        let options = dwellmq_store::faults::options(Arc::clone(&faults));
        let store = dwellmq_store::Store::open_with(&dir, options).expect("store opens");
        let store = Arc::new(store);
        (TempStore { dir, store }, faults)
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        self.store.shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A holder at time 0 whose durable exchanges hold on `temp`'s store, beyond the horizon on
/// disk only.
pub(super) fn on_disk(temp: &TempStore, memory: Arc<MemoryMonitor>) -> Arc<DelayedMessages> {
    let delayed = DelayedMessages::new(0, memory);
    delayed.set_store(Arc::clone(&temp.store));
    delayed.attach_disk(Arc::clone(&temp.store), 0);
    delayed
}

/// Checks that the store holds no delayed message, and counts none for any exchange.
fn assert_nothing_held(temp: &TempStore) {
    let snapshot = temp.store.snapshot().expect("snapshot");
    assert_eq!(snapshot.delayed_count().expect("count"), 0);
    assert_eq!(snapshot.delayed_counts().expect("counts"), Vec::new());
}

/// A vhost with a durable delayed fanout exchange `d` bound to queue `q`.
fn durable_setup() -> (Arc<VHost>, Arc<Exchange>, Arc<Queue>) {
    super::tests::setup_with(true)
}

fn message(body: Vec<u8>) -> Arc<Message> {
    Message::new(
        "d".into(),
        "k".into(),
        BasicProperties::default(),
        bytes::Bytes::from(body).into(),
        None,
    )
}

#[test]
fn a_held_message_is_no_bigger_than_a_target_and_its_contents() {
    // A stored id per held message (16 octets and a tag) made every one ~34 octets bigger;
    // the rare caught-up ones keep theirs in a side map.
    assert!(
        std::mem::size_of::<Held>() <= 40,
        "{}",
        std::mem::size_of::<Held>()
    );
}

#[test]
fn ids_of_messages_held_on_disk_stay_bounded_in_ram_and_all_are_released_when_due() {
    let temp = TempStore::new("disk-tier");
    let (vhost, exchange, queue) = durable_setup();
    let memory = MemoryMonitor::new(u64::MAX);
    let delayed = on_disk(&temp, Arc::clone(&memory));
    const N: u64 = 50_000;
    // Due over three days from tomorrow on, in no particular order.
    let due_of = |i: u64| DAY_MS + (i * 7_919) % (3 * DAY_MS);
    for i in 0..N {
        delayed.hold(
            &vhost,
            &exchange,
            message(i.to_be_bytes().to_vec()),
            due_of(i),
        );
    }
    // Every hold committed (the writer works in submission order).
    temp.store.write(Vec::new()).expect("commit");
    let (resident, on_disk) = delayed.disk_resident().expect("a disk tier");
    assert_eq!(on_disk, N);
    assert_eq!(delayed.len(), N as usize);
    assert_eq!(delayed.stats("/", "d"), (N as usize, 8 * N));
    // Nothing of them is in RAM but a window of ids, and none is charged as held memory.
    assert!(resident <= 4 * WINDOW_BATCH, "{resident} ids in RAM");
    assert_eq!(memory.used(), 0);

    // As the timer thread would: every deadline at its time.
    let mut released = 0;
    let mut next_commit = 0;
    let mut most_resident = 0;
    while let Some(now) = delayed.next_wake() {
        released += delayed.release_due(now);
        delayed.move_in(now, None);
        most_resident = most_resident.max(delayed.disk_resident().expect("a disk tier").0);
        // Releases are committed as they go, as they would be in a running broker.
        if released >= next_commit {
            temp.store.write(Vec::new()).expect("commit");
            next_commit += 5_000;
        }
    }
    assert_eq!(released, N as usize);
    assert_eq!(queue.message_count(&*vhost), N as usize);
    assert!(
        most_resident <= 4 * WINDOW_BATCH + 2 * 64,
        "{most_resident}"
    );
    // Every one on time.
    let lateness = delayed.lateness.snapshot();
    assert_eq!((lateness.count, lateness.sum_ms), (N, 0));
    assert_eq!(delayed.len(), 0);
    temp.store.write(Vec::new()).expect("commit");
    assert_nothing_held(&temp);
}

#[test]
fn a_durable_message_due_within_the_horizon_is_released_once_though_its_hold_is_on_disk() {
    let temp = TempStore::new("disk-tier-near");
    let (vhost, exchange, queue) = durable_setup();
    let memory = MemoryMonitor::new(u64::MAX);
    let delayed = on_disk(&temp, Arc::clone(&memory));
    // One far message (held on disk: its committed hold makes the window read the index
    // again) and ten near ones (held in the wheel, their holds written all the same).
    delayed.hold(&vhost, &exchange, message(b"far".to_vec()), 10_000);
    for i in 0..10u64 {
        delayed.hold(&vhost, &exchange, message(vec![i as u8]), 200 + i * 50);
    }
    temp.store.write(Vec::new()).expect("commit");
    let mut released = 0;
    while let Some(now) = delayed.next_wake() {
        released += delayed.release_due(now);
        delayed.move_in(now, None);
        temp.store.write(Vec::new()).expect("commit");
    }
    // A refill that read the near ones' holds from the index released each of them twice.
    assert_eq!(released, 11);
    assert_eq!(queue.message_count(&*vhost), 11);
    assert_eq!(delayed.len(), 0);
}

#[test]
fn releases_whose_commit_failed_are_forgotten_once_a_later_release_commits() {
    use std::sync::atomic::Ordering;
    let (temp, faults) = TempStore::faulty("disk-tier-failed-release");
    let (vhost, exchange, queue) = durable_setup();
    let memory = MemoryMonitor::new(u64::MAX);
    let delayed = on_disk(&temp, Arc::clone(&memory));
    for i in 0..10u64 {
        delayed.hold(&vhost, &exchange, message(vec![i as u8]), 5_000 + i);
    }
    delayed.hold(&vhost, &exchange, message(b"later".to_vec()), 20_000);
    temp.store.write(Vec::new()).expect("commit");
    let serve_until = |until: u64| {
        while let Some(now) = delayed.next_wake().filter(|&now| now <= until) {
            delayed.release_due(now);
            delayed.move_in(now, None);
        }
    };

    // The ten are released while writes fail: their removal stays to do.
    faults.fail_writes.store(true, Ordering::SeqCst);
    serve_until(10_000);
    assert_eq!(queue.message_count(&*vhost), 10);
    assert!(temp.store.write(Vec::new()).is_err(), "writes fail");
    // The store keeps their releases (retried, and hiding them from the index); the disk tier
    // keeps nothing of them.
    assert_eq!(temp.store.lag_len(), (0, 10));
    let (resident, _) = delayed.disk_resident().expect("a disk tier");
    assert!(
        resident <= 1,
        "{resident}: only the later one may be in the window"
    );

    // Writes work again: the next release that commits takes the carried ones along.
    faults.fail_writes.store(false, Ordering::SeqCst);
    temp.store.write(Vec::new()).expect("writes work again");
    serve_until(20_000);
    temp.store.write(Vec::new()).expect("commit");
    assert_eq!(queue.message_count(&*vhost), 11);
    assert_eq!(delayed.disk_resident().expect("a disk tier"), (0, 0));
    assert_nothing_held(&temp);
}

#[test]
fn a_page_read_outside_the_lock_keeps_holds_and_releases_that_committed_during_the_read() {
    let temp = TempStore::new("disk-tier-refill-ahead");
    let (vhost, exchange, queue) = durable_setup();
    let delayed = on_disk(&temp, MemoryMonitor::new(u64::MAX));
    // As under the system clock: holds leave the index to the disk mover.
    delayed.hand_disk_to_mover();
    // Nothing fell due while the broker was down: the catch-up window is done with.
    assert_eq!(delayed.next_disk_move(0), None);
    let hold = |due: u64| delayed.hold(&vhost, &exchange, message(due.to_be_bytes().to_vec()), due);
    // Ten held and committed: the window has not read them yet.
    for i in 0..10 {
        hold(DAY_MS + 10 * i);
    }
    temp.store.write(Vec::new()).expect("commit");
    let first = delayed.list("/", "d", 1)[0].id;

    // A page of the index starts being read: its snapshot shows those ten.
    let read = delayed.disk.lock().as_mut().and_then(|d| d.begin_refill());
    let read = read.expect("an empty window reads ahead");
    let view = read.store.held_view().expect("view");
    // Meanwhile, five more are held (three due among the ten, two after them) and committed,
    // and the first of the ten is cancelled and its removal committed.
    for due in [
        DAY_MS + 5,
        DAY_MS + 45,
        DAY_MS + 85,
        DAY_MS + 500,
        DAY_MS + 600,
    ] {
        hold(due);
    }
    assert!(delayed.cancel(first));
    temp.store.write(Vec::new()).expect("commit");
    let page = view.delayed_ids(read.after, super::disk::WINDOW_BATCH);
    assert_eq!(page.as_ref().map(Vec::len).ok(), Some(10));
    delayed
        .disk
        .lock()
        .as_mut()
        .expect("a disk tier")
        .end_refill(page);

    // The nine left of the page and the three committed among them are in the window; the
    // cancelled one is not back, and the two beyond are left to the next page.
    assert_eq!(delayed.disk_resident(), Some((12, 14)));
    // As the disk mover and the timer thread would: every deadline at its time.
    let (mut released, mut now) = (0, 0);
    loop {
        let (move_at, wake_at) = (delayed.next_disk_move(now), delayed.next_wake());
        let Some(at) = [move_at, wake_at].into_iter().flatten().min() else {
            break;
        };
        now = at;
        if move_at.is_some_and(|at| at <= now) {
            delayed.move_in_disk(now);
        }
        released += delayed.release_due(now);
        delayed.move_in(now, None);
        temp.store.write(Vec::new()).expect("commit");
    }
    assert_eq!((released, queue.message_count(&*vhost)), (14, 14));
    assert_eq!(delayed.disk_resident(), Some((0, 0)));
}

/// Serves every deadline at its time, committing as it goes; returns how many were released.
fn serve_all(delayed: &DelayedMessages, store: &dwellmq_store::Store) -> usize {
    let mut released = 0;
    while let Some(now) = delayed.next_wake() {
        released += delayed.release_due(now);
        delayed.move_in(now, None);
        store.write(Vec::new()).expect("commit");
    }
    released
}

#[test]
fn an_exchange_declared_again_while_its_deleted_namesake_is_purged_keeps_its_messages() {
    let temp = TempStore::new("disk-tier-declared-again");
    let (vhost, old, old_queue) = durable_setup();
    let delayed = on_disk(&temp, MemoryMonitor::new(u64::MAX));
    let hold = |exchange: &Arc<Exchange>, due: u64| {
        delayed.hold(&vhost, exchange, message(due.to_be_bytes().to_vec()), due);
    };
    // The old exchange: two in the wheel, three on disk a day away, three two days away.
    for due in [500, 700, DAY_MS, DAY_MS + 2, DAY_MS + 4] {
        hold(&old, due);
    }
    for due in [2 * DAY_MS, 2 * DAY_MS + 2, 2 * DAY_MS + 4] {
        hold(&old, due);
    }
    temp.store.write(Vec::new()).expect("commit");

    // Deleted; its purge begins.
    vhost.delete_exchange("d", false).expect("deleted");
    let key = super::key_of(&vhost.name, &"d".into());
    let dropping = delayed
        .start_dropping(&key, true)
        .expect("it holds messages");
    // Meanwhile another connection declares `d` again and publishes to it, due among the old
    // ones everywhere: in the wheel, a day away, two days away.
    let (new, new_queue) = super::tests::declare_bound(&vhost, true, "q2");
    for due in [600, DAY_MS + 1, DAY_MS + 3, 2 * DAY_MS + 1, 2 * DAY_MS + 3] {
        hold(&new, due);
    }
    temp.store.write(Vec::new()).expect("commit");
    // And the disk mover takes the day-away ones out before the purge gets to them: the
    // old ones must not go out through the new exchange.
    delayed.move_in(DAY_MS - 100, None);
    // The purge drops the other five (the mover dropped three).
    assert_eq!(delayed.finish_dropping(&key, dropping), 5);
    assert_eq!(delayed.stats("/", "d"), (5, 40));

    assert_eq!(serve_all(&delayed, &temp.store), 5);
    assert_eq!(new_queue.message_count(&*vhost), 5);
    assert_eq!(old_queue.message_count(&*vhost), 0);
    assert_eq!(delayed.len(), 0);
    assert_eq!(delayed.disk_resident(), Some((0, 0)));
    assert_nothing_held(&temp);
}

#[test]
fn a_deleted_exchange_whose_namesake_already_published_loses_only_its_own_messages() {
    let temp = TempStore::new("disk-tier-taken-over");
    let (vhost, old, old_queue) = durable_setup();
    let delayed = on_disk(&temp, MemoryMonitor::new(u64::MAX));
    let hold = |exchange: &Arc<Exchange>, due: u64| {
        delayed.hold(&vhost, exchange, message(due.to_be_bytes().to_vec()), due);
    };
    for due in [500, 1_500, 5_000, DAY_MS] {
        hold(&old, due);
    }
    temp.store.write(Vec::new()).expect("commit");
    // Deleted, declared again and published to before the deleting connection drops the
    // old one's messages: the index now points at the new exchange.
    vhost.delete_exchange("d", false).expect("deleted");
    let (new, new_queue) = super::tests::declare_bound(&vhost, true, "q2");
    for due in [600, 1_600, 5_100, DAY_MS + 1] {
        hold(&new, due);
    }
    temp.store.write(Vec::new()).expect("commit");
    assert_eq!(delayed.forget_exchange(&vhost.name, &"d".into()), 4);
    assert_eq!(delayed.stats("/", "d").0, 4);

    assert_eq!(serve_all(&delayed, &temp.store), 4);
    assert_eq!(new_queue.message_count(&*vhost), 4);
    assert_eq!(old_queue.message_count(&*vhost), 0);
    assert_eq!(delayed.len(), 0);
    assert_nothing_held(&temp);
}

#[test]
fn a_move_in_does_not_release_bodies_read_ahead_before_their_exchanges_deletion() {
    let temp = TempStore::new("disk-tier-read-ahead-purge");
    let (vhost, exchange, queue) = durable_setup();
    let delayed = on_disk(&temp, MemoryMonitor::new(u64::MAX));
    for due in [DAY_MS, DAY_MS + 1] {
        delayed.hold(&vhost, &exchange, message(due.to_be_bytes().to_vec()), due);
    }
    temp.store.write(Vec::new()).expect("commit");
    let gone = delayed.list("/", "d", 1)[0].id;
    // After the bodies are read ahead: the exchange is deleted, the first one's record
    // leaves the store (as the deletion commits), and the drop, whose page no longer shows
    // it, runs to its end. The older snapshot's body must not bring it back.
    let (store, holder, home) = (
        Arc::clone(&temp.store),
        Arc::clone(&delayed),
        Arc::clone(&vhost),
    );
    let id = super::id_of(gone);
    *delayed.after_read_ahead.lock() = Some(Box::new(move || {
        home.delete_exchange("d", false).expect("deleted");
        store
            .write(vec![dwellmq_store::Op::Release { id }])
            .expect("commit");
        assert_eq!(holder.forget_exchange(&"/".into(), &"d".into()), 1);
    }));
    delayed.move_in(DAY_MS - 100, None);
    assert!(delayed.after_read_ahead.lock().is_none(), "the hook ran");
    assert_eq!(delayed.release_due(DAY_MS + 1), 0);
    assert_eq!(queue.message_count(&*vhost), 0);
    assert_eq!(delayed.len(), 0);
    drop(exchange);
}
