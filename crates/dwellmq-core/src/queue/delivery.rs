//! Handing messages out: the live head, the consumer that gets it, and the store hooks a
//! delivery or a removal needs.

use super::*;

impl<C: Clone> QueueState<C> {
    /// The head message that has not expired (expired ones met on the way die); `fresh` is a
    /// TTL-0 message published at this instant, which may still be delivered.
    pub(super) fn pop_live(
        &mut self,
        now_ms: u64,
        fresh: Option<u64>,
        fx: &mut Effects<C>,
    ) -> Option<QueueEntry> {
        loop {
            let entry = self.messages.pop()?;
            self.unindex(&entry);
            let expired = entry.expires_at.is_some_and(|at| at <= now_ms);
            if expired && fresh != Some(entry.seq) {
                self.forget(&entry, fx);
                self.dead_letter(entry.message, DeathReason::Expired, fx);
                continue;
            }
            return Some(entry);
        }
    }

    /// Whether a consumer could take a message now (the active one, with a single active
    /// consumer).
    pub(super) fn a_consumer_can_take(&self) -> bool {
        if self.settings.single_active_consumer {
            return self
                .consumers
                .iter()
                .min_by_key(|c| c.since)
                .is_some_and(|active| active.slot.credit.can_take());
        }
        self.consumers.iter().any(|c| c.slot.credit.can_take())
    }

    /// The consumer that gets the next message: the highest priority group with a consumer that
    /// has credit, round-robin within the group.
    pub(super) fn pick_consumer(&mut self) -> Option<usize> {
        if self.settings.single_active_consumer {
            // Only the longest-subscribed consumer is active; the others wait their turn.
            let (index, active) = self
                .consumers
                .iter()
                .enumerate()
                .min_by_key(|(_, c)| c.since)?;
            return active.slot.credit.can_take().then_some(index);
        }
        let mut group_start = 0;
        while group_start < self.consumers.len() {
            let priority = self.consumers[group_start].slot.priority;
            let group_len = self.consumers[group_start..]
                .iter()
                .take_while(|c| c.slot.priority == priority)
                .count();
            for attempt in 0..group_len {
                let index = group_start + (self.next_consumer + attempt) % group_len;
                if self.consumers[index].slot.credit.can_take() {
                    self.next_consumer = index - group_start + 1;
                    return Some(index);
                }
            }
            group_start += group_len;
        }
        None
    }

    pub(super) fn deliver_ready(&mut self, now_ms: u64, fresh: Option<u64>, fx: &mut Effects<C>) {
        while !self.messages.is_empty() {
            let Some(index) = self.pick_consumer() else {
                break;
            };
            let Some(entry) = self.pop_live(now_ms, fresh, fx) else {
                break;
            };
            self.messages.note_taken(entry.seq);
            let slot = &self.consumers[index].slot;
            slot.credit.took();
            // Counted against the connection's output bound until the shell has buffered it
            // (see `Congestion`): a backlog is not decided in one go past that bound.
            slot.credit
                .channel
                .congestion
                .reserve(credit::delivery_reservation(entry.message.body.len()));
            let forget = slot.credit.no_ack && self.is_persisted(&entry.message);
            if !slot.credit.no_ack {
                // Fields, not `count_unacked`: `slot` borrows the consumers.
                self.unacked += 1;
                self.unacked_bytes += entry.message.body.len() as u64;
                self.note_delivery(&entry, fx);
            }
            fx.push(Effect::Deliver {
                consumer: slot.handle.clone(),
                entry,
                forget,
            });
        }
    }

    pub(super) fn is_persisted(&self, message: &Message) -> bool {
        self.settings.persists(message)
    }

    /// A persisted message goes out for the first time to a consumer that must ack it: a
    /// restart must bring it back redelivered. Published to a waiting consumer, its persist
    /// says so; otherwise a state write does (dropped by the store if an ack follows soon).
    pub(super) fn note_delivery(&self, entry: &QueueEntry, fx: &mut Effects<C>) {
        if entry.redelivered || !self.is_persisted(&entry.message) || fx.mark_delivered(entry.seq) {
            return;
        }
        self.note_state(entry, None, fx);
    }

    /// A persisted message's state changed: what a restart must bring back.
    pub(super) fn note_state(
        &self,
        entry: &QueueEntry,
        ready_at: Option<u64>,
        fx: &mut Effects<C>,
    ) {
        if self.is_persisted(&entry.message) {
            fx.push(Effect::SetState {
                seq: entry.seq,
                state: DeliveryMark {
                    redelivered: true,
                    delivery_count: entry.delivery_count,
                    acquired_count: entry.acquired_count,
                    ready_at,
                },
            });
        }
    }

    pub(super) fn forget(&self, entry: &QueueEntry, fx: &mut Effects<C>) {
        if self.is_persisted(&entry.message) {
            fx.push(Effect::Forget { seq: entry.seq });
        }
    }
}
