//! Kept exchanges (their definitions did not restore) and the disk tier: their messages stay
//! on disk as they fall due, costing no RAM, until a declare takes the exchange back; then
//! those that fell due are caught up with as after a restart, each once, every count right.

use std::sync::Arc;

use dwellmq_codec::BasicProperties;
use dwellmq_core::Message;

use super::tests_disk::{on_disk, TempStore};
use super::DelayedMessages;
use crate::broker::exchange::Exchange;
use crate::broker::memory::MemoryMonitor;
use crate::broker::persist::CATCH_UP_PER_SECOND;
use crate::broker::queue::Queue;
use crate::broker::vhost::VHost;

const DAY_MS: u64 = 86_400_000;

fn message(n: u64) -> Arc<Message> {
    Message::new(
        "d".into(),
        "k".into(),
        BasicProperties::default(),
        bytes::Bytes::from(n.to_be_bytes().to_vec()).into(),
        None,
    )
}

/// Checks that `queue` holds the messages made from `0..n`, in that order.
fn assert_holds_in_order(queue: &Arc<Queue>, n: u64) {
    let entries = queue.peek(usize::MAX);
    assert_eq!(entries.len() as u64, n, "how many the queue holds");
    for (i, entry) in entries.iter().enumerate() {
        let body: Vec<u8> = entry.message.body.chunks().concat();
        let number = u64::from_be_bytes(body[..].try_into().expect("eight octets"));
        assert_eq!(number, i as u64, "message {i} in queue order");
    }
}

/// Exchange `d` of vhost `/` (to be kept) and of vhost `other` (restored), each bound to a
/// queue `q` of its vhost.
struct Exchanges {
    kept: (Arc<VHost>, Arc<Exchange>, Arc<Queue>),
    other: (Arc<VHost>, Arc<Exchange>, Arc<Queue>),
}

fn exchanges() -> Exchanges {
    let kept = super::tests::setup_with(true);
    let other_vhost = Arc::new(VHost::new("other".into()));
    let (exchange, queue) = super::tests::declare_bound(&other_vhost, true, "q");
    Exchanges {
        kept,
        other: (other_vhost, exchange, queue),
    }
}

/// Holds `n` at `/`'s `d` due at `kept_due(i)`, and `m` at `other`'s due at `other_due(i)`,
/// all committed, then starts again at `now_ms` as a restore that could not bring back `/`'s
/// `d` would.
fn restart_keeping(
    temp: &TempStore,
    x: &Exchanges,
    (n, kept_due): (u64, impl Fn(u64) -> u64),
    (m, other_due): (u64, impl Fn(u64) -> u64),
    now_ms: u64,
    memory: &Arc<MemoryMonitor>,
) -> Arc<DelayedMessages> {
    {
        let before = on_disk(temp, MemoryMonitor::new(u64::MAX));
        for i in 0..n {
            before.hold(&x.kept.0, &x.kept.1, message(i), kept_due(i));
        }
        for i in 0..m {
            before.hold(&x.other.0, &x.other.1, message(i), other_due(i));
        }
        temp.store.write(Vec::new()).expect("commit");
    }
    let delayed = DelayedMessages::new(now_ms, Arc::clone(memory));
    delayed.set_store(Arc::clone(&temp.store));
    let snapshot = temp.store.snapshot().expect("snapshot");
    delayed.reserve_below(snapshot.next_delayed_seq().expect("seq"));
    delayed.keep_unrestored("/", "d");
    delayed.restore_counts(&x.other.0, &x.other.1, m, 8 * m);
    delayed.attach_disk(Arc::clone(&temp.store), now_ms);
    delayed
}

