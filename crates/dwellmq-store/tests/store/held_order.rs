//! Held ids read back in due order whatever the buckets their holds fell into: wide buckets
//! (held long before due) overlapping narrow ones (held shortly before), read a page at a time.

use crate::common::{packed, Scratch};
use crate::sim::Rng;
use dwellmq_store::{DeadlineId, Op, Store};

fn hold(exchange: &str, held_at_ms: u64, id: DeadlineId) -> Op {
    Op::Hold {
        held_at_ms,
        id,
        vhost: "/".into(),
        exchange: exchange.into(),
        message: packed("later", b"m"),
    }
}

/// Every id after `after`, in pages of `page`, through `delayed_ids`.
fn paged(store: &Store, page: usize) -> Vec<DeadlineId> {
    let snap = store.snapshot().unwrap();
    let mut out: Vec<DeadlineId> = Vec::new();
    loop {
        let next = snap.delayed_ids(out.last().copied(), page).unwrap();
        if next.is_empty() {
            return out;
        }
        assert!(next.len() <= page);
        out.extend(next);
    }
}

/// Every id of one exchange from `from` on, in pages of `page`, through `delayed_ids_of`.
fn paged_of(store: &Store, exchange: &str, page: usize) -> Vec<DeadlineId> {
    let snap = store.snapshot().unwrap();
    let mut out: Vec<DeadlineId> = Vec::new();
    let mut from = DeadlineId { due_ms: 0, seq: 0 };
    loop {
        let next = snap.delayed_ids_of("/", exchange, from, page).unwrap();
        let next: Vec<_> = next
            .into_iter()
            .filter(|id| Some(id) != out.last())
            .collect();
        if next.is_empty() {
            return out;
        }
        from = *next.last().unwrap();
        out.extend(next);
    }
}

/// Fails at the first difference, not with two thousand ids.
fn assert_same(got: &[DeadlineId], want: &[DeadlineId], what: &str) {
    let first = got.iter().zip(want).position(|(g, w)| g != w);
    assert!(
        first.is_none() && got.len() == want.len(),
        "{what}: first difference at {first:?} ({:?} against {:?}); {} ids read, {} held",
        first.map(|i| got[i]),
        first.map(|i| want[i]),
        got.len(),
        want.len()
    );
}

#[test]
fn ids_come_back_in_due_order_across_overlapping_buckets_page_by_page() {
    let dir = Scratch::new("held-order");
    let store = Store::open(dir.path()).expect("open");
    let mut rng = Rng::new(7);
    let mut model: Vec<(String, DeadlineId)> = Vec::new();
    let mut ops = Vec::new();
    for seq in 0..2_000u64 {
        let due_ms = 1_000_000 + rng.below(100_000_000);
        // From the same millisecond up to 2^30 ms (past the widest bucket) before it is due.
        let octave = rng.below(31);
        let held_at_ms = due_ms.saturating_sub(rng.below(1 << octave));
        let exchange = if seq % 3 == 0 { "a" } else { "b" };
        let id = DeadlineId { due_ms, seq };
        ops.push(hold(exchange, held_at_ms, id));
        model.push((exchange.to_string(), id));
        if ops.len() == 100 {
            store.write(std::mem::take(&mut ops)).expect("commit");
        }
    }
    // Some released, from anywhere in the order.
    let mut released = Vec::new();
    for (i, (_, id)) in model.iter().enumerate() {
        if i % 5 == 2 {
            released.push(Op::Release { id: *id });
        }
    }
    store.write(released).expect("commit");
    model = model
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 5 != 2)
        .map(|(_, held)| held)
        .collect();

    let mut all: Vec<DeadlineId> = model.iter().map(|(_, id)| *id).collect();
    all.sort_unstable();
    for page in [1, 7, 64, 5_000] {
        assert_same(
            &paged(&store, page),
            &all,
            &format!("delayed_ids in pages of {page}"),
        );
    }
    for exchange in ["a", "b"] {
        let mut of: Vec<DeadlineId> = model
            .iter()
            .filter(|(e, _)| e == exchange)
            .map(|(_, id)| *id)
            .collect();
        of.sort_unstable();
        for page in [2, 33] {
            assert_same(
                &paged_of(&store, exchange, page),
                &of,
                &format!("{exchange} in pages of {page}"),
            );
        }
    }
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.delayed_count().unwrap(), all.len() as u64);
    for id in all.iter().step_by(97) {
        assert!(snap.delayed_message(*id).unwrap().is_some());
        let other = DeadlineId {
            due_ms: id.due_ms + 1,
            seq: id.seq,
        };
        assert!(snap.delayed_message(other).unwrap().is_none());
    }
}

/// A commit writes one index record per bucket; a release takes its entry out of the record
/// that names it: released in the same commit as its hold, in a later one, a whole record at
/// once, and from records of two commits whose seqs interleave in one bucket.
#[test]
fn releases_leave_the_index_records_that_named_them() {
    let dir = Scratch::new("held-records");
    let store = Store::open(dir.path()).expect("open");
    let held_at_ms = 1_000_000;
    // All due within one narrow bucket: held 10 s before, so the bucket is 2^9 ms wide.
    let id = |seq: u64| DeadlineId {
        due_ms: 1_010_000 + seq % 7,
        seq,
    };
    let mut held: std::collections::BTreeSet<u64> = Default::default();
    // Commit 1: even seqs, with 0 and 2 released in the same commit.
    let mut ops: Vec<Op> = (0..40)
        .step_by(2)
        .map(|s| hold("a", held_at_ms, id(s)))
        .collect();
    ops.push(Op::Release { id: id(0) });
    ops.push(Op::Release { id: id(2) });
    store.write(ops).expect("commit 1");
    held.extend((4..40).step_by(2));
    // Commit 2: odd seqs, interleaved with commit 1's in the same bucket.
    store
        .write(
            (1..40)
                .step_by(2)
                .map(|s| hold("a", held_at_ms, id(s)))
                .collect(),
        )
        .expect("commit 2");
    held.extend((1..40).step_by(2));
    // Commit 3: releases from both records, the earlier one named by seqs above the later
    // record's first.
    let gone = [5, 6, 9, 14, 15, 38, 39];
    store
        .write(gone.iter().map(|&s| Op::Release { id: id(s) }).collect())
        .expect("commit 3");
    for s in gone {
        held.remove(&s);
    }
    // Commit 4: every hold left of commit 2 (a whole record emptied).
    let odd: Vec<u64> = held.iter().copied().filter(|s| s % 2 == 1).collect();
    store
        .write(odd.iter().map(|&s| Op::Release { id: id(s) }).collect())
        .expect("commit 4");
    for s in odd {
        held.remove(&s);
    }
    let mut want: Vec<DeadlineId> = held.iter().map(|&s| id(s)).collect();
    want.sort_unstable();
    assert_same(&paged(&store, 3), &want, "after the releases");
    drop(store);
    let store = Store::open(dir.path()).expect("reopen");
    assert_same(&paged(&store, 100), &want, "after a reopen");
    assert_eq!(
        store.snapshot().unwrap().delayed_count().unwrap(),
        want.len() as u64
    );
}
