//! One round at one instant: everything due is served in due order (schedule order within a
//! millisecond), then what is due within the horizon moves from the far tier into the wheel.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dwellmq_core::schedule::{Due, MoveIn};

use super::{Entry, HeldRound, Holder, Locked, RoundScratch, Scheduler, MOVE_IN_BATCH};

impl<H: Holder> Scheduler<H> {
    /// Serves everything due at `now_ms`, then moves into the wheel what the far tier holds
    /// within the horizon (within `budget`, if any). Returns how many held items were released.
    pub(crate) fn serve_round(&self, now_ms: u64, budget: Option<Duration>, holder: &H) -> usize {
        let released = self.release_due(now_ms, holder);
        self.move_in(now_ms, budget);
        released
    }

    /// Serves everything due at `now_ms` in due order: clients are called back (each once per
    /// round: one call serves all its deadlines due now), one-shot deadlines run, and the
    /// holder releases its items. Returns how many items it released.
    pub(crate) fn release_due(&self, now_ms: u64, holder: &H) -> usize {
        let mut scratch = self.scratch.lock();
        let RoundScratch {
            due,
            called,
            holder: holder_scratch,
        } = &mut *scratch;
        {
            let mut guard = self.state.lock();
            let Locked { core, book } = &mut *guard;
            core.take_due(now_ms, due);
            for d in due.iter() {
                if let Entry::Held(item) = &d.item {
                    H::take(book, d.id, d.from_far_tier, item, holder_scratch);
                }
            }
        }
        let mut round = holder.begin_round(holder_scratch);
        for Due { id, item, .. } in due.drain(..) {
            match item {
                Entry::Held(item) => round.release(now_ms, id, item),
                Entry::Client(client) => {
                    let Some(client) = client.upgrade() else {
                        continue;
                    };
                    if !called.iter().any(|c| same_client(c, &client)) {
                        Arc::clone(&client).due(now_ms);
                        called.push(client);
                    }
                }
                Entry::Once(work) => work.due(now_ms),
            }
        }
        called.clear();
        round.finish()
    }

    /// Moves the deadlines due within the horizon of `now_ms` from the far tier into the
    /// wheel, in (due, sequence) order and in batches (held items are shown to the holder, so
    /// that their release finds them warm). Stops early once `budget` is spent or a moved
    /// deadline is already due; returns whether it finished.
    pub(crate) fn move_in(&self, now_ms: u64, budget: Option<Duration>) -> bool {
        let started = Instant::now();
        loop {
            let mut guard = self.state.lock();
            let Locked { core, book } = &mut *guard;
            let round = core.move_in(now_ms, MOVE_IN_BATCH, |id, entry| {
                if let Entry::Held(item) = entry {
                    H::moved_in(book, id, item);
                }
            });
            if round == MoveIn::Done {
                return true;
            }
            // Moved-in deadlines already due (moving in fell behind) are served first.
            let release_due = core.wheel_due(now_ms);
            drop(guard);
            if release_due || budget.is_some_and(|b| started.elapsed() >= b) {
                return false;
            }
        }
    }
}

/// Whether two handles are one client (by address: the vtables of one type may differ
/// between codegen units).
fn same_client(a: &Arc<dyn super::DeadlineClient>, b: &Arc<dyn super::DeadlineClient>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}
