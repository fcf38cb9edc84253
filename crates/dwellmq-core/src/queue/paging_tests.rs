//! A durable queue longer than its window: what it leaves in the store, asks back, and how
//! it counts meanwhile.

use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::BasicProperties;

use super::*;
use crate::paging::{Page, StoredEntry};
use crate::queue::paging::test_progress::Committed;
use crate::PackedMessage;

type Q = QueueState<u32>;

pub(super) const WINDOW: Paging = Paging {
    window_messages: 4,
    window_bytes: 1 << 20,
};

pub(super) fn paging_queue() -> Q {
    let mut q = Q::new(
        QueueSettings {
            durable: true,
            ..Default::default()
        },
        false,
        0,
    );
    q.enable_paging(WINDOW);
    q
}

fn persistent(body: String) -> Arc<Message> {
    Message::new(
        "".into(),
        "q".into(),
        BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        },
        Bytes::from(body).into(),
        None,
    )
}

fn transient(body: &'static str) -> Arc<Message> {
    Message::new(
        "".into(),
        "q".into(),
        BasicProperties::default(),
        Bytes::from_static(body.as_bytes()).into(),
        None,
    )
}

/// What a store would hold for message `seq` (its body "m{seq}").
fn stored(seq: u64) -> StoredEntry {
    StoredEntry {
        seq,
        message: PackedMessage::pack(&persistent(format!("m{seq}"))),
        expires_at: None,
        redelivered: false,
        spilled: false,
    }
}

/// The page a store holding every message of the run would give for `request`.
fn read(request: PageRequest) -> Page {
    let last = request.end_seq.min(request.from_seq + request.limit as u64);
    Page {
        entries: (request.from_seq..last).map(stored).collect(),
        next_seq: last,
        skipped: 0,
        exhausted: last == request.end_seq,
    }
}

fn channel() -> Arc<ChannelCredit> {
    Arc::new(ChannelCredit::new(Arc::new(Congestion::default())))
}

fn consumer(prefetch: u32) -> ConsumerSlot<u32> {
    ConsumerSlot {
        id: 1,
        handle: 1,
        priority: 0,
        exclusive: false,
        credit: Arc::new(ConsumerCredit::new(channel(), prefetch, true)),
    }
}

fn delivered(fx: &mut Effects<u32>) -> Vec<String> {
    fx.drain()
        .filter_map(|e| match e {
            Effect::Deliver { entry, .. } => {
                Some(String::from_utf8_lossy(&entry.message.body.chunks()[0]).into_owned())
            }
            _ => None,
        })
        .collect()
}

fn fill(q: &mut Q, n: u64, fx: &mut Effects<u32>) {
    for seq in 0..n {
        q.publish(persistent(format!("m{seq}")), 0, fx);
    }
    q.settle(0, &mut Effects::new());
    fx.drain();
}

#[test]
fn only_committed_messages_beyond_the_window_leave_memory_and_still_count() {
    let mut q = paging_queue();
    let mut fx = Effects::new();
    fill(&mut q, 10, &mut fx);
    // Nothing committed yet: all stays in memory.
    assert_eq!(q.page(&Committed(|_| false), 0), None);
    assert_eq!(q.paged_out(), (0, 0));
    // Committed up to 7: 4..8 leave memory, 8 and 9 wait behind them.
    assert_eq!(
        q.page(&Committed(|seq| seq < 8), 0),
        None,
        "nobody waits for a page"
    );
    assert_eq!(q.paged_out(), (4, 8));
    assert_eq!((q.ready(), q.ready_entries().count()), (10, 6));
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out(), (6, 12));
    assert_eq!(q.ready_bytes(), 20);
}

#[test]
fn a_consumer_gets_everything_in_order_through_pages() {
    let mut q = paging_queue();
    let mut fx = Effects::new();
    fill(&mut q, 20, &mut fx);
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out().0, 16);
    q.consume(consumer(3), 0, &mut fx).unwrap();
    let mut got = delivered(&mut fx);
    let credit = Arc::clone(&q.consumers[0].slot.credit);
    while got.len() < 20 {
        credit.settled(3);
        q.drain(0, &mut fx);
        got.extend(delivered(&mut fx));
        if let Some(request) = q.page(&Committed(|_| true), 0) {
            q.page_in(request, Some(read(request)), 0, &mut fx);
            got.extend(delivered(&mut fx));
        }
    }
    let expected: Vec<String> = (0..20).map(|seq| format!("m{seq}")).collect();
    assert_eq!(got, expected);
    assert_eq!((q.ready(), q.paged_out()), (0, (0, 0)));
}

#[test]
fn a_transient_message_stays_in_memory_and_keeps_what_follows_there() {
    let mut q = paging_queue();
    let mut fx = Effects::new();
    fill(&mut q, 6, &mut fx);
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out(), (2, 4));
    q.publish(transient("t"), 0, &mut fx);
    q.publish(persistent("m7".into()), 0, &mut fx);
    q.settle(0, &mut Effects::new());
    q.page(&Committed(|_| true), 0);
    assert_eq!(
        q.paged_out(),
        (2, 4),
        "nothing passes the transient message"
    );
    assert_eq!(q.ready(), 8);
}

