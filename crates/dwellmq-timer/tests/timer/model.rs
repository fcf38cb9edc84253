//! `TimerWheel` against a model: a `BTreeMap` ordered by (due, insertion
//! sequence). Random insert/cancel/advance sequences must fire the same
//! timers in the same order at the same `advance` calls, and agree on
//! `len`, `now` and `next_due` after every operation.

use std::collections::{BTreeMap, HashMap};

use dwellmq_timer::{Fired, TimerKey, TimerWheel};
use proptest::prelude::*;
use proptest::sample::Index;

const SECOND: u64 = 1_000;
const WEEK: u64 = 7 * 86_400 * SECOND;
/// The longest delay the broker schedules.
const TEN_YEARS: u64 = 315_360_000_000;
/// The cap on delays taken from message headers.
const U32_CAP: u64 = u32::MAX as u64;

/// Fixed due times (as offsets from the start) that many timers share:
/// slot and level boundaries plus a few far ones.
const SHARED_OFFSETS: [u64; 9] = [0, 1, 63, 64, 4_095, 4_096, 300_000, U32_CAP, TEN_YEARS];

#[derive(Debug, Clone)]
enum Op {
    /// Insert due `now + delay` (saturating).
    InsertAfter(u64),
    /// Insert due `now - ago` (saturating): already due.
    InsertBefore(u64),
    /// Insert due `start + offset` (saturating): a fixed time, so timers
    /// inserted at different `now`s share due times.
    InsertAt(u64),
    /// Cancel a key picked from every key ever issued, mostly stale ones.
    CancelAny(Index),
    /// Cancel a key of a pending timer.
    CancelPending(Index),
    /// Advance to `now + step` (saturating).
    AdvanceBy(u64),
    /// Advance to `now - back` (saturating): must not move time.
    AdvanceBack(u64),
    /// Advance to exactly `next_due + offset`, to hit slot boundaries.
    AdvanceToNextDue { minus_one: bool },
}

fn delay() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..64u64,
        3 => 0..5 * SECOND,
        2 => 0..=2 * WEEK,
        1 => 0..=U32_CAP,
        1 => (U32_CAP - 64)..=U32_CAP,
        1 => 0..=TEN_YEARS,
        1 => Just(TEN_YEARS),
        // Rare, since it pushes `now` to the end of time when advanced to.
        1 => any::<u64>(),
    ]
}

fn step() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..8u64,
        3 => 0..5 * SECOND,
        2 => 0..=WEEK,
        1 => 0..=U32_CAP,
        1 => 0..=TEN_YEARS,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => delay().prop_map(Op::InsertAfter),
        1 => (0..10 * SECOND).prop_map(Op::InsertBefore),
        2 => prop::sample::select(SHARED_OFFSETS.to_vec()).prop_map(Op::InsertAt),
        2 => any::<Index>().prop_map(Op::CancelAny),
        3 => any::<Index>().prop_map(Op::CancelPending),
        5 => step().prop_map(Op::AdvanceBy),
        1 => (0..1_000u64).prop_map(Op::AdvanceBack),
        2 => any::<bool>().prop_map(|minus_one| Op::AdvanceToNextDue { minus_one }),
    ]
}

/// The obviously-correct scheduler: pending timers sorted by
/// (due, sequence), where the sequence number is also the timer's value.
#[derive(Debug)]
struct Model {
    now: u64,
    pending: BTreeMap<(u64, u64), ()>,
    due_of: HashMap<u64, u64>,
}

impl Model {
    fn new(now: u64) -> Self {
        Self {
            now,
            pending: BTreeMap::new(),
            due_of: HashMap::new(),
        }
    }

    fn insert(&mut self, due: u64, seq: u64) {
        self.pending.insert((due, seq), ());
        self.due_of.insert(seq, due);
    }

    fn cancel(&mut self, seq: u64) -> Option<u64> {
        let due = self.due_of.remove(&seq)?;
        self.pending.remove(&(due, seq));
        Some(seq)
    }

    fn advance(&mut self, to: u64) -> Vec<(u64, u64)> {
        self.now = self.now.max(to);
        let mut fired = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            let (due, seq) = *entry.key();
            if due > self.now {
                break;
            }
            entry.remove();
            self.due_of.remove(&seq);
            fired.push((due, seq));
        }
        fired
    }

    fn next_due(&self) -> Option<u64> {
        self.pending.keys().next().map(|&(due, _)| due)
    }
}

