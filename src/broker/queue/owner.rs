//! What a queue hands up: the effects it cannot carry out on its own.
//!
//! A queue runs core's commands and carries out what concerns itself (deliveries, store
//! writes, memory charges) under its lock. What reaches beyond it (a dead letter routed
//! through the vhost's exchanges, a deadline armed in the broker's scheduler, the queue's own
//! deletion on `x-expires`, a kept dead letter's retry) it gathers in an [`Aftermath`] and
//! hands to its owner, a [`QueueOwner`] passed to every operation that can produce one. The
//! queue holds no pointer to its owner: work that outlives an operation (a page read, a store
//! completion, a scheduled tick) carries the owner's [`QueueOwner::weak`] handle beside the
//! queue's.

use std::sync::{Arc, Weak};

use dwellmq_core::queue::{DeadLetterTarget, DeathReason};
use dwellmq_core::Message;

use super::kept_dead_letters::PendingDeadLetter;
use super::Queue;

/// Who carries out what a queue's commands leave to do: the vhost the queue lives in.
pub(crate) trait QueueOwner: Send + Sync {
    /// Carries out `aftermath`, left by a command of `queue` at `now_ms`, once the queue's lock
    /// is released (it may route back into `queue`).
    fn carry_out(&self, queue: &Arc<Queue>, aftermath: Aftermath<'_>, now_ms: u64);

    /// The owner, for work that outlives the operation that starts it.
    fn weak(&self) -> Weak<dyn QueueOwner>;
}

/// A message that died in a command, to be dead-lettered once the queue's lock is released.
pub(crate) struct Died {
    pub(crate) message: Arc<Message>,
    pub(crate) reason: DeathReason,
    /// Its store record, kept until its copies are written (at-least-once dead-lettering;
    /// otherwise the command's forget has removed it already).
    pub(crate) seq: Option<u64>,
}

/// What a command left for the queue's owner, applied in the order of its fields.
#[derive(Default)]
pub(crate) struct Aftermath<'a> {
    /// Tick the queue at or after this time (its earliest new deadline).
    pub(crate) arm_at: Option<u64>,
    /// Messages that died, to route to `dead_letter_target`.
    pub(crate) dead: Vec<Died>,
    /// Where they go, as the settings said when they died (or, for `retry`, now).
    pub(crate) dead_letter_target: Option<DeadLetterTarget>,
    /// The source keeps what not every target took (at-least-once dead-lettering).
    pub(crate) at_least_once: bool,
    /// Kept dead letters due for another attempt.
    pub(crate) retry: Vec<PendingDeadLetter>,
    /// The queue keeps dead letters now (restored): a binding added retries them.
    pub(crate) keeps_dead_letters: bool,
    /// The store group the dead letters' removal from the queue is in: their copies join
    /// it, and it ends once they are routed.
    pub(crate) group: Option<dwellmq_store::Group<'a>>,
    /// `x-expires` elapsed: the queue is to be deleted.
    pub(crate) expire: bool,
}

impl Aftermath<'_> {
    /// Whether there is nothing to hand up (the common case: no call to the owner).
    pub(crate) fn is_empty(&self) -> bool {
        self.arm_at.is_none()
            && self.dead.is_empty()
            && self.retry.is_empty()
            && !self.keeps_dead_letters
            && !self.expire
    }

    /// Asks for a tick at `at_ms` (the earliest of a command's asks wins).
    pub(super) fn arm(&mut self, at_ms: u64) {
        self.arm_at = Some(self.arm_at.map_or(at_ms, |armed| armed.min(at_ms)));
    }
}