#[test]
fn a_purge_forgets_the_run_and_drops_a_page_read_for_it() {
    let mut q = paging_queue();
    let mut fx = Effects::new();
    fill(&mut q, 10, &mut fx);
    q.page(&Committed(|_| true), 0);
    q.consume(consumer(0), 0, &mut fx).unwrap();
    fx.drain();
    // The consumer took the 4 in memory: a page is asked for.
    let request = q.page(&Committed(|_| true), 0).expect("a page");
    assert_eq!(q.purge(&mut fx), 6);
    assert!(fx.drain().any(|e| matches!(
        e,
        Effect::ForgetRun {
            from_seq: 4,
            end_seq: 10
        }
    )));
    q.page_in(request, Some(read(request)), 0, &mut fx);
    assert_eq!((q.ready(), q.ready_entries().count()), (0, 0));
    assert!(delivered(&mut fx).is_empty());
}

#[test]
fn a_get_that_finds_nothing_in_memory_asks_for_a_page_at_once() {
    let mut q = paging_queue();
    let mut fx = Effects::new();
    q.restore_paged(
        PagedRun {
            first_seq: 3,
            end_seq: 9,
            count: 6,
            bytes: 12,
        },
        0,
        &mut fx,
    );
    assert_eq!(q.ready(), 6);
    assert!(q.get(true, 0, &mut fx).is_none());
    let request = q.page_for(1).expect("a page");
    assert_eq!(
        (request.from_seq, request.end_seq, request.limit),
        (3, 9, 2)
    );
    q.page_in(request, Some(read(request)), 0, &mut fx);
    let (entry, left) = q.get(true, 0, &mut fx).expect("paged in");
    assert_eq!((entry.seq, left), (3, 5));
    assert_eq!(q.ready_entries().count(), 1, "a page of 2 read, one taken");
    // A message published after a restore takes a position after the run.
    q.publish(persistent("new".into()), 0, &mut fx);
    assert!(fx
        .drain()
        .any(|e| matches!(e, Effect::Persist { seq: 9, .. })));
}

#[test]
fn a_page_that_reached_the_end_its_request_knew_leaves_what_joined_the_run_since() {
    // The shell simulation's seed 7000142: a get asked for the run [3, 4); before the page
    // came back, the commits of four publishes let them join the run ([3, 8)). The page
    // reached its request's end, which is not the run's end any more.
    let mut q = paging_queue();
    let mut fx = Effects::new();
    q.restore_paged(
        PagedRun {
            first_seq: 3,
            end_seq: 4,
            count: 1,
            bytes: 2,
        },
        0,
        &mut fx,
    );
    for seq in 4..8 {
        q.publish(persistent(format!("m{seq}")), 0, &mut fx);
    }
    q.settle(0, &mut Effects::new());
    fx.drain();
    assert!(q.get(true, 0, &mut fx).is_none());
    let request = q.page_for(1).expect("a page");
    assert_eq!((request.from_seq, request.end_seq), (3, 4));
    // The publishes commit: they join the run behind the page being read.
    assert_eq!(
        q.page(&Committed(|seq| seq < 8), 0),
        None,
        "a page is being read"
    );
    assert_eq!(q.paged_out(), (5, 10));
    q.page_in(request, Some(read(request)), 0, &mut fx);
    assert_eq!(q.ready(), 5, "nothing counted is dropped");
    assert_eq!(q.paged_out(), (4, 8), "4..8 are still in the store");
    let mut got = Vec::new();
    while let Some((entry, _)) = q.get(true, 0, &mut fx) {
        got.push(entry.seq);
        if let Some(request) = q.page_for(1) {
            q.page_in(request, Some(read(request)), 0, &mut fx);
        }
    }
    assert_eq!(got, vec![3, 4, 5, 6, 7]);
}

/// The positions whose store records `effects` forget (what left the queue for good).
fn forgotten(fx: &mut Effects<u32>) -> Vec<u64> {
    fx.drain()
        .filter_map(|e| match e {
            Effect::Forget { seq } => Some(seq),
            _ => None,
        })
        .collect()
}

#[test]
fn a_drop_head_limit_reads_pages_to_drop_from_the_head_of_the_run() {
    let mut q = paging_queue();
    let mut fx = Effects::new();
    fill(&mut q, 10, &mut fx);
    q.page(&Committed(|_| true), 0);
    q.set_settings(
        QueueSettings {
            durable: true,
            max_length: Some(3),
            ..Default::default()
        },
        0,
        &mut fx,
    );
    // The 4 in memory, the oldest, are dropped at once; then the run is asked for (though
    // nobody consumes) until the queue is within its limit.
    assert_eq!(forgotten(&mut fx), vec![0, 1, 2, 3]);
    assert_eq!(q.ready(), 6);
    let mut dropped = Vec::new();
    while let Some(request) = q.page(&Committed(|_| true), 0) {
        q.page_in(request, Some(read(request)), 0, &mut fx);
        dropped.extend(forgotten(&mut fx));
    }
    assert_eq!(dropped, vec![4, 5, 6], "dropped from the head of the run");
    assert_eq!(q.ready(), 3);
    assert_eq!(q.paged_out(), (2, 4));
    // The newest three are left, in order, the last two still read from the store.
    let mut left = Vec::new();
    while let Some((entry, _)) = q.get(true, 0, &mut fx) {
        left.push(entry.seq);
        if let Some(request) = q.page_for(1) {
            q.page_in(request, Some(read(request)), 0, &mut fx);
        }
    }
    assert_eq!(left, vec![7, 8, 9]);
}
