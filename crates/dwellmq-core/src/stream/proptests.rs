//! The stream against a plain reference log, over random sequences of appends (some
//! failing), consumers starting at every kind of offset, settles, retention and reads handed
//! back late and out of order. After every command, each consumer's deliveries are checked:
//! - in strictly increasing offsets, each a committed record of the reference with its body,
//!   none a failed append, and after its start as its offset spec says;
//! - nothing committed is skipped unless retention had dropped it by then;
//! - never more unsettled than its prefetch, never more fetched than its window;
//! - `message_count` is what the reference holds committed past the retention cut.
//!
//! At the end everything commits and every consumer settles what it has until nothing moves:
//! each one has then seen the log up to its last committed record (of those retention kept:
//! a record can commit, even, after retention dropped its segment).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::test_support::Harness;
use super::*;

#[derive(Debug, Clone, Copy)]
enum Spec {
    First,
    Last,
    Next,
    Offset(u64),
    /// A time this many ms before now.
    Timestamp(u64),
    Ago(u64),
}

#[derive(Debug, Clone)]
enum Op {
    Publish { len: usize, advance: u64 },
    Complete { n: usize, ok: bool },
    Consume { prefetch: u32, spec: Spec },
    Cancel { which: usize },
    Settle { which: usize, n: u32 },
    ServeRead { which: usize },
    Tick { advance: u64 },
}

fn spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        Just(Spec::First),
        Just(Spec::Last),
        Just(Spec::Next),
        (0u64..60).prop_map(Spec::Offset),
        (0u64..30_000).prop_map(Spec::Timestamp),
        (1u64..30_000).prop_map(Spec::Ago),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..60, 0u64..2_000).prop_map(|(len, advance)| Op::Publish { len, advance }),
        3 => (1usize..6, prop::bool::weighted(0.9)).prop_map(|(n, ok)| Op::Complete { n, ok }),
        1 => (1u32..6, spec()).prop_map(|(prefetch, spec)| Op::Consume { prefetch, spec }),
        1 => (0usize..8).prop_map(|which| Op::Cancel { which }),
        3 => (0usize..8, 1u32..4).prop_map(|(which, n)| Op::Settle { which, n }),
        4 => (0usize..8).prop_map(|which| Op::ServeRead { which }),
        1 => (0u64..20_000).prop_map(|advance| Op::Tick { advance }),
    ]
}

fn settings() -> impl Strategy<Value = StreamSettings> {
    (
        100u64..600,
        proptest::option::of(200u64..3000),
        proptest::option::of(5_000u64..60_000),
        prop_oneof![Just(u64::MAX), 50u64..400],
    )
        .prop_map(
            |(max_segment_bytes, max_length_bytes, max_age_ms, read_bytes)| StreamSettings {
                max_length_bytes,
                max_age_ms,
                max_segment_bytes,
                read_bytes,
            },
        )
}

/// What the reference expects of one consumer.
#[derive(Debug)]
struct Expected {
    id: u64,
    prefetch: u32,
    /// The next offset it may be delivered (nothing committed below it, from its start on,
    /// was skipped but what retention dropped).
    next: u64,
    not_before_ms: Option<u64>,
    /// Deliveries checked so far.
    checked: usize,
    settled: u32,
    attached: bool,
}

struct Run {
    h: Harness,
    consumers: Vec<Expected>,
    next_id: u64,
}

impl Run {
    fn committed(&self, offset: u64) -> bool {
        self.h
            .history
            .get(&offset)
            .is_some_and(|a| a.outcome == Some(true))
    }

