//! At-least-once dead-lettering (`x-dead-letter-strategy: at-least-once` on a quorum queue with
//! `x-overflow: reject-publish`), the source queue's side: a dead-lettered message that not
//! every target took stays here, never deliverable again, marked in the store, until a retry
//! gets it into all of them; its store record goes in the commit of its last copies. The
//! routing itself is the owner's (`effects::dead_letters`): the queue keeps, counts, and says
//! when to try again.

use std::collections::VecDeque;
use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::queue::DeathReason;
use dwellmq_core::Message;
use parking_lot::Mutex;

use super::owner::{Aftermath, QueueOwner};
use super::Queue;

/// How long a kept message waits before it is routed again. RabbitMQ's dead-letter worker
/// re-sends what its targets did not confirm on a timer too
/// (`dead_letter_worker_publisher_confirm_timeout`, 2 minutes by default); a binding added in
/// the meantime does not wait for it (`Queue::retry_dead_letters`).
pub(crate) const RETRY_INTERVAL_MS: u64 = 120_000;

/// A dead-lettered message its source keeps.
pub(crate) struct PendingDeadLetter {
    /// The message as it was in the source (the dead copy is built again at each attempt, for
    /// the dead-letter target as it is then).
    pub(crate) message: Arc<Message>,
    pub(crate) reason: DeathReason,
    /// When it died (`x-death`'s time).
    pub(crate) died_at_ms: u64,
    /// Its record in the source's store, removed in the commit that writes the last copy.
    pub(crate) seq: Option<u64>,
    /// Target queues that took it already: a retry skips them.
    pub(crate) taken_by: Vec<ShortStr>,
}

/// What one round of attempts made of a source's dead letters (reported by the owner).
#[derive(Default)]
pub(crate) struct Attempts {
    /// The first attempt (at death): what stays kept is marked in the store.
    pub(crate) first: bool,
    /// Store records of the messages every target took: they leave the store.
    pub(crate) through: Vec<u64>,
    /// What not every target took, kept for a retry.
    pub(crate) kept: Vec<PendingDeadLetter>,
}

#[derive(Default)]
struct Kept {
    messages: VecDeque<PendingDeadLetter>,
    bytes: u64,
    /// When they are routed again (none kept, none armed).
    retry_at: Option<u64>,
}

/// A source queue's kept dead-lettered messages.
#[derive(Default)]
pub(super) struct PendingDeadLetters {
    kept: Mutex<Kept>,
}

impl PendingDeadLetters {
    /// Keeps `pending` for a retry; returns the time to arm when no retry was armed yet.
    fn keep(&self, pending: PendingDeadLetter, now_ms: u64) -> Option<u64> {
        let mut kept = self.kept.lock();
        kept.bytes += pending.message.body_len() as u64;
        kept.messages.push_back(pending);
        if kept.retry_at.is_some() {
            return None;
        }
        let at = now_ms.saturating_add(RETRY_INTERVAL_MS);
        kept.retry_at = Some(at);
        Some(at)
    }

    /// Every kept message, if their retry is due at `now_ms` (or `now` is true): they are
    /// routed again, and those that still do not get through are kept again.
    fn take(&self, now_ms: u64, now: bool) -> Vec<PendingDeadLetter> {
        let mut kept = self.kept.lock();
        let due = kept.retry_at.is_some_and(|at| at <= now_ms);
        if kept.messages.is_empty() || !(due || now) {
            return Vec::new();
        }
        kept.retry_at = None;
        kept.bytes = 0;
        kept.messages.drain(..).collect()
    }

    /// How many are kept, and their body bytes (the management API's `messages_dlx` and
    /// `message_bytes_dlx`).
    pub(super) fn figures(&self) -> (usize, u64) {
        let kept = self.kept.lock();
        (kept.messages.len(), kept.bytes)
    }

