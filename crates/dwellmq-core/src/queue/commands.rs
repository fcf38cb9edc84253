//! The commands a queue takes: each carries `now` in and leaves its effects in the sink.

use super::*;

impl<C: Clone> QueueState<C> {
    /// A message routed to this queue.
    pub fn publish(
        &mut self,
        message: Arc<Message>,
        now_ms: u64,
        fx: &mut Effects<C>,
    ) -> PublishOutcome {
        if self.deleted {
            return PublishOutcome::Accepted;
        }
        if self.settings.overflow != Overflow::DropHead && self.would_overflow(&message) {
            if self.settings.overflow == Overflow::RejectPublishDlx {
                self.dead_letter(message, DeathReason::Maxlen, fx);
            }
            return PublishOutcome::Rejected;
        }
        let expires_at = self.ttl_of(&message).map(|ttl| now_ms.saturating_add(ttl));
        let mut fresh = None;
        if expires_at == Some(now_ms) {
            // TTL 0: delivered only if a consumer can take it at once, else it dies now.
            if !self.messages.is_empty() || self.pick_consumer().is_none() {
                self.dead_letter(message, DeathReason::Expired, fx);
                return PublishOutcome::Accepted;
            }
        }
        let persist = self.is_persisted(&message).then(|| Arc::clone(&message));
        let level = self.messages.level_of(&message);
        let seq = self.messages.push_expiring(message, expires_at);
        if let Some(message) = persist {
            fx.push(Effect::Persist {
                seq,
                message,
                expires_at,
                delivered: false,
            });
        }
        if let Some(at) = expires_at {
            self.expiring.insert((at, seq), level);
            if at == now_ms {
                fresh = Some(seq);
            }
        }
        self.deliver_ready(now_ms, fresh, fx);
        self.enforce_length(fx);
        self.arm(now_ms, fx);
        PublishOutcome::Accepted
    }

    /// Puts back messages read from the store at start, in queue order, each at its stored
    /// position (or waiting for its delayed retry until the time given with it), and makes
    /// `next_seq` the position of the next message published. No store effect comes out for
    /// them (they are stored). Nothing expires here: the caller ticks the queue once every
    /// definition is back, so that messages that expired while the broker was down reach a
    /// dead-letter exchange whose bindings are restored after the queue.
    pub fn restore(
        &mut self,
        entries: impl IntoIterator<Item = (QueueEntry, Option<u64>)>,
        next_seq: u64,
        now_ms: u64,
        fx: &mut Effects<C>,
    ) {
        for (entry, retry_at) in entries {
            self.messages.skip_to(entry.seq.saturating_add(1));
            if let Some(at) = retry_at.filter(|&at| at > now_ms) {
                self.retrying_bytes += entry.message.body_len() as u64;
                self.retrying.insert((at, entry.seq), entry);
                continue;
            }
            let (seq, expires_at) = (entry.seq, entry.expires_at);
            let level = self.messages.level_of(&entry.message);
            self.messages.restore(entry);
            if let Some(at) = expires_at {
                self.expiring.insert((at, seq), level);
            }
        }
        self.messages.skip_to(next_seq);
        self.deliver_ready(now_ms, None, fx);
        self.arm(now_ms, fx);
    }

    /// Adds a consumer and delivers what it can take.
    pub fn consume(
        &mut self,
        slot: ConsumerSlot<C>,
        now_ms: u64,
        fx: &mut Effects<C>,
    ) -> Result<(), ConsumeRefused> {
        self.can_consume(slot.exclusive)?;
        let at = self
            .consumers
            .iter()
            .position(|c| c.slot.priority < slot.priority)
            .unwrap_or(self.consumers.len());
        let since = self.next_subscription;
        self.next_subscription += 1;
        self.consumers.insert(at, Attached { slot, since });
        self.had_consumer = true;
        self.last_used_ms = now_ms;
        self.deliver_ready(now_ms, None, fx);
        // Head-only expiry waits for the head: a delivery may have brought another there.
        self.arm(now_ms, fx);
        Ok(())
    }