    /// Where a consumer of `spec` starts, by the reference.
    fn start(&self, spec: Spec) -> (u64, Option<u64>) {
        let first = self.h.truncated_before;
        let next = self.h.history.len() as u64;
        let from_time = |at: u64| {
            let start = self
                .h
                .history
                .range(first..)
                .find(|(_, a)| a.timestamp_ms >= at)
                .map_or(next, |(&offset, _)| offset);
            (start, Some(at))
        };
        match spec {
            Spec::First => (first, None),
            Spec::Next => (next, None),
            Spec::Last => {
                let last = self
                    .h
                    .history
                    .range(first..)
                    .rev()
                    .find(|(_, a)| a.outcome == Some(true))
                    .map(|(&offset, _)| offset);
                (last.unwrap_or(next), None)
            }
            Spec::Offset(n) => (n.max(first), None),
            Spec::Timestamp(back) => from_time(self.h.now.saturating_sub(back)),
            Spec::Ago(ms) => from_time(self.h.now.saturating_sub(ms)),
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Publish { len, advance } => {
                self.h.now += advance;
                let offset = self.h.history.len() as u64;
                let body: Vec<u8> = (0..len).map(|i| (offset as usize + i) as u8).collect();
                assert_eq!(self.h.publish(&body), offset, "offsets are consecutive");
            }
            Op::Complete { n, ok } => self.h.complete(n, ok),
            Op::Consume { prefetch, spec } => {
                let id = self.next_id;
                self.next_id += 1;
                let (next, not_before_ms) = self.start(spec);
                let spec = match spec {
                    Spec::First => OffsetSpec::First,
                    Spec::Last => OffsetSpec::Last,
                    Spec::Next => OffsetSpec::Next,
                    Spec::Offset(n) => OffsetSpec::Offset(n),
                    Spec::Timestamp(back) => OffsetSpec::Timestamp {
                        ms: self.h.now.saturating_sub(back),
                    },
                    Spec::Ago(ms) => OffsetSpec::Ago { ms },
                };
                self.consumers.push(Expected {
                    id,
                    prefetch,
                    next,
                    not_before_ms,
                    checked: 0,
                    settled: 0,
                    attached: true,
                });
                self.h.consume(id, prefetch, spec);
            }
            Op::Cancel { which } => {
                if let Some(c) = self.attached(which) {
                    let id = self.consumers[c].id;
                    self.consumers[c].attached = false;
                    assert_eq!(self.h.state.cancel(id), Some(id));
                }
            }
            Op::Settle { which, n } => {
                if let Some(c) = self.attached(which) {
                    let unsettled = self.unsettled(c);
                    let n = n.min(unsettled);
                    if n > 0 {
                        self.consumers[c].settled += n;
                        let id = self.consumers[c].id;
                        self.h.settle(id, n);
                    }
                }
            }
            Op::ServeRead { which } => {
                if !self.h.reads.is_empty() {
                    let at = which % self.h.reads.len();
                    let request = self.h.reads.remove(at).expect("in range");
                    self.h.reads.push_front(request);
                    self.h.serve_read();
                }
            }
            Op::Tick { advance } => {
                self.h.now += advance;
                self.h.tick();
            }
        }
        self.check();
    }

    fn attached(&self, which: usize) -> Option<usize> {
        let attached: Vec<usize> = (0..self.consumers.len())
            .filter(|&c| self.consumers[c].attached)
            .collect();
        (!attached.is_empty()).then(|| attached[which % attached.len()])
    }

    fn unsettled(&self, c: usize) -> u32 {
        let e = &self.consumers[c];
        let delivered = self.h.seen.get(&e.id).map_or(0, Vec::len) as u32;
        delivered - e.settled
    }

    fn check(&mut self) {
        for c in 0..self.consumers.len() {
            let id = self.consumers[c].id;
            let seen = self.h.seen.get(&id).cloned().unwrap_or_default();
            let cuts = self.h.cut_at_delivery.get(&id).cloned().unwrap_or_default();
            for (delivery, cut) in seen.iter().zip(&cuts).skip(self.consumers[c].checked) {
                let e = &self.consumers[c];
                let offset = delivery.offset;
                assert!(
                    offset >= e.next,
                    "consumer {id}: {offset} delivered before {}",
                    e.next
                );
                let appended = &self.h.history[&offset];
                assert_eq!(
                    appended.outcome,
                    Some(true),
                    "consumer {id}: {offset} not committed"
                );
                assert_eq!(
                    delivery.body, appended.body,
                    "consumer {id}: {offset}'s body"
                );
                if let Some(at) = e.not_before_ms {
                    assert!(
                        appended.timestamp_ms >= at,
                        "consumer {id}: {offset} is too old"
                    );
                }
                for skipped in e.next..offset {
                    assert!(
                        !self.committed(skipped) || skipped < *cut,
                        "consumer {id}: committed {skipped} skipped (delivered {offset}, cut {cut})"
                    );
                }
                let e = &mut self.consumers[c];
                e.next = offset + 1;
                e.checked += 1;
            }
            let e = &self.consumers[c];
            if e.attached {
                assert!(
                    self.unsettled(c) <= e.prefetch,
                    "consumer {id} over its prefetch"
                );
                let (_, fetched) = self.h.state.consumer_position(id).expect("attached");
                assert!(
                    fetched <= e.prefetch as usize,
                    "consumer {id} holds past its window"
                );
            }
        }
        let first = self.h.truncated_before;
        let committed = (first..self.h.history.len() as u64)
            .filter(|&o| self.committed(o))
            .count() as u64;
        assert_eq!(self.h.state.message_count(), committed, "message_count");
        assert_eq!(
            self.h.state.first_offset().max(first),
            self.h.state.first_offset()
        );
    }

