//! A message's deadline follows it into the store: the run's messages expire on time (or at
//! the head) with nobody reading the queue, a spilled message read back and paged out again
//! is written again, and a failed persist is persisted again instead of pinning memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::{BasicProperties, ShortStr};

use super::paging_tests::WINDOW;
use super::*;
use crate::paging::{assemble_page, PageKind, StoredEntry};
use crate::queue::paging::test_progress::{Committed, Lost};
use crate::PackedMessage;

type Q = QueueState<u32>;

fn message(id: u64, persistent: bool) -> Arc<Message> {
    expiring(id, persistent, None)
}

fn expiring(id: u64, persistent: bool, expiration: Option<&str>) -> Arc<Message> {
    Message::new(
        "".into(),
        "q".into(),
        BasicProperties {
            delivery_mode: Some(if persistent { 2 } else { 1 }),
            message_id: Some(ShortStr::from(id.to_string())),
            expiration: expiration.map(ShortStr::from),
            ..Default::default()
        },
        Bytes::from(format!("m{id}")).into(),
        None,
    )
}

/// A store that commits what it is given at once.
#[derive(Default)]
struct Store {
    records: BTreeMap<u64, StoredEntry>,
}

impl Store {
    /// Carries out a command's store effects; returns the dead-lettered ids.
    fn apply(&mut self, fx: &mut Effects<u32>) -> Vec<u64> {
        let mut dead = Vec::new();
        for effect in fx.drain() {
            match effect {
                Effect::Persist {
                    seq,
                    message,
                    expires_at,
                    ..
                }
                | Effect::Rewrite {
                    seq,
                    message,
                    expires_at,
                } => self.put(seq, &message, expires_at, false),
                Effect::Spill {
                    seq,
                    message,
                    expires_at,
                } => {
                    let message = match message {
                        crate::SpilledMessage::Packed(p) => p.unpack_own(),
                        crate::SpilledMessage::Shared(m) => m,
                    };
                    self.put(seq, &message, expires_at, true);
                }
                Effect::Forget { seq } => {
                    self.records.remove(&seq);
                }
                Effect::Unspill { from_seq, end_seq } => self
                    .records
                    .retain(|&seq, r| !(r.spilled && (from_seq..end_seq).contains(&seq))),
                Effect::DeadLetter { message, .. } => dead.push(
                    message
                        .properties
                        .message_id
                        .as_ref()
                        .map_or(u64::MAX, |id| id.parse().expect("test ids are numbers")),
                ),
                _ => {}
            }
        }
        dead
    }

    fn put(&mut self, seq: u64, message: &Message, expires_at: Option<u64>, spilled: bool) {
        let entry = StoredEntry {
            seq,
            message: PackedMessage::pack(message),
            expires_at,
            redelivered: false,
            spilled,
        };
        self.records.insert(seq, entry);
    }

    fn read(&self, request: PageRequest) -> Page {
        let stored = self
            .records
            .range(request.from_seq..)
            .take(request.limit)
            .map(|(_, e)| e.clone())
            .collect();
        assemble_page(stored, request, WINDOW.page_bytes())
    }
}

/// The shell's steps after a command, with every write committed and every read done at
/// once; returns the dead-lettered ids.
fn steps(q: &mut Q, store: &mut Store, now: u64, pressed: bool) -> Vec<u64> {
    let mut fx = Effects::new();
    let mut dead = Vec::new();
    loop {
        q.settle(now, &mut fx);
        q.write_missing(pressed, &Lost(|_| false), usize::MAX, &mut fx);
        dead.extend(store.apply(&mut fx));
        let Some(request) = q.page(&Committed(|_| true), now) else {
            return dead;
        };
        q.page_in(request, Some(store.read(request)), now, &mut fx);
        dead.extend(store.apply(&mut fx));
    }
}

fn retry_queue(mode: ExpiryMode) -> Q {
    let mut q = Q::new(
        QueueSettings {
            durable: true,
            message_ttl: Some(2000),
            expiry_mode: mode,
            dead_letter: Some(DeadLetterTarget {
                exchange: "dlx".into(),
                routing_key: None,
            }),
            ..Default::default()
        },
        false,
        0,
    );
    q.enable_paging(WINDOW);
    q
}

/// The "retry in 2 s" queue: nobody consumes, 50 messages with a TTL, a window of 4. Every
/// one is dead-lettered at its deadline, whether it waits in memory or only in the store.
fn a_retry_queue_dead_letters_everything_in_time(mode: ExpiryMode) {
    let mut q = retry_queue(mode);
    let mut store = Store::default();
    let mut fx = Effects::new();
    for id in 0..50 {
        q.publish(message(id, true), id, &mut fx);
        store.apply(&mut fx);
        steps(&mut q, &mut store, id, false);
    }
    assert!(q.paged_out().0 >= 40, "most wait in the store only");
    let mut dead = Vec::new();
    for now in [1999, 2000, 2024, 2049] {
        q.tick(now, &mut fx);
        dead.extend(store.apply(&mut fx));
        dead.extend(steps(&mut q, &mut store, now, false));
        // Each message published at `id` expires at 2000 + id: by `now`, all of those.
        let due = (now + 1).saturating_sub(2000).min(50);
        assert_eq!(dead, (0..due).collect::<Vec<_>>(), "dead by {now}");
    }
    assert_eq!((q.ready(), q.paged_out().0), (0, 0));
    assert!(store.records.is_empty(), "their records left the store");
}

