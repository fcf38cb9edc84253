//! At-least-once dead-lettering (`x-dead-letter-strategy: at-least-once` on a quorum queue with
//! `x-overflow: reject-publish`): a dead-lettered message that not every target took stays in
//! its source queue, never deliverable again, until a retry gets it into all of them.

use std::collections::VecDeque;
use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::queue::DeathReason;
use dwellmq_core::Message;
use parking_lot::Mutex;

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

#[derive(Default)]
struct Kept {
    messages: VecDeque<PendingDeadLetter>,
    bytes: u64,
    /// When they are routed again (none kept, none armed).
    retry_at: Option<u64>,
}

/// A source queue's kept dead-lettered messages.
#[derive(Default)]
pub(crate) struct PendingDeadLetters {
    kept: Mutex<Kept>,
}

impl PendingDeadLetters {
    /// Keeps `pending` for a retry; returns the time to arm when no retry was armed yet.
    pub(crate) fn keep(&self, pending: PendingDeadLetter, now_ms: u64) -> Option<u64> {
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
    pub(crate) fn take(&self, now_ms: u64, now: bool) -> Vec<PendingDeadLetter> {
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
    pub(crate) fn figures(&self) -> (usize, u64) {
        let kept = self.kept.lock();
        (kept.messages.len(), kept.bytes)
    }

    /// Up to `limit` kept messages, oldest first (the test double's inspection).
    pub(crate) fn messages(&self, limit: usize) -> Vec<Arc<Message>> {
        let kept = self.kept.lock();
        kept.messages
            .iter()
            .take(limit)
            .map(|p| Arc::clone(&p.message))
            .collect()
    }

    /// The queue is gone: what it kept goes with it (the store drops its records with it).
    pub(crate) fn clear(&self) {
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
