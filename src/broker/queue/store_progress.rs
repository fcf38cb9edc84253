//! Which of a paging queue's persists the store has committed: a message may leave memory
//! only once the store has it (a page read must find it).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// Filled by the writer's completions, read by the queue after each command.
#[derive(Debug, Default)]
pub(crate) struct StoreProgress {
    /// Every persist below this position has completed. One queue's persists are submitted
    /// in position order under its lock and committed in submission order.
    completed_below: AtomicU64,
    /// Positions whose persist failed (the publisher was nacked; the message stays in
    /// memory and is never left in the store).
    failed: Mutex<BTreeSet<u64>>,
    /// Whether `failed` holds anything: the common case reads one atomic.
    any_failed: AtomicBool,
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

    /// Everything below `seq` is stored (messages read back at start).
    pub(crate) fn stored_below(&self, seq: u64) {
        self.completed_below.fetch_max(seq, Ordering::AcqRel);
    }

    /// Whether the message at `seq` (persisted by this queue) is committed.
    pub(crate) fn is_stored(&self, seq: u64) -> bool {
        seq < self.completed_below.load(Ordering::Acquire)
            && !(self.any_failed.load(Ordering::Acquire) && self.failed.lock().contains(&seq))
    }
}
