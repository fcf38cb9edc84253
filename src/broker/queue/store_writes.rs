//! What one queue command asks the store to write, gathered and submitted at its end: the
//! removals and state changes in one detached submission (with, when the queue numbered
//! them, a completion that reports their commit), and the spills and rewrites with
//! completions that tell the queue's `StoreProgress` each one's fate.

use std::sync::{Arc, Weak};

use dwellmq_core::queue::StoreProgress;
use dwellmq_store::{Completion, Op, Store};

use super::owner::QueueOwner;
use super::Queue;

/// A command's store writes, not submitted yet.
#[derive(Default)]
pub(super) struct StoreWrites {
    /// Forgets, state changes, unspills: one detached submission.
    pub(super) detached: Vec<Op>,
    /// The removals among them are numbered so (`Effect::RemovalsMark`).
    pub(super) removals_mark: Option<u64>,
    /// Spills and rewrites, and the positions they write (spilled, persisted again).
    pub(super) writes: Vec<Op>,
    pub(super) written_seqs: Vec<u64>,
    pub(super) rewritten_seqs: Vec<u64>,
}

/// Where completions report to.
pub(super) struct Reporting<'a> {
    pub(super) store: &'a Arc<Store>,
    pub(super) progress: Option<&'a Arc<StoreProgress>>,
    pub(super) queue: Weak<Queue>,
    /// The queue's owner, for the nudge its completion may ask for.
    pub(super) owner: &'a dyn QueueOwner,
}

impl StoreWrites {
    /// Submits what was gathered: called under the queue's lock, so that the store sees a
    /// message's persist before its state changes and its removal.
    pub(super) fn submit(self, to: Reporting<'_>) {
        let StoreWrites {
            detached,
            removals_mark,
            writes,
            mut written_seqs,
            rewritten_seqs,
        } = self;
        match (removals_mark, to.progress) {
            (Some(mark), Some(progress)) => {
                let progress = Arc::clone(progress);
                // Carried ops of a failed commit go first in a later one, so a later mark's
                // commit also covers a mark whose own commit failed.
                to.store.submit(detached, move |outcome: Completion| {
                    if outcome.is_ok() {
                        progress.removals_done(mark);
                    }
                });
            }
            _ if !detached.is_empty() => to.store.submit_detached(detached),
            _ => {}
        }
        let Some(progress) = to.progress else {
            return;
        };
        if writes.is_empty() {
            return;
        }
        for &seq in &written_seqs {
            progress.spilling(seq);
        }
        for &seq in &rewritten_seqs {
            progress.rewriting(seq);
        }
        written_seqs.extend(rewritten_seqs);
        let (progress, queue, owner) = (Arc::clone(progress), to.queue, to.owner.weak());
        to.store.submit(
            writes,
            Box::new(move |outcome: Completion| {
                for seq in written_seqs {
                    progress.spilled(seq, outcome.is_ok());
                }
                if let Err(e) = &outcome {
                    tracing::warn!(error = %e, "writing messages failed; they are written again");
                }
                // What they wrote may leave memory (or what failed is written again) even if
                // no command comes, as when the memory alarm blocks the queue's publishers.
                if let Some(queue) = queue.upgrade() {
                    queue.request_nudge(owner, outcome.is_err());
                }
            }),
        );
    }
}
