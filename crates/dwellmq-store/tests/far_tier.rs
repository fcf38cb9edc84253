//! The far tier on the store: ids in order from disk and RAM, RAM bounded by the window.

mod common;

use std::sync::Arc;

use common::{packed, Scratch};
use dwellmq_store::{DeadlineId, DelayedWindow, Op, Store};

fn id(due_ms: u64, seq: u64) -> DeadlineId {
    DeadlineId { due_ms, seq }
}

fn hold(id: DeadlineId) -> Op {
    Op::Hold {
        id,
        vhost: "/".into(),
        exchange: "d".into(),
        message: packed("k", b"held"),
    }
}

fn drain(window: &mut DelayedWindow, up_to: u64) -> Vec<DeadlineId> {
    let mut out = Vec::new();
    while let Some(id) = window.pop_first_due(up_to).expect("pop") {
        out.push(id);
    }
    out
}

#[test]
fn stored_ids_come_out_in_order_a_batch_at_a_time() {
    let dir = Scratch::new("far-order");
    let store = Arc::new(Store::open(dir.path()).expect("open"));
    let ids: Vec<DeadlineId> = (0..100).map(|s| id(1_000 + (s * 7919) % 500, s)).collect();
    store.write(ids.iter().map(|&i| hold(i)).collect()).unwrap();
    let mut window = DelayedWindow::new(store.clone(), 8).expect("window");
    assert_eq!(window.len(), 100);
    assert!(window.resident() <= 8);
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(window.first().unwrap(), Some(expected[0]));
    // Nothing is due before the first due time.
    assert_eq!(window.pop_first_due(expected[0].due_ms - 1).unwrap(), None);
    let due = drain(&mut window, 1_250);
    let cut = expected.iter().filter(|i| i.due_ms <= 1_250).count();
    assert_eq!(due, expected[..cut]);
    assert_eq!(drain(&mut window, u64::MAX), expected[cut..]);
    assert!(window.is_empty());
}

#[test]
fn inserts_not_yet_committed_are_not_lost_by_a_refill() {
    let dir = Scratch::new("far-pending");
    let store = Arc::new(Store::open(dir.path()).expect("open"));
    store
        .write((0..20).map(|s| hold(id(100 + s, s))).collect())
        .unwrap();
    let mut window = DelayedWindow::new(store.clone(), 4).expect("window");
    // Beyond the window and never committed (its commit is still running, say).
    window.insert(id(110, 50)).unwrap();
    window.insert(id(5_000, 51)).unwrap();
    // Committed, beyond the window.
    store.write(vec![hold(id(111, 52))]).unwrap();
    window.insert(id(111, 52)).unwrap();
    let all = drain(&mut window, u64::MAX);
    let mut expected: Vec<DeadlineId> = (0..20).map(|s| id(100 + s, s)).collect();
    expected.extend([id(110, 50), id(111, 52), id(5_000, 51)]);
    expected.sort();
    assert_eq!(all, expected, "each id exactly once, in order");
}

#[test]
fn taken_ids_do_not_come_back_before_their_release_commits() {
    let dir = Scratch::new("far-taken");
    let store = Arc::new(Store::open(dir.path()).expect("open"));
    store
        .write((0..10).map(|s| hold(id(100 + s, s))).collect())
        .unwrap();
    let mut window = DelayedWindow::new(store.clone(), 2).expect("window");
    // Cancel one beyond the window (release not committed yet) and one inside it.
    assert!(window.remove(id(108, 8)).unwrap());
    assert!(window.remove(id(100, 0)).unwrap());
    assert!(!window.remove(id(100, 0)).unwrap(), "already taken");
    assert!(!window.remove(id(999, 99)).unwrap(), "never held");
    assert_eq!(window.len(), 8);
    let all = drain(&mut window, u64::MAX);
    let expected: Vec<DeadlineId> = (1..10)
        .filter(|&s| s != 8)
        .map(|s| id(100 + s, s))
        .collect();
    assert_eq!(all, expected);
}

#[test]
fn ram_stays_bounded_while_many_are_held() {
    let dir = Scratch::new("far-flat");
    let store = Arc::new(Store::open(dir.path()).expect("open"));
    let mut window = DelayedWindow::new(store.clone(), 64).expect("window");
    // 5,000 held in bursts of 100, each burst committed before the next: the far future.
    for burst in 0..50u64 {
        let ids: Vec<DeadlineId> = (0..100)
            .map(|i| {
                let seq = burst * 100 + i;
                id(1_000_000 + (seq * 7919) % 100_000, seq)
            })
            .collect();
        store.write(ids.iter().map(|&i| hold(i)).collect()).unwrap();
        for i in ids {
            window.insert(i).unwrap();
        }
    }
    assert_eq!(window.len(), 5_000);
    assert!(
        window.resident() <= 2 * 64 + 100,
        "{} ids in RAM",
        window.resident()
    );
    let all = drain(&mut window, u64::MAX);
    assert_eq!(all.len(), 5_000);
    assert!(all.windows(2).all(|w| w[0] < w[1]), "in order, no repeats");
}