    /// Up to `limit` kept messages, oldest first (the test double's inspection).
    fn messages(&self, limit: usize) -> Vec<Arc<Message>> {
        let kept = self.kept.lock();
        kept.messages
            .iter()
            .take(limit)
            .map(|p| Arc::clone(&p.message))
            .collect()
    }

    /// The queue is gone: what it kept goes with it (the store drops its records with it).
    pub(super) fn clear(&self) {
        *self.kept.lock() = Kept::default();
    }
}

/// The number the store keeps for `reason` (`DeliveryState::dead_letter_reason`).
pub(crate) fn reason_code(reason: DeathReason) -> u8 {
    match reason {
        DeathReason::Rejected => 0,
        DeathReason::Expired => 1,
        DeathReason::Maxlen => 2,
        DeathReason::DeliveryLimit => 3,
    }
}

/// The reason the store's number stands for.
pub(crate) fn reason_of_code(code: u8) -> Option<DeathReason> {
    Some(match code {
        0 => DeathReason::Rejected,
        1 => DeathReason::Expired,
        2 => DeathReason::Maxlen,
        3 => DeathReason::DeliveryLimit,
        _ => return None,
    })
}

impl Queue {
    /// Up to `limit` of the dead-lettered messages it keeps, oldest first.
    pub(crate) fn kept_dead_letters(&self, limit: usize) -> Vec<Arc<Message>> {
        self.pending_dead_letters.messages(limit)
    }

    /// Whether it keeps dead-lettered messages that not every target took yet.
    pub(crate) fn keeps_dead_letters(&self) -> bool {
        self.pending_dead_letters.figures().0 > 0
    }

    /// The policy that applies changed. As RabbitMQ's `rabbit_fifo_dlx:update_config`: a
    /// queue that no longer dead-letters at least once (the strategy, the overflow mode or the
    /// dead-letter exchange changed) deletes what it kept; one that still does routes it
    /// again at once when its target changed.
    pub(super) fn dead_letter_strategy_changed(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        was_at_least_once: bool,
        at_least_once: bool,
        target_changed: bool,
    ) {
        match (was_at_least_once, at_least_once) {
            (true, false) => self.drop_kept_dead_letters("no longer dead-lettering at least once"),
            (true, true) if target_changed => self.retry_dead_letters(owner, true),
            _ => {}
        }
    }

    /// Deletes every kept dead-lettered message, from memory and from the store.
    fn drop_kept_dead_letters(&self, why: &str) {
        let kept = self.pending_dead_letters.take(0, true);
        if kept.is_empty() {
            return;
        }
        let bytes: usize = kept.iter().map(|p| p.message.body_len()).sum();
        tracing::info!(
            queue = %self.name,
            vhost = %self.vhost,
            deleted = kept.len(),
            bytes,
            "{why}: kept dead-lettered messages deleted"
        );
        self.forget_in_store(kept.iter().filter_map(|p| p.seq));
        self.count_kept_dead_letters();
    }

    /// Hands kept dead-lettered messages to `owner` to route once more: when their retry is
    /// due, or at once with `now` (a binding was added).
    pub(crate) fn retry_dead_letters(self: &Arc<Self>, owner: &dyn QueueOwner, now: bool) {
        if !self.keeps_dead_letters() {
            return;
        }
        let target = {
            let inner = self.inner.lock();
            let settings = inner.state.settings();
            settings
                .dead_letter_at_least_once
                .then(|| settings.dead_letter.clone())
                .flatten()
        };
        let Some(target) = target else {
            // Kept by an attempt that ran while the strategy changed: deleted as the change
            // deleted the others.
            self.drop_kept_dead_letters("no longer dead-lettering at least once");
            return;
        };
        let now_ms = self.services.clock.now_ms();
        let due = self.pending_dead_letters.take(now_ms, now);
        if due.is_empty() {
            return;
        }
        let aftermath = Aftermath {
            retry: due,
            dead_letter_target: Some(target),
            at_least_once: true,
            // Their removal and their copies in the targets commit together.
            group: self.store_group(),
            ..Aftermath::default()
        };
        owner.carry_out(self, aftermath, now_ms);
    }