/// As the timer thread would, every deadline up to `until_ms` at its time, releases
/// committed as they go; returns how many were released and the most ids the disk tier
/// kept in RAM meanwhile.
fn serve_until(
    delayed: &DelayedMessages,
    store: &dwellmq_store::Store,
    until_ms: u64,
) -> (usize, usize) {
    let (mut released, mut most_resident, mut rounds) = (0, 0, 0u64);
    while let Some(now) = delayed.next_wake().filter(|&at| at <= until_ms) {
        released += delayed.release_due(now);
        delayed.move_in(now, None);
        rounds += 1;
        if rounds % 256 == 0 {
            store.write(Vec::new()).expect("commit");
        }
        let (resident, _) = delayed.disk_resident().expect("a disk tier");
        most_resident = most_resident.max(resident);
    }
    // The clock reaches `until_ms` whether or not anything was due.
    released += delayed.release_due(until_ms);
    delayed.move_in(until_ms, None);
    store.write(Vec::new()).expect("commit");
    (released, most_resident)
}

#[test]
fn a_kept_exchanges_due_messages_stay_on_disk_and_are_caught_up_with_once_taken_back() {
    let temp = TempStore::new("disk-tier-kept-due");
    let x = exchanges();
    let memory = MemoryMonitor::new(u64::MAX);
    const N: u64 = 12_000;
    // The kept one's due over the first hour of tomorrow, the other's among them.
    let delayed = restart_keeping(
        &temp,
        &x,
        (N, |i| DAY_MS + i * 180),
        (100, |i| DAY_MS + i * 36_000 + 7),
        0,
        &memory,
    );

    // Two days pass: the other exchange's messages are released on time; every one of the
    // kept exchange's falls due and stays on disk, none of it in RAM.
    let (released, most_resident) = serve_until(&delayed, &temp.store, 2 * DAY_MS);
    assert_eq!(released, 100);
    assert_eq!(x.other.2.message_count(&*x.other.0), 100);
    assert_eq!(x.kept.2.message_count(&*x.kept.0), 0);
    let (resident, on_disk) = delayed.disk_resident().expect("a disk tier");
    assert!(
        most_resident <= 100 && resident == 0,
        "ids in RAM: at most {most_resident}, now {resident}"
    );
    assert_eq!(on_disk, N);
    assert_eq!(memory.used(), 0, "nothing charged");

    // Taken back: a second's worth in the first second, oldest first, the counts following.
    delayed.reattach_kept(&x.kept.0, &x.kept.1, (N, 8 * N), 2 * DAY_MS);
    assert_eq!(delayed.stats("/", "d"), (N as usize, 8 * N));
    let (released, _) = serve_until(&delayed, &temp.store, 2 * DAY_MS + 1_000);
    let second = (CATCH_UP_PER_SECOND * 1_001 / 1_000) as usize;
    assert_eq!(released, second);
    assert_eq!(delayed.stats("/", "d").0, N as usize - second);
    let (released, most_resident) = serve_until(&delayed, &temp.store, 2 * DAY_MS + 3_000);
    assert_eq!(released, N as usize - second);
    assert!(most_resident <= 4 * super::disk::WINDOW_BATCH + 64);
    assert_holds_in_order(&x.kept.2, N);
    assert_eq!(delayed.stats("/", "d"), (0, 0));
    assert_eq!(delayed.len(), 0);
    assert_eq!(delayed.disk_resident(), Some((0, 0)));
}