fn run(start: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut wheel = TimerWheel::new(start);
    let mut model = Model::new(start);
    // keys[seq] is the key returned for the insert with that sequence.
    let mut keys: Vec<TimerKey> = Vec::new();
    let mut fired: Vec<Fired<u64>> = Vec::new();

    for (step_no, op) in ops.iter().enumerate() {
        match *op {
            Op::InsertAfter(delay) => {
                let seq = keys.len() as u64;
                let due = model.now.saturating_add(delay);
                keys.push(wheel.insert(due, seq));
                model.insert(due, seq);
            }
            Op::InsertBefore(ago) => {
                let seq = keys.len() as u64;
                let due = model.now.saturating_sub(ago);
                keys.push(wheel.insert(due, seq));
                model.insert(due, seq);
            }
            Op::InsertAt(offset) => {
                let seq = keys.len() as u64;
                let due = start.saturating_add(offset);
                keys.push(wheel.insert(due, seq));
                model.insert(due, seq);
            }
            Op::CancelAny(pick) => {
                if !keys.is_empty() {
                    let seq = pick.index(keys.len());
                    let expected = model.cancel(seq as u64);
                    prop_assert_eq!(wheel.cancel(keys[seq]), expected, "step {}", step_no);
                }
            }
            Op::CancelPending(pick) => {
                if !model.pending.is_empty() {
                    let nth = pick.index(model.pending.len());
                    let &(_, seq) = model.pending.keys().nth(nth).expect("nth < len");
                    model.cancel(seq);
                    prop_assert_eq!(wheel.cancel(keys[seq as usize]), Some(seq));
                }
            }
            Op::AdvanceBy(_) | Op::AdvanceBack(_) | Op::AdvanceToNextDue { .. } => {
                let to = match *op {
                    Op::AdvanceBy(by) => model.now.saturating_add(by),
                    Op::AdvanceBack(back) => model.now.saturating_sub(back),
                    _ => {
                        let next = model.next_due().unwrap_or(model.now);
                        let minus_one = matches!(op, Op::AdvanceToNextDue { minus_one: true });
                        next.saturating_sub(u64::from(minus_one))
                    }
                };
                fired.clear();
                wheel.advance(to, &mut fired);
                let got: Vec<(u64, u64)> = fired.iter().map(|f| (f.due_ms, f.value)).collect();
                prop_assert_eq!(
                    got,
                    model.advance(to),
                    "step {}: advance to {}",
                    step_no,
                    to
                );
            }
        }
        prop_assert_eq!(wheel.now(), model.now, "step {}: now", step_no);
        prop_assert_eq!(wheel.len(), model.pending.len(), "step {}: len", step_no);
        prop_assert_eq!(wheel.is_empty(), model.pending.is_empty());
        prop_assert_eq!(
            wheel.next_due(),
            model.next_due(),
            "step {}: next_due",
            step_no
        );
    }

    // Draining at the end of time must fire exactly what the model holds.
    fired.clear();
    wheel.advance(u64::MAX, &mut fired);
    let got: Vec<(u64, u64)> = fired.iter().map(|f| (f.due_ms, f.value)).collect();
    prop_assert_eq!(got, model.advance(u64::MAX));
    prop_assert!(wheel.is_empty());
    Ok(())
}

fn start_time() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        // Around a realistic epoch-millis "now".
        1_600_000_000_000..1_900_000_000_000u64,
        // Near the end of time, where sums saturate.
        (u64::MAX - TEN_YEARS)..=u64::MAX,
        any::<u64>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn wheel_matches_model(start in start_time(), ops in prop::collection::vec(op(), 1..200)) {
        run(start, &ops)?;
    }

    /// Many timers at few distinct due times, to stress equal-due ordering
    /// through cascades.
    #[test]
    fn equal_due_times_keep_insertion_order(
        start in start_time(),
        ops in prop::collection::vec(
            prop_oneof![
                4 => prop::sample::select(SHARED_OFFSETS.to_vec()).prop_map(Op::InsertAt),
                1 => (0..5 * SECOND).prop_map(Op::AdvanceBy),
                1 => any::<bool>().prop_map(|minus_one| Op::AdvanceToNextDue { minus_one }),
                1 => any::<Index>().prop_map(Op::CancelPending),
            ],
            1..300,
        ),
    ) {
        run(start, &ops)?;
    }
}