    /// Whether a consumer (exclusive or not) would be accepted now.
    pub fn can_consume(&self, exclusive: bool) -> Result<(), ConsumeRefused> {
        if self.deleted {
            return Err(ConsumeRefused::Deleted);
        }
        let exclusive_held = self.consumers.iter().any(|c| c.slot.exclusive);
        if exclusive_held || (exclusive && !self.consumers.is_empty()) {
            return Err(ConsumeRefused::ExclusiveInUse);
        }
        Ok(())
    }

    /// Removes consumer `id`.
    pub fn cancel(&mut self, id: u64, now_ms: u64, fx: &mut Effects<C>) -> Cancelled<C> {
        let Some(at) = self.consumers.iter().position(|c| c.slot.id == id) else {
            return Cancelled {
                handle: None,
                should_auto_delete: false,
            };
        };
        let slot = self.consumers.remove(at).slot;
        self.last_used_ms = now_ms;
        let should_auto_delete =
            self.auto_delete && self.had_consumer && self.consumers.is_empty() && !self.deleted;
        self.arm(now_ms, fx);
        Cancelled {
            handle: Some(slot.handle),
            should_auto_delete,
        }
    }

    /// Delivers again what consumers can take (credit came back: an ack elsewhere on the
    /// channel, qos, flow, a drained socket).
    pub fn drain(&mut self, now_ms: u64, fx: &mut Effects<C>) {
        self.deliver_ready(now_ms, None, fx);
        self.arm(now_ms, fx);
    }

    /// `basic.get`: the head message, if any, and how many remain ready. `no_ack` messages are
    /// settled at once; the others count as unacked.
    pub fn get(
        &mut self,
        no_ack: bool,
        now_ms: u64,
        fx: &mut Effects<C>,
    ) -> Option<(QueueEntry, usize)> {
        self.last_used_ms = now_ms;
        let entry = self.pop_live(now_ms, None, fx);
        if let Some(entry) = &entry {
            self.messages.note_taken(entry.seq);
        }
        self.wants_page = entry.is_none() && self.messages.paged_run().is_some();
        if let Some(entry) = &entry {
            if no_ack {
                self.forget(entry, fx);
            } else {
                self.count_unacked(entry);
                self.note_delivery(entry, fx);
            }
        }
        self.arm(now_ms, fx);
        entry.map(|e| (e, self.messages.len()))
    }