#[test]
fn a_take_back_during_a_restarts_catch_up_shares_its_pace_and_later_ones_come_on_time() {
    let temp = TempStore::new("disk-tier-kept-catch-up");
    let x = exchanges();
    let memory = MemoryMonitor::new(u64::MAX);
    // Both fell due while the broker was down (interleaved); the kept one also holds ten due
    // in an hour.
    let kept_due = |i: u64| {
        if i < 5_000 {
            DAY_MS + 2 * i
        } else {
            3 * DAY_MS + 3_600_000 + i
        }
    };
    let delayed = restart_keeping(
        &temp,
        &x,
        (5_010, kept_due),
        (10_000, |i| DAY_MS + 2 * i + 1),
        3 * DAY_MS,
        &memory,
    );
    let start = 3 * DAY_MS;
    // Half a second of the restart's catch-up: only the other exchange's.
    let (released, _) = serve_until(&delayed, &temp.store, start + 500);
    assert_eq!(released, 5_010);
    assert_holds_in_order(&x.other.2, 5_010);

    // Taken back: the other's left were moved into the wheel within the horizon, with their
    // places in the catch-up; the kept one's come after them, at the one catch-up pace.
    delayed.reattach_kept(&x.kept.0, &x.kept.1, (5_010, 8 * 5_010), start + 500);
    let (released, _) = serve_until(&delayed, &temp.store, start + 1_000);
    assert_eq!(released, 10_010 - 5_010, "the same pace as before");
    assert_holds_in_order(&x.other.2, 10_000);
    assert_holds_in_order(&x.kept.2, 10);
    let (released, _) = serve_until(&delayed, &temp.store, start + 2_000);
    assert_eq!(released, 4_990);
    assert_holds_in_order(&x.kept.2, 5_000);
    // The later ten on time, not caught up with early.
    assert_eq!(delayed.stats("/", "d").0, 10);
    let (released, _) = serve_until(&delayed, &temp.store, start + 3_600_000 + 4_999);
    assert_eq!(released, 0);
    let (released, _) = serve_until(&delayed, &temp.store, start + 3_600_000 + 5_009);
    assert_eq!(released, 10);
    assert_eq!(delayed.lateness.snapshot().count, 15_010);
    assert_eq!(delayed.len(), 0);
    assert_eq!(delayed.disk_resident(), Some((0, 0)));
}

#[test]
fn a_kept_exchanges_message_cannot_be_cancelled_by_its_id_alone() {
    let temp = TempStore::new("disk-tier-kept-cancel");
    let x = exchanges();
    let memory = MemoryMonitor::new(u64::MAX);
    let delayed = restart_keeping(&temp, &x, (3, |i| DAY_MS + i), (0, |i| i), 0, &memory);
    let snapshot = temp.store.snapshot().expect("snapshot");
    let ids = snapshot.delayed_ids(None, 10).expect("ids");
    assert_eq!(ids.len(), 3);
    let id = super::DelayedId {
        due_ms: ids[0].due_ms,
        seq: ids[0].seq,
    };
    // The test double cancels by id: a kept exchange's message is not its to cancel.
    assert!(!delayed.cancel(id));
    temp.store.write(Vec::new()).expect("commit");
    let snapshot = temp.store.snapshot().expect("snapshot");
    assert_eq!(snapshot.delayed_count().expect("count"), 3, "still kept");
}

#[test]
fn a_page_read_while_an_exchange_is_taken_back_is_read_again_with_its_messages() {
    let temp = TempStore::new("disk-tier-kept-refill");
    let x = exchanges();
    let memory = MemoryMonitor::new(u64::MAX);
    let delayed = restart_keeping(&temp, &x, (10, |i| DAY_MS + i), (0, |i| i), 0, &memory);
    // Nothing fell due while down, and the main window finds nothing it may read.
    assert_eq!(delayed.next_wake(), None);
    // One for the other exchange, due among the kept ones: the main window must read again.
    delayed.hold(&x.other.0, &x.other.1, message(0), DAY_MS + 5);
    temp.store.write(Vec::new()).expect("commit");
    let read = delayed.disk.lock().as_mut().and_then(|d| d.begin_refill());
    let read = read.expect("the main window reads ahead");
    // The exchange is taken back while the page, which leaves its messages out, is read.
    delayed.reattach_kept(&x.kept.0, &x.kept.1, (10, 80), 0);
    let page = read.read();
    assert_eq!(page.as_ref().map(Vec::len).ok(), Some(1));
    delayed
        .disk
        .lock()
        .as_mut()
        .expect("a disk tier")
        .end_refill(page);

    // Had the page been merged, the window would have read past the kept ones due before it.
    let (released, _) = serve_until(&delayed, &temp.store, DAY_MS + 100);
    assert_eq!(released, 11);
    assert_holds_in_order(&x.kept.2, 10);
    assert_eq!(x.other.2.message_count(&*x.other.0), 1);
    let lateness = delayed.lateness.snapshot();
    assert_eq!((lateness.count, lateness.sum_ms), (11, 0), "each on time");
}
