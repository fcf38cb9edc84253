//! Memory pressure: a queue spills what lies beyond its window and the store does not have
//! (transient messages), pages it out once the spill is committed, and drops the spilled
//! records once they are not needed.

use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::BasicProperties;

use super::paging_tests::{paging_queue as durable_queue, WINDOW};
use super::*;
use crate::paging::{Page, StoredEntry};
use crate::queue::paging::test_progress::{Committed, Lost};
use crate::PackedMessage;

type Q = QueueState<u32>;

fn message(seq: u64, persistent: bool) -> Arc<Message> {
    Message::new(
        "".into(),
        "q".into(),
        BasicProperties {
            delivery_mode: Some(if persistent { 2 } else { 1 }),
            ..Default::default()
        },
        Bytes::from(format!("m{seq}")).into(),
        None,
    )
}

fn transient_queue() -> Q {
    let mut q = Q::new(QueueSettings::default(), false, 0);
    q.enable_spill_paging(WINDOW);
    q
}

/// Publishes messages 0..n (persistent where `persistent` says) and settles them.
fn fill(q: &mut Q, n: u64, persistent: impl Fn(u64) -> bool) {
    let mut fx = Effects::new();
    for seq in 0..n {
        q.publish(message(seq, persistent(seq)), 0, &mut fx);
    }
    q.settle(0, &mut Effects::new());
}

/// Runs the spill step; returns the spilled positions and the unspilled ranges.
fn spill(q: &mut Q, pressed: bool) -> (Vec<u64>, Vec<(u64, u64)>) {
    let mut fx = Effects::new();
    q.write_missing(pressed, &Lost(|_| false), usize::MAX, &mut fx);
    let (mut spilled, mut unspilled) = (Vec::new(), Vec::new());
    for effect in fx.drain() {
        match effect {
            Effect::Spill { seq, .. } => spilled.push(seq),
            Effect::Unspill { from_seq, end_seq } => unspilled.push((from_seq, end_seq)),
            _ => {}
        }
    }
    (spilled, unspilled)
}

/// The page a store would give, `spilled` telling which positions were spilled.
fn read(request: PageRequest, spilled: impl Fn(u64) -> bool) -> Page {
    let last = request.end_seq.min(request.from_seq + request.limit as u64);
    let entries: Vec<StoredEntry> = (request.from_seq..last)
        .map(|seq| StoredEntry {
            seq,
            message: PackedMessage::pack(&message(seq, !spilled(seq))),
            expires_at: None,
            redelivered: false,
            spilled: spilled(seq),
        })
        .collect();
    Page {
        entries,
        next_seq: last,
        skipped: 0,
        exhausted: last == request.end_seq,
    }
}

/// Gets every message, reading pages as a `basic.get` would; returns their positions and
/// every unspilled range.
fn drain(q: &mut Q, spilled: impl Fn(u64) -> bool) -> (Vec<u64>, Vec<(u64, u64)>) {
    let mut fx = Effects::new();
    let (mut got, mut unspilled) = (Vec::new(), Vec::new());
    loop {
        if let Some(request) = q.page_for(1) {
            q.page_in(request, Some(read(request, &spilled)), 0, &mut fx);
        }
        let Some((entry, _)) = q.get(true, 0, &mut fx) else {
            break;
        };
        got.push(entry.seq);
        unspilled.extend(spill(q, false).1);
    }
    (got, unspilled)
}

#[test]
fn without_pressure_transient_messages_stay_in_memory() {
    let mut q = transient_queue();
    fill(&mut q, 10, |_| true);
    assert_eq!(spill(&mut q, false), (vec![], vec![]));
    // Persistent, but a transient queue does not store them: nothing is written.
    assert_eq!(q.page(&Committed(|_| true), 0), None);
    assert_eq!(q.paged_out(), (0, 0));
}

#[test]
fn under_pressure_what_lies_beyond_the_window_is_spilled_and_leaves_once_committed() {
    let mut q = transient_queue();
    fill(&mut q, 10, |_| false);
    assert_eq!(spill(&mut q, true).0, vec![4, 5, 6, 7, 8, 9]);
    // Spilled once: a second look spills nothing more.
    assert_eq!(spill(&mut q, true).0, Vec::<u64>::new());
    // Only what is committed leaves memory, in order.
    q.page(&Committed(|seq| seq < 7), 0);
    assert_eq!(q.paged_out(), (3, 6));
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out(), (6, 12));
    assert_eq!(q.ready(), 10);
    let (got, unspilled) = drain(&mut q, |_| true);
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    // Every spilled record is dropped once its message is read back.
    let mut dropped: Vec<u64> = unspilled.iter().flat_map(|&(a, b)| a..b).collect();
    dropped.sort_unstable();
    dropped.dedup();
    assert_eq!(dropped, (4..10).collect::<Vec<_>>());
}

