//! Which of a paging queue's store writes are committed: a message may leave memory only
//! once the store has it (a page read must find it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Filled by the writer's completions, read by the queue after each command.
#[derive(Debug, Default)]
pub(crate) struct StoreProgress {
    /// Every persist below this position has completed. One queue's persists are submitted
    /// in position order under its lock and committed in submission order. A spill, which
    /// comes later than the persists of the messages after it, is submitted after every
    /// persist below its position too: its completion moves this as well.
    completed_below: AtomicU64,
    /// Positions whose write failed (the publisher was nacked, or the spill is given up; the
    /// message stays in memory and never joins the run).
    failed: Mutex<BTreeSet<u64>>,
    /// Whether `failed` holds anything: the common case reads one atomic.
    any_failed: AtomicBool,
    /// Spills submitted and not completed, by position (a message spilled, read back and
    /// spilled again may have two in flight).
    spilling: Mutex<BTreeMap<u64, u32>>,
    /// Spills submitted and not completed (the sum of `spilling`'s counts): the common case
    /// reads this one atomic.
    in_flight: AtomicUsize,
    /// Positions whose last spill failed: spilled again. (A failed persist is not: its
    /// submission may have been carried into a later commit with its group, so the store
    /// may have it after all; a spill written twice only writes its record again.)
    spill_failed: Mutex<BTreeSet<u64>>,
    /// Whether `spill_failed` holds anything.
    any_spill_failed: AtomicBool,
}

impl StoreProgress {
    /// The persist of `seq` completed.
    pub(crate) fn completed(&self, seq: u64, committed: bool) {
        if !committed {
            self.failed.lock().insert(seq);
            self.any_failed.store(true, Ordering::Release);
        }
        self.stored_below(seq.saturating_add(1));
    }

    /// A spill of `seq` is about to be submitted: until it completes, `seq` is not stored.
    pub(crate) fn spilling(&self, seq: u64) {
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

    /// The spill of `seq` completed.
    pub(crate) fn spilled(&self, seq: u64, committed: bool) {
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
    pub(crate) fn spills_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Everything below `seq` is stored (messages read back at start).
    pub(crate) fn stored_below(&self, seq: u64) {
        self.completed_below.fetch_max(seq, Ordering::AcqRel);
    }

    /// Whether the last spill of `seq` failed (it is spilled again).
    pub(crate) fn is_lost(&self, seq: u64) -> bool {
        self.any_spill_failed.load(Ordering::Acquire) && self.spill_failed.lock().contains(&seq)
    }

    /// Whether the message at `seq` (persisted or spilled by this queue) is committed.
    pub(crate) fn is_stored(&self, seq: u64) -> bool {
        let completed = seq < self.completed_below.load(Ordering::Acquire);
        let in_flight = self.spills_in_flight() > 0 && self.spilling.lock().contains_key(&seq);
        let failed = self.any_failed.load(Ordering::Acquire) && self.failed.lock().contains(&seq);
        completed && !in_flight && !failed && !self.is_lost(seq)
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
    fn a_failed_persist_is_never_spilled() {
        // Its group may have carried it into a later commit: the store may have it.
        let progress = StoreProgress::default();
        progress.completed(4, false);
        assert!(!progress.is_stored(4));
        assert!(!progress.is_lost(4));
    }
}
