//! Which of a paging queue's store writes are committed: a message may leave memory only
//! once the store has it (a page read must find it). The owner's store completions fill it
//! (from the store's writer thread), the queue reads it through [`WriteProgress`] after each
//! command.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::WriteProgress;

/// Filled by the writer's completions, read by the queue after each command.
#[derive(Debug, Default)]
pub struct StoreProgress {
    /// Every persist below this position has completed. One queue's persists are submitted
    /// in position order under its lock and committed in submission order. A spill, which
    /// comes later than the persists of the messages after it, is submitted after every
    /// persist below its position too: its completion moves this as well.
    completed_below: AtomicU64,
    /// Positions whose persist failed (the publisher was nacked; the message stays in memory
    /// and is persisted again, see `Effect::Rewrite`, until one commits).
    failed: Mutex<BTreeSet<u64>>,
    /// Whether `failed` holds anything: the common case reads one atomic.
    any_failed: AtomicBool,
    /// Spills submitted and not completed, by position (a message spilled, read back and
    /// spilled again may have two in flight).
    spilling: Mutex<BTreeMap<u64, u32>>,
    /// Spills submitted and not completed (the sum of `spilling`'s counts): the common case
    /// reads this one atomic.
    in_flight: AtomicUsize,
    /// Positions whose last spill failed: spilled again. (A failed persist is persisted
    /// again, never spilled: its submission may have been carried into a later commit with
    /// its group, so the store may have it after all, and a spilled record beside it would
    /// be a second message; a record written twice is one.)
    spill_failed: Mutex<BTreeSet<u64>>,
    /// Whether `spill_failed` holds anything.
    any_spill_failed: AtomicBool,
    /// The highest removals mark (`Effect::RemovalsMark`) known committed.
    removals_committed: AtomicU64,
}

impl StoreProgress {
    /// The persist of `seq` completed (a rewrite's too: one that commits ends its failure).
    pub fn completed(&self, seq: u64, committed: bool) {
        if committed {
            if self.any_failed.load(Ordering::Acquire) {
                let mut failed = self.failed.lock();
                failed.remove(&seq);
                self.any_failed.store(!failed.is_empty(), Ordering::Release);
            }
        } else {
            self.failed.lock().insert(seq);
            self.any_failed.store(true, Ordering::Release);
        }
        self.stored_below(seq.saturating_add(1));
    }

    /// The removals numbered up to `mark` are committed (carried ops of an earlier failed
    /// commit go first in a later one, so a later mark's commit covers earlier marks).
    pub fn removals_done(&self, mark: u64) {
        self.removals_committed.fetch_max(mark, Ordering::AcqRel);
    }

    /// A spill of `seq` is about to be submitted: until it completes, `seq` is not stored.
    pub fn spilling(&self, seq: u64) {
        if self.any_spill_failed.load(Ordering::Acquire) {
            // Spilled again after a failed spill: it is stored once this one commits.
            let mut failed = self.spill_failed.lock();
            failed.remove(&seq);
            self.any_spill_failed
                .store(!failed.is_empty(), Ordering::Release);
        }
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        *self.spilling.lock().entry(seq).or_default() += 1;
    }

    /// A failed persist of `seq` is submitted again (`Effect::Rewrite`): until it commits,
    /// `seq` is not stored; if it fails, it is lost again. Its completion is `spilled`'s.
    pub fn rewriting(&self, seq: u64) {
        if self.any_failed.load(Ordering::Acquire) {
            let mut failed = self.failed.lock();
            failed.remove(&seq);
            self.any_failed.store(!failed.is_empty(), Ordering::Release);
        }
        self.spilling(seq);
    }

    /// The spill (or rewrite) of `seq` completed.
    pub fn spilled(&self, seq: u64, committed: bool) {
        {
            let mut spilling = self.spilling.lock();
            if let Some(n) = spilling.get_mut(&seq) {
                *n -= 1;
                if *n == 0 {
                    spilling.remove(&seq);
                }
            }
        }
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        if !committed {
            self.spill_failed.lock().insert(seq);
            self.any_spill_failed.store(true, Ordering::Release);
        }
        self.stored_below(seq.saturating_add(1));
    }

    /// Spills submitted and not completed.
    pub fn spills_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Everything below `seq` is stored (messages read back at start).
    pub fn stored_below(&self, seq: u64) {
        self.completed_below.fetch_max(seq, Ordering::AcqRel);
    }
}

impl WriteProgress for StoreProgress {
    /// Whether the last write of `seq` failed (it is written again).
    fn is_lost(&self, seq: u64) -> bool {
        let spill = self.any_spill_failed.load(Ordering::Acquire)
            && self.spill_failed.lock().contains(&seq);
        let persist = self.any_failed.load(Ordering::Acquire) && self.failed.lock().contains(&seq);
        spill || persist
    }

    fn any_lost(&self) -> bool {
        self.any_spill_failed.load(Ordering::Acquire) || self.any_failed.load(Ordering::Acquire)
    }

    /// Whether the message at `seq` (persisted or spilled by this queue) is committed.
    fn is_stored(&self, seq: u64) -> bool {
        let completed = seq < self.completed_below.load(Ordering::Acquire);
        let in_flight = self.spills_in_flight() > 0 && self.spilling.lock().contains_key(&seq);
        completed && !in_flight && !self.is_lost(seq)
    }

    fn removals_committed(&self) -> u64 {
        self.removals_committed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spill_is_stored_only_once_its_own_write_completed() {
        let progress = StoreProgress::default();
        // A transient message at 3 is spilled after the persist of 5 was submitted.
        progress.spilling(3);
        progress.completed(5, true);
        assert!(progress.is_stored(4));
        assert!(!progress.is_stored(3));
        progress.spilled(3, true);
        assert!(progress.is_stored(3));
    }

    #[test]
    fn a_second_spill_in_flight_keeps_the_message_unstored() {
        let progress = StoreProgress::default();
        progress.spilling(7);
        progress.spilling(7);
        progress.spilled(7, true);
        assert!(!progress.is_stored(7));
        progress.spilled(7, true);
        assert!(progress.is_stored(7));
    }

    #[test]
    fn a_failed_spill_is_not_stored_until_spilled_again() {
        let progress = StoreProgress::default();
        progress.spilling(2);
        progress.spilled(2, false);
        progress.completed(9, true);
        assert!(!progress.is_stored(2));
        assert!(progress.is_lost(2));
        assert!(progress.is_stored(1));
        progress.spilling(2);
        assert!(!progress.is_lost(2));
        progress.spilled(2, true);
        assert!(progress.is_stored(2));
    }

    #[test]
    fn a_failed_persist_is_lost_until_a_rewrite_commits() {
        let progress = StoreProgress::default();
        progress.completed(4, false);
        progress.completed(9, true);
        assert!(!progress.is_stored(4));
        assert!(progress.is_lost(4) && progress.any_lost());
        // The rewrite commits after later persists did.
        progress.completed(4, true);
        assert!(progress.is_stored(4));
        assert!(!progress.any_lost());
    }
}