#[test]
fn new_messages_behind_a_spilled_run_are_spilled_too() {
    let mut q = transient_queue();
    fill(&mut q, 6, |_| false);
    spill(&mut q, true);
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out(), (2, 4));
    let mut fx = Effects::new();
    for seq in 6..9 {
        q.publish(message(seq, false), 0, &mut fx);
    }
    q.settle(0, &mut Effects::new());
    assert_eq!(spill(&mut q, true).0, vec![6, 7, 8]);
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out(), (5, 10));
}

#[test]
fn a_durable_queue_spills_only_its_transient_messages() {
    let mut q = durable_queue();
    // Odd positions persistent (written at publish), even ones transient.
    fill(&mut q, 12, |seq| seq % 2 == 1);
    // Without pressure the first transient message beyond the window holds the rest up.
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out(), (0, 0));
    assert_eq!(spill(&mut q, true).0, vec![4, 6, 8, 10]);
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out(), (8, 18));
    let (got, unspilled) = drain(&mut q, |seq| seq % 2 == 0);
    assert_eq!(got, (0..12).collect::<Vec<_>>());
    assert!(!unspilled.is_empty());
}

#[test]
fn a_spilled_message_that_leaves_from_memory_drops_its_record() {
    let mut q = transient_queue();
    fill(&mut q, 6, |_| false);
    spill(&mut q, true);
    // Not committed: 4 and 5 stay in memory, spilled; taking them out drops their records.
    q.page(&Committed(|_| false), 0);
    let mut fx = Effects::new();
    for _ in 0..6 {
        q.get(true, 0, &mut fx);
    }
    assert_eq!(spill(&mut q, false).1, vec![(4, 6)]);
}

#[test]
fn a_purge_drops_every_spilled_record() {
    let mut q = transient_queue();
    fill(&mut q, 8, |_| false);
    spill(&mut q, true);
    q.page(&Committed(|_| true), 0);
    let mut fx = Effects::new();
    assert_eq!(q.purge(&mut fx), 8);
    assert_eq!(spill(&mut q, false).1, vec![(0, u64::MAX)]);
    assert_eq!(q.paged_out(), (0, 0));
}

#[test]
fn a_message_whose_spill_failed_is_spilled_again() {
    let mut q = transient_queue();
    fill(&mut q, 6, |_| false);
    assert_eq!(spill(&mut q, true).0, vec![4, 5]);
    // The write of 4 failed: it holds the rest up until it is spilled again.
    q.page(&Committed(|seq| seq != 4), 0);
    assert_eq!(q.paged_out(), (0, 0));
    let mut fx = Effects::new();
    q.write_missing(true, &Lost(|seq| seq == 4), usize::MAX, &mut fx);
    let again: Vec<u64> = fx
        .drain()
        .filter_map(|e| match e {
            Effect::Spill { seq, .. } => Some(seq),
            _ => None,
        })
        .collect();
    assert_eq!(again, vec![4]);
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out(), (2, 4));
}

#[test]
fn a_budget_bounds_the_spills_of_one_step_and_the_rest_follow() {
    let mut q = transient_queue();
    fill(&mut q, 12, |_| false);
    let mut fx = Effects::new();
    let spilled = |fx: &mut Effects<u32>| -> Vec<u64> {
        fx.drain()
            .filter_map(|e| match e {
                Effect::Spill { seq, .. } => Some(seq),
                _ => None,
            })
            .collect()
    };
    q.write_missing(true, &Lost(|_| false), 3, &mut fx);
    assert_eq!(spilled(&mut fx), vec![4, 5, 6]);
    q.write_missing(true, &Lost(|_| false), 3, &mut fx);
    assert_eq!(spilled(&mut fx), vec![7, 8, 9]);
    q.write_missing(true, &Lost(|_| false), 3, &mut fx);
    assert_eq!(spilled(&mut fx), vec![10, 11]);
}
