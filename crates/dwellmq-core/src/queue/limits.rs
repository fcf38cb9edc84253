//! Length limits (`x-max-length`, `x-max-length-bytes`, `x-overflow`) and where dead
//! messages go.

use super::*;

impl<C: Clone> QueueState<C> {
    /// Messages and bytes the length limits count: ready ones and those waiting for a retry.
    pub(super) fn length(&self) -> (u64, u64) {
        (
            (self.messages.len() + self.retrying.len()) as u64,
            self.messages.bytes() + self.retrying_bytes,
        )
    }

    pub(super) fn would_overflow(&self, message: &Message) -> bool {
        let s = &self.settings;
        let (len, bytes) = self.length();
        // Only a refusal counts the kept dead letters: drop-head would drop ready messages for
        // them, which no strategy asks for.
        let (len, bytes) = (
            len + self.kept_dead_letters.0,
            bytes + self.kept_dead_letters.1,
        );
        s.max_length.is_some_and(|max| len + 1 > max)
            || s.max_length_bytes
                .is_some_and(|max| bytes + message.body_len() as u64 > max)
    }

    pub(super) fn over_length(&self) -> bool {
        let s = &self.settings;
        let (len, bytes) = self.length();
        s.max_length.is_some_and(|max| len > max)
            || s.max_length_bytes.is_some_and(|max| bytes > max)
    }

    /// `drop-head`: the oldest ready messages go until the queue is within its limits.
    pub(super) fn enforce_length(&mut self, fx: &mut Effects<C>) {
        // The reject-publish modes refuse new messages; they never drop ready ones (a queue
        // over its limit through requeues stays so until consumers take them).
        if self.settings.overflow != Overflow::DropHead {
            return;
        }
        while self.over_length() {
            let Some(entry) = self.messages.pop() else {
                break;
            };
            self.unindex(&entry);
            self.forget(&entry, fx);
            self.dead_letter(entry.message, DeathReason::Maxlen, fx);
        }
    }

    pub(super) fn dead_letter(
        &self,
        message: Arc<Message>,
        reason: DeathReason,
        fx: &mut Effects<C>,
    ) {
        if self.settings.dead_letter.is_some() {
            fx.push(Effect::DeadLetter { message, reason });
        } else {
            fx.push(Effect::Dropped { reason });
        }
    }
}