    /// Delivered messages were acked.
    pub fn ack<'a>(
        &mut self,
        entries: impl IntoIterator<Item = &'a QueueEntry>,
        now_ms: u64,
        fx: &mut Effects<C>,
    ) {
        for entry in entries {
            self.settle_unacked(entry);
            self.forget(entry, fx);
        }
        self.deliver_ready(now_ms, None, fx);
        self.arm(now_ms, fx);
    }

    /// Delivered messages were rejected without requeue: dead-lettered (reason `rejected`).
    pub fn reject(
        &mut self,
        entries: impl IntoIterator<Item = QueueEntry>,
        now_ms: u64,
        fx: &mut Effects<C>,
    ) {
        for entry in entries {
            self.settle_unacked(&entry);
            self.forget(&entry, fx);
            self.dead_letter(entry.message, DeathReason::Rejected, fx);
        }
        self.deliver_ready(now_ms, None, fx);
        self.arm(now_ms, fx);
    }

    /// Delivered messages come back (nack/reject with requeue, recover, a consumer's channel
    /// closed): marked redelivered, at their original positions, keeping their expiry. A quorum
    /// queue counts the attempt, dead-letters a message past its delivery limit, and holds one
    /// for a delayed retry when its settings (or the message's `x-opt-delivery-time`) say so.
    pub fn requeue(
        &mut self,
        entries: impl IntoIterator<Item = QueueEntry>,
        cause: ReturnCause,
        now_ms: u64,
        fx: &mut Effects<C>,
    ) {
        for mut entry in entries {
            self.settle_unacked(&entry);
            if self.deleted {
                continue;
            }
            entry.redelivered = true;
            entry.acquired_count += 1;
            if self.settings.counts_deliveries() {
                if cause.is_failure() {
                    entry.delivery_count += 1;
                    // Checked before any retry delay.
                    let limit = self.settings.delivery_limit;
                    if limit.is_some_and(|limit| u64::from(entry.delivery_count) > limit) {
                        self.forget(&entry, fx);
                        self.dead_letter(entry.message, DeathReason::DeliveryLimit, fx);
                        continue;
                    }
                }
                let ready_at = self.retry_at(&entry, cause, now_ms);
                // The counts (and a retry's time) must survive a restart.
                self.note_state(&entry, ready_at, fx);
                if let Some(ready_at) = ready_at {
                    self.retrying_bytes += entry.message.body_len() as u64;
                    self.retrying.insert((ready_at, entry.seq), entry);
                    continue;
                }
            }
            self.put_back(entry);
        }
        // As RabbitMQ's `requeue_and_run`: a drop-head limit the returns went past drops
        // the head before anything is delivered again.
        self.enforce_length(fx);
        self.deliver_ready(now_ms, None, fx);
        self.arm(now_ms, fx);
    }

    /// Every message waiting for a retry is ready at once (an operator's request).
    pub fn release_retries(&mut self, now_ms: u64, fx: &mut Effects<C>) -> usize {
        let released = self.take_retries(u64::MAX);
        self.deliver_ready(now_ms, None, fx);
        self.arm(now_ms, fx);
        released
    }

    /// A deliver effect could not be carried out (the channel closed meanwhile): the message
    /// goes back as if never delivered.
    pub fn undelivered(&mut self, credit: &ConsumerCredit, entry: QueueEntry) {
        if !credit.no_ack {
            credit.settled(1);
            self.settle_unacked(&entry);
        }
        if !self.deleted {
            self.put_back(entry);
            // Its deadline may come before the one asked for (see `settle`).
            self.rearm = true;
        }
    }

    /// Drops every ready message and every message waiting for a retry; returns how many.
    pub fn purge(&mut self, fx: &mut Effects<C>) -> usize {
        if self.settings.durable {
            let quorum = self.settings.counts_deliveries();
            for ready in self.messages.iter() {
                if quorum || ready.is_persistent() {
                    fx.push(Effect::Forget { seq: ready.seq() });
                }
            }
            for entry in self.retrying.values() {
                if self.settings.persists(&entry.message) {
                    fx.push(Effect::Forget { seq: entry.seq });
                }
            }
            if let Some(run) = self.messages.paged_run() {
                fx.push(Effect::ForgetRun {
                    from_seq: run.first_seq,
                    end_seq: run.end_seq,
                });
            }
        }
        // A page read for the run now ended is dropped when it comes back.
        self.generation += 1;
        self.reads_in_flight = 0;
        self.read_retry_at = None;
        self.wants_page = false;
        self.expiring.clear();
        let retrying = self.retrying.len();
        self.retrying.clear();
        self.retrying_bytes = 0;
        self.messages.purge() + retrying
    }

    /// The queue is redeclared: it counts as used (`x-expires`).
    pub fn redeclared(&mut self, now_ms: u64, fx: &mut Effects<C>) {
        self.last_used_ms = now_ms;
        self.arm(now_ms, fx);
    }

    /// Marks the queue deleted, drops its messages, and returns how many there were and its
    /// consumers (to notify them).
    pub fn delete(&mut self, fx: &mut Effects<C>) -> (usize, Vec<C>) {
        self.deleted = true;
        let count = self.purge(fx);
        let consumers = self.consumers.drain(..).map(|c| c.slot.handle).collect();
        (count, consumers)
    }

    /// It is now `now_ms`: expire what is due and check `x-expires`.
    pub fn tick(&mut self, now_ms: u64, fx: &mut Effects<C>) {
        if self.armed_at.is_some_and(|at| at <= now_ms) {
            self.armed_at = None;
        }
        if self.deleted {
            return;
        }
        // Every definition is back (see `restore_paged`): the run may be read for deadlines,
        // and what its first page brought past a length limit goes.
        if std::mem::take(&mut self.awaiting_tick) {
            self.enforce_length(fx);
        }
        self.expire_due(now_ms, fx);
        if self.take_retries(now_ms) > 0 {
            self.deliver_ready(now_ms, None, fx);
        }
        if let Some(deadline) = self.queue_expiry_deadline() {
            if deadline <= now_ms && !self.expire_requested {
                self.expire_requested = true;
                fx.push(Effect::Expire);
            }
        }
        self.arm(now_ms, fx);
    }
}