    /// Takes in what a round of attempts made of its dead letters: those every target took
    /// leave the store, the others are kept (marked in the store at their first attempt).
    /// Returns when to try again, if no retry was armed yet: the owner arms it.
    pub(crate) fn settle_dead_letter_attempts(
        &self,
        attempts: Attempts,
        now_ms: u64,
    ) -> Option<u64> {
        let Attempts {
            first,
            through,
            kept,
        } = attempts;
        let mut marks = Vec::new();
        let mut arm = None;
        for pending in kept {
            if let (true, Some(seq), Some(&queue)) = (first, pending.seq, self.store_id.get()) {
                marks.push(dwellmq_store::Op::SetState {
                    queue,
                    seq,
                    state: dwellmq_store::DeliveryState {
                        dead_letter_reason: Some(reason_code(pending.reason)),
                        ..Default::default()
                    },
                });
            }
            if self.is_deleted() {
                // Deleted while this attempt ran: what it kept went with it.
                continue;
            }
            // Kept whole, out of the ready list and its bulk charge: charged on its own until
            // it goes (a restored or delivered one already is).
            self.charge_unpacked(&pending.message);
            arm = arm.or(self.pending_dead_letters.keep(pending, now_ms));
        }
        if let (false, Some(store)) = (marks.is_empty(), &self.services.store) {
            store.submit_detached(marks);
        }
        self.forget_in_store(through);
        self.count_kept_dead_letters();
        arm
    }

    fn forget_in_store(&self, seqs: impl IntoIterator<Item = u64>) {
        let (Some(&queue), Some(store)) = (self.store_id.get(), &self.services.store) else {
            return;
        };
        let ops: Vec<_> = seqs
            .into_iter()
            .map(|seq| dwellmq_store::Op::Forget { queue, seq })
            .collect();
        if !ops.is_empty() {
            store.submit_detached(ops);
        }
    }

    /// Puts back dead-lettered messages the store kept for this queue (at start); the
    /// restore's tick routes them again.
    pub(crate) fn restore_dead_letters(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        kept: Vec<(Arc<Message>, DeathReason, u64)>,
    ) {
        if kept.is_empty() {
            return;
        }
        if !self.inner.lock().state.settings().dead_letter_at_least_once {
            // The policy that made them kept changed while the broker was down.
            let bytes: usize = kept.iter().map(|(m, ..)| m.body_len()).sum();
            tracing::info!(
                queue = %self.name,
                vhost = %self.vhost,
                deleted = kept.len(),
                bytes,
                "no longer dead-lettering at least once: kept dead-lettered messages deleted"
            );
            self.forget_in_store(kept.iter().map(|(.., seq)| *seq));
            return;
        }
        let now_ms = self.services.clock.now_ms();
        let aftermath = Aftermath {
            keeps_dead_letters: true,
            ..Aftermath::default()
        };
        owner.carry_out(self, aftermath, now_ms);
        for (message, reason, seq) in kept {
            self.charge_unpacked(&message);
            self.pending_dead_letters.keep(
                PendingDeadLetter {
                    message,
                    reason,
                    died_at_ms: now_ms,
                    seq: Some(seq),
                    taken_by: Vec::new(),
                },
                // Due at the restore's tick.
                now_ms.saturating_sub(RETRY_INTERVAL_MS),
            );
        }
        self.count_kept_dead_letters();
    }

    /// Tells the queue's state how many it keeps: they count toward its length limits.
    fn count_kept_dead_letters(&self) {
        let (count, bytes) = self.pending_dead_letters.figures();
        self.inner
            .lock()
            .state
            .set_kept_dead_letters(count as u64, bytes);
    }
}