    /// Everything commits, and every consumer settles what it holds, until nothing moves.
    fn quiesce(&mut self) {
        for _ in 0..10_000 {
            let before: usize = self.h.seen.values().map(Vec::len).sum();
            self.h.commit_all();
            self.h.serve_reads();
            for c in 0..self.consumers.len() {
                let n = self.unsettled(c);
                if self.consumers[c].attached && n > 0 {
                    self.consumers[c].settled += n;
                    let id = self.consumers[c].id;
                    self.h.settle(id, n);
                }
            }
            self.h.serve_reads();
            self.check();
            let after: usize = self.h.seen.values().map(Vec::len).sum();
            if after == before && self.h.reads.is_empty() && self.h.in_flight.is_empty() {
                break;
            }
        }
        // What retention dropped is owed to no one (as during the run, where a skip is fine
        // below the cut): a consumer can only catch up with what the log still holds.
        let first = self.h.truncated_before;
        for e in self.consumers.iter().filter(|e| e.attached) {
            let missing =
                (e.next.max(first)..self.h.history.len() as u64).find(|&o| self.committed(o));
            assert_eq!(missing, None, "consumer {} did not catch up", e.id);
        }
    }
}

/// Runs `ops` against the reference, then lets everything commit and settle.
fn replay(settings: StreamSettings, ops: &[Op]) -> Run {
    let mut run = Run {
        h: Harness::new(settings),
        consumers: Vec::new(),
        next_id: 1,
    };
    for op in ops {
        run.apply(op);
    }
    run.quiesce();
    run
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_stream_delivers_what_a_reference_log_holds(
        settings in settings(),
        ops in prop::collection::vec(op(), 1..250),
    ) {
        let run = replay(settings, &ops);
        // No offset was given twice (the harness checks each append), and every append
        // settled the way it completed.
        let settled = run.h.history.values().filter(|a| a.outcome.is_some()).count();
        prop_assert_eq!(settled, run.h.history.len());
        let _: &BTreeMap<u64, _> = &run.h.history;
    }
}

fn publish(len: usize) -> Op {
    Op::Publish { len, advance: 0 }
}

fn complete(n: usize, ok: bool) -> Op {
    Op::Complete { n, ok }
}

/// Retention drops the committed head while a consumer's read of it is out, and the one record
/// left in the log fails: the consumer has nothing to catch up with.
#[test]
fn a_consumer_owes_nothing_retention_dropped_when_the_tail_failed() {
    let settings = StreamSettings {
        max_length_bytes: Some(100),
        max_age_ms: None,
        max_segment_bytes: 100,
        read_bytes: u64::MAX,
    };
    let consume = Op::Consume {
        prefetch: 1,
        spec: Spec::First,
    };
    let run = replay(
        settings,
        &[
            publish(1),
            publish(1),
            publish(1),
            complete(3, true),
            consume,
            // Starts a segment: the first one goes, with the three committed records.
            publish(1),
            complete(1, false),
        ],
    );
    assert_eq!(run.h.truncated_before, 3);
    assert!(run.h.offsets_seen(1).is_empty());
}

/// CI's shrunk case (proptest-regressions/stream/proptests.txt, cc 5c533a3e): the consumer
/// starts at offset 10 while 10..15 are appended and not committed; retention drops their
/// segment, 10 and 11 commit after that, and 12..16 fail.
#[test]
fn the_ci_case_of_appends_committing_after_retention_dropped_them() {
    let settings = StreamSettings {
        max_length_bytes: Some(200),
        max_age_ms: None,
        max_segment_bytes: 289,
        read_bytes: u64::MAX,
    };
    let consume = Op::Consume {
        prefetch: 1,
        spec: Spec::Timestamp(0),
    };
    let run = replay(
        settings,
        &[
            publish(15),
            publish(36),
            publish(55),
            publish(7),
            publish(11),
            publish(55),
            complete(3, false),
            publish(13),
            publish(8),
            publish(43),
            publish(5),
            complete(4, true),
            complete(2, true),
            publish(34),
            publish(8),
            publish(59),
            publish(7),
            consume,
            publish(16),
            publish(1),
            complete(3, true),
            complete(4, false),
        ],
    );
    assert_eq!(run.h.truncated_before, 15);
    assert!(run.h.offsets_seen(1).is_empty());
    assert_eq!(run.h.state.consumer_position(1), Some((16, 0)));
}
