//! Which of a stream's appends are settled: filled by the store's completions (on the
//! writer's thread, without the stream's lock), read by the stream in
//! [`super::StreamState::sync`].

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// A stream's append completions.
///
/// Appends are submitted in offset order under the stream's lock and the store commits in
/// submission order, so a completion for offset `n` means every append below `n` completed too:
/// one atomic says how far, and the few that failed are listed.
#[derive(Debug, Default)]
pub struct StreamProgress {
    settled_below: AtomicU64,
    failed: Mutex<BTreeSet<u64>>,
    any_failed: AtomicBool,
}

impl StreamProgress {
    /// A progress whose appends below `offset` are settled (a restored stream's).
    pub fn starting_at(offset: u64) -> Self {
        let progress = StreamProgress::default();
        progress.settled_below.store(offset, Ordering::Release);
        progress
    }

    /// The append of `offset` completed: `committed`, or failed (its publisher is nacked and
    /// the record is not in the log).
    pub fn completed(&self, offset: u64, committed: bool) {
        if !committed {
            self.failed.lock().insert(offset);
            self.any_failed.store(true, Ordering::Release);
        }
        self.settled_below
            .fetch_max(offset.saturating_add(1), Ordering::AcqRel);
    }

    /// Every append below this offset completed.
    pub fn settled_below(&self) -> u64 {
        self.settled_below.load(Ordering::Acquire)
    }

    /// Takes the failed offsets below `end`, in order.
    pub(crate) fn take_failed_below(&self, end: u64) -> Vec<u64> {
        if !self.any_failed.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut failed = self.failed.lock();
        let rest = failed.split_off(&end);
        let taken = std::mem::replace(&mut *failed, rest);
        self.any_failed.store(!failed.is_empty(), Ordering::Release);
        taken.into_iter().collect()
    }
}
