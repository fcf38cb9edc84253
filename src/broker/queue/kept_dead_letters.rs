//! At-least-once dead-lettering, the source queue's side: what not every target took stays
//! here (see `dead_letter::pending`), marked in the store, and is routed again on the queue's
//! tick or when a binding is added; its store record goes in the commit of its last copies.

use std::sync::{Arc, Weak};

use dwellmq_core::queue::{DeadLetterTarget, DeathReason};
use dwellmq_core::Message;

use super::{Died, Queue};
use crate::broker::dead_letter::pending::{self, PendingDeadLetter};

impl Queue {
    /// Dead-letters at least once: what not every target takes now is kept here, marked in the
    /// store, and routed again later; what they all took leaves the store in the commit of
    /// their copies (the caller's store group).
    pub(super) fn dead_letter_at_least_once(
        self: &Arc<Self>,
        target: &DeadLetterTarget,
        dead: Vec<Died>,
        now_ms: u64,
    ) {
        let pending = dead.into_iter().map(|died| {
            self.runtime.deaths.dead_lettered(died.reason);
            PendingDeadLetter {
                message: died.message,
                reason: died.reason,
                died_at_ms: now_ms,
                seq: died.seq,
                taken_by: Vec::new(),
            }
        });
        self.attempt_dead_letters(target, pending, now_ms, true);
    }

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
        was_at_least_once: bool,
        at_least_once: bool,
        target_changed: bool,
    ) {
        match (was_at_least_once, at_least_once) {
            (true, false) => self.drop_kept_dead_letters("no longer dead-lettering at least once"),
            (true, true) if target_changed => self.retry_dead_letters(true),
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

    /// Routes kept dead-lettered messages once more (see [`pending`]): when their retry is due,
    /// or at once with `now` (a binding was added).
    pub(crate) fn retry_dead_letters(self: &Arc<Self>, now: bool) {
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
        let now_ms = self.runtime.clock.now_ms();
        let due = self.pending_dead_letters.take(now_ms, now);
        if due.is_empty() {
            return;
        }
        // Their removal and their copies in the targets commit together.
        let _group = match (self.store_id.get(), &self.runtime.store) {
            (Some(_), Some(store)) => Some(store.group()),
            _ => None,
        };
        self.attempt_dead_letters(&target, due, now_ms, false);
    }

    fn attempt_dead_letters(
        self: &Arc<Self>,
        target: &DeadLetterTarget,
        pending: impl IntoIterator<Item = PendingDeadLetter>,
        now_ms: u64,
        first: bool,
    ) {
        let Some(vhost) = self.home.get().and_then(Weak::upgrade) else {
            return;
        };
        let mut done = Vec::new();
        let mut marks = Vec::new();
        let mut arm = None;
        for mut p in pending {
            let death = crate::broker::dead_letter::Death {
                vhost: &vhost,
                runtime: &self.runtime,
                queue: &self.name,
                target,
                message: &p.message,
                reason: p.reason,
                at_ms: p.died_at_ms,
            };
            let through = crate::broker::dead_letter::attempt_once_each(death, &mut p.taken_by);
            if through {
                done.extend(p.seq);
                continue;
            }
            if let (true, Some(seq), Some(&queue)) = (first, p.seq, self.store_id.get()) {
                marks.push(dwellmq_store::Op::SetState {
                    queue,
                    seq,
                    state: dwellmq_store::DeliveryState {
                        dead_letter_reason: Some(pending::reason_code(p.reason)),
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
            self.charge_unpacked(&p.message);
            arm = arm.or(self.pending_dead_letters.keep(p, now_ms));
        }
        if let (false, Some(store)) = (marks.is_empty(), &self.runtime.store) {
            store.submit_detached(marks);
        }
        self.forget_in_store(done);
        self.count_kept_dead_letters();
        if arm.is_some() {
            vhost.note_keeping_dead_letters(self);
        }
        if let Some(at) = arm {
            // The scheduler wakes its timer itself when this is its earliest deadline.
            self.arm(at);
        }
    }

    fn forget_in_store(&self, seqs: impl IntoIterator<Item = u64>) {
        let (Some(&queue), Some(store)) = (self.store_id.get(), &self.runtime.store) else {
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
        if let Some(vhost) = self.home.get().and_then(Weak::upgrade) {
            vhost.note_keeping_dead_letters(self);
        }
        let now_ms = self.runtime.clock.now_ms();
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
                now_ms.saturating_sub(pending::RETRY_INTERVAL_MS),
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
