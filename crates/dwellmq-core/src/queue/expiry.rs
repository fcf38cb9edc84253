//! Deadlines: message TTL, `x-expires`, delayed retries, and the one tick a queue asks for.

use super::*;

impl<C: Clone> QueueState<C> {
    pub(super) fn ttl_of(&self, message: &Message) -> Option<u64> {
        // Validated at publish; a value that does not parse here means no per-message TTL.
        let per_message = message
            .properties
            .expiration
            .as_ref()
            .and_then(|e| parse_expiration(e).ok());
        match (per_message, self.settings.message_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Expired ready messages die: all that are due (on time), or those at the head.
    pub(super) fn expire_due(&mut self, now_ms: u64, fx: &mut Effects<C>) {
        match self.settings.expiry_mode {
            ExpiryMode::OnTime => {
                while let Some((&(at, seq), &level)) = self.expiring.first_key_value() {
                    if at > now_ms {
                        break;
                    }
                    self.expiring.remove(&(at, seq));
                    if let Some(entry) = self.messages.remove(level, seq) {
                        self.forget(&entry, fx);
                        self.dead_letter(entry.message, DeathReason::Expired, fx);
                    }
                }
            }
            ExpiryMode::HeadOnly => {
                while self
                    .messages
                    .peek()
                    .and_then(|e| e.expires_at())
                    .is_some_and(|at| at <= now_ms)
                {
                    if let Some(entry) = self.messages.pop() {
                        self.unindex(&entry);
                        self.forget(&entry, fx);
                        self.dead_letter(entry.message, DeathReason::Expired, fx);
                    }
                }
            }
        }
    }

    pub(super) fn queue_expiry_deadline(&self) -> Option<u64> {
        let expires = self.settings.expires?;
        self.consumers
            .is_empty()
            .then(|| self.last_used_ms.saturating_add(expires))
    }

    /// Asks for a tick at the next deadline, unless an earlier one is already asked for.
    pub(super) fn arm(&mut self, now_ms: u64, fx: &mut Effects<C>) {
        let message_deadline = match self.settings.expiry_mode {
            ExpiryMode::OnTime => self.expiring.first_key_value().map(|(&(at, _), _)| at),
            ExpiryMode::HeadOnly => self.messages.peek().and_then(|e| e.expires_at()),
        };
        let queue_deadline = if self.expire_requested {
            None
        } else {
            self.queue_expiry_deadline()
        };
        let run_deadline = self.run_deadline(now_ms);
        let deadlines = [
            message_deadline,
            queue_deadline,
            self.next_retry_at(),
            run_deadline,
        ];
        let Some(next) = deadlines.into_iter().flatten().min() else {
            return;
        };
        // A deadline already passed is served by the next tick as soon as possible.
        let next = next.max(now_ms);
        if self.armed_at.is_none_or(|armed| next < armed) {
            self.armed_at = Some(next);
            fx.push(Effect::Arm { at_ms: next });
        }
    }

    pub(super) fn unindex(&mut self, entry: &QueueEntry) {
        if let Some(at) = entry.expires_at {
            self.expiring.remove(&(at, entry.seq));
        }
    }

    pub(super) fn put_back(&mut self, entry: QueueEntry) {
        if let Some(at) = entry.expires_at {
            let level = self.messages.level_of(&entry.message);
            self.expiring.insert((at, entry.seq), level);
        }
        self.messages.requeue(entry);
    }

    /// When a returned message is ready again, if it must wait: the message's own
    /// `x-opt-delivery-time`, else the linear back-off min(min × max(1, delivery-count), max)
    /// for the returns the queue's retry type covers.
    pub(super) fn retry_at(
        &self,
        entry: &QueueEntry,
        cause: ReturnCause,
        now_ms: u64,
    ) -> Option<u64> {
        let exact = entry
            .message
            .properties
            .headers
            .as_ref()
            .and_then(|h| h.get(DELIVERY_TIME_HEADER))
            .and_then(|v| v.as_integer())
            .and_then(|at| u64::try_from(at).ok());
        if let Some(at) = exact {
            return (at > now_ms).then_some(at);
        }
        let retry = &self.settings.delayed_retry;
        let delayed = match retry.kind {
            RetryKind::Disabled => false,
            RetryKind::All => true,
            RetryKind::Failed => cause.is_failure(),
            RetryKind::Returned => !cause.is_failure(),
        };
        if !delayed {
            return None;
        }
        let attempts = u64::from(entry.delivery_count.max(1));
        let delay = retry.min_ms.saturating_mul(attempts).min(retry.max_ms);
        Some(now_ms.saturating_add(delay))
    }

    /// Moves the messages whose retry is due by `up_to_ms` back to their places; returns how
    /// many.
    pub(super) fn take_retries(&mut self, up_to_ms: u64) -> usize {
        let mut released = 0;
        while let Some(entry) = self.retrying.first_entry() {
            if entry.key().0 > up_to_ms {
                break;
            }
            let entry = entry.remove();
            self.retrying_bytes -= entry.message.body_len() as u64;
            self.put_back(entry);
            released += 1;
        }
        released
    }
}