#[test]
fn a_retry_queue_dead_letters_what_waits_on_disk_on_time() {
    a_retry_queue_dead_letters_everything_in_time(ExpiryMode::OnTime);
}

#[test]
fn a_retry_queue_dead_letters_what_waits_on_disk_at_the_head() {
    a_retry_queue_dead_letters_everything_in_time(ExpiryMode::HeadOnly);
}

#[test]
fn a_short_ttl_behind_a_long_one_expires_on_time_from_the_store() {
    let mut q = retry_queue(ExpiryMode::OnTime);
    let mut store = Store::default();
    let mut fx = Effects::new();
    // The queue TTL is 2000; message 10 has its own 100.
    for id in 0..20 {
        let ttl = (id == 10).then_some("100");
        q.publish(expiring(id, true, ttl), 0, &mut fx);
        store.apply(&mut fx);
        steps(&mut q, &mut store, 0, false);
    }
    assert!(store.records.contains_key(&10) && q.paged_out().0 > 10);
    q.tick(100, &mut fx);
    store.apply(&mut fx);
    assert_eq!(steps(&mut q, &mut store, 100, false), vec![10]);
    assert_eq!(q.ready(), 19);
}

#[test]
fn a_restored_run_is_read_for_its_deadlines_from_its_first_tick() {
    let mut q = retry_queue(ExpiryMode::OnTime);
    let mut store = Store::default();
    for id in 0..30 {
        // Stored before a restart: expiring at 500 + id.
        store.put(id, &message(id, true), Some(500 + id), false);
    }
    let mut fx = Effects::new();
    let run = PagedRun {
        first_seq: 0,
        end_seq: 30,
        count: 30,
        bytes: store
            .records
            .values()
            .map(|e| e.message.body_len() as u64)
            .sum(),
    };
    q.restore_paged(run, 510, &mut fx);
    // Nothing is read before the restore's tick (dead-letter routes may not be back yet).
    assert_eq!(q.page(&Committed(|_| true), 510), None);
    q.tick(510, &mut fx);
    let dead = steps(&mut q, &mut store, 510, false);
    assert_eq!(dead, (0..=10).collect::<Vec<_>>());
    assert_eq!(q.ready(), 19);
}

#[test]
fn a_spilled_message_read_back_is_spilled_again_before_it_leaves_memory() {
    let mut q = Q::new(QueueSettings::default(), false, 0);
    q.enable_spill_paging(WINDOW);
    let mut store = Store::default();
    let mut fx = Effects::new();
    for id in 0..12 {
        q.publish(message(id, false), 0, &mut fx);
    }
    store.apply(&mut fx);
    steps(&mut q, &mut store, 0, true);
    assert_eq!(q.paged_out().0, 8);
    // The head is taken, then the whole run is read back (its spilled records go) ...
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(q.get(true, 0, &mut fx).expect("in memory").0.seq);
    }
    let request = q.page_for(8).expect("a run");
    q.page_in(request, Some(store.read(request)), 0, &mut fx);
    store.apply(&mut fx);
    assert_eq!((q.paged_out().0, q.ready()), (0, 8));
    // ... and what lies beyond the window again must be written again before it leaves.
    steps(&mut q, &mut store, 0, true);
    assert_eq!(q.paged_out().0, 4);
    assert_eq!(store.records.len(), 4);
    // Everything comes back, once each, in order.
    loop {
        match q.get(true, 0, &mut fx) {
            Some((entry, _)) => got.push(entry.seq),
            None => match q.page_for(1) {
                Some(request) => q.page_in(request, Some(store.read(request)), 0, &mut fx),
                None => break,
            },
        }
        store.apply(&mut fx);
        steps(&mut q, &mut store, 0, true);
    }
    assert_eq!(got, (0..12).collect::<Vec<_>>());
}

#[test]
fn a_failed_persist_is_persisted_again_and_then_leaves_memory() {
    let mut q = retry_queue(ExpiryMode::OnTime);
    let mut fx = Effects::new();
    for id in 0..12 {
        q.publish(message(id, true), 0, &mut fx);
    }
    q.settle(0, &mut fx);
    fx.drain();
    // The persist of 5 failed: it and everything behind it stay in memory.
    let lost = Lost(|seq| seq == 5);
    q.page(&lost, 0);
    assert_eq!(q.paged_out().0, 1, "only 4 joined a run");
    q.write_missing(false, &lost, usize::MAX, &mut fx);
    let rewrites: Vec<u64> = fx
        .drain()
        .filter_map(|e| match e {
            Effect::Rewrite { seq, .. } => Some(seq),
            _ => None,
        })
        .collect();
    assert_eq!(rewrites, vec![5], "persisted again, even without pressure");
    // Once the rewrite commits, the rest joins the run.
    q.page(&Committed(|_| true), 0);
    assert_eq!(q.paged_out().0, 8);
    assert_eq!(
        q.page(&Committed(|_| true), 0).map(|r| r.kind),
        None::<PageKind>
    );
}
