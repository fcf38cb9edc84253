//! A queue as a driven state machine: commands carry `now` in, effects come out.
//!
//! The queue keeps its ready messages in order (priority levels included), counts what it has
//! delivered and not yet had settled, chooses consumers (highest `x-priority` first, round-robin
//! within a priority, exclusive consumers), and applies TTL, length limits, dead-lettering and
//! `x-expires`. It never writes a frame, never routes, never reads a clock: it says what must
//! happen through [`Effects`], and the caller does it. `C` is the caller's handle for a
//! consumer, handed back in [`Effect::Deliver`].

mod credit;
mod effects;
#[cfg(test)]
mod paging_tests;
#[cfg(test)]
mod proptests;
mod settings;
#[cfg(test)]
mod spill_tests;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use credit::{delivery_reservation, ChannelCredit, Congestion, ConsumerCredit};
pub use effects::{DeathReason, DeliveryMark, Effect, Effects};
pub use settings::{DeadLetterTarget, ExpiryMode, QueueSettings};

use crate::arguments::{parse_expiration, Overflow, RetryKind};
use crate::message::Message;
use crate::paging::{Page, PageRequest, PagedRun, Paging};
use crate::queue_messages::{QueueEntry, QueueMessages, ReadyMessage};

/// A consumer attached to a queue.
#[derive(Debug)]
pub struct ConsumerSlot<C> {
    /// Unique among the queue's consumers; names it in [`QueueState::cancel`].
    pub id: u64,
    /// The caller's handle, returned in deliver effects.
    pub handle: C,
    /// `x-priority`.
    pub priority: i64,
    /// `exclusive`: no other consumer may share the queue.
    pub exclusive: bool,
    /// Its prefetch and its channel's.
    pub credit: Arc<ConsumerCredit>,
}

/// A consumer as the queue keeps it: the slot and when it subscribed.
#[derive(Debug)]
struct Attached<C> {
    slot: ConsumerSlot<C>,
    /// Subscription order (`x-single-active-consumer` gives the oldest the messages).
    since: u64,
}

/// Why a delivered message comes back to its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReturnCause {
    /// `basic.reject` with requeue: a failed attempt.
    Rejected,
    /// `basic.nack` with requeue, or `basic.recover`: handed back, not failed.
    Nacked,
    /// The consumer's channel or connection closed with the message unacked: a failed attempt.
    ConsumerGone,
}

impl ReturnCause {
    /// Whether the return counts as a failed delivery (quorum queues' `delivery-count`).
    pub fn is_failure(self) -> bool {
        matches!(self, ReturnCause::Rejected | ReturnCause::ConsumerGone)
    }
}

/// The header that sets the exact time (ms since the epoch) a returned message of a quorum
/// queue is ready again: dwellmq's 0-9-1 form of RabbitMQ's AMQP 1.0 annotation.
pub const DELIVERY_TIME_HEADER: &str = "x-opt-delivery-time";

/// What became of a published message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// Taken (delivered, enqueued, or expired/dead-lettered as its TTL required).
    Accepted,
    /// Refused by `x-overflow` = `reject-publish` or `reject-publish-dlx` (nack under confirms).
    Rejected,
}

/// Why a consumer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumeRefused {
    /// The queue is deleted.
    Deleted,
    /// An exclusive consumer holds the queue, or an exclusive one asked to share it.
    ExclusiveInUse,
}

/// What removing a consumer left behind.
#[derive(Debug)]
pub struct Cancelled<C> {
    /// The removed consumer's handle, if it was attached.
    pub handle: Option<C>,
    /// The queue is auto-delete and has just lost its last consumer.
    pub should_auto_delete: bool,
}

/// One queue's state.
#[derive(Debug)]
pub struct QueueState<C> {
    settings: QueueSettings,
    auto_delete: bool,
    messages: QueueMessages,
    /// Ready messages with a deadline: (expires_at, seq) → priority level.
    expiring: BTreeMap<(u64, u64), usize>,
    /// Returned messages waiting for a delayed retry, by (ready_at, seq): invisible to
    /// consumers and `basic.get`, counted toward the length limits.
    retrying: BTreeMap<(u64, u64), QueueEntry>,
    retrying_bytes: u64,
    /// Dead-lettered messages the shell keeps until every target takes them (at-least-once
    /// dead-lettering), and their bytes: as in RabbitMQ's quorum queues they count toward the
    /// length limits, so that a `reject-publish` source refuses new messages meanwhile.
    kept_dead_letters: (u64, u64),
    /// The earliest tick already asked for.
    armed_at: Option<u64>,
    consumers: Vec<Attached<C>>,
    next_subscription: u64,
    /// Round-robin cursor within a priority group.
    next_consumer: usize,
    /// Delivered and not yet settled.
    unacked: usize,
    /// Body bytes of those.
    unacked_bytes: u64,
    deleted: bool,
    /// An auto-delete queue is deleted when its last consumer goes, once it has had one.
    had_consumer: bool,
    /// The last time the queue was used (`x-expires`): declared, consumed from, or read.
    last_used_ms: u64,
    expire_requested: bool,
    /// Set for a queue that leaves messages beyond this window in the store (see `paging`).
    paging: Option<Paging>,
    /// Numbers the runs: a purge or a delete ends one, and a page read for it is dropped.
    generation: u64,
    /// A page read asked for and not handed back yet.
    reading: bool,
    /// A `basic.get` found nothing in memory while a run waits in the store.
    wants_page: bool,
}

impl<C: Clone> QueueState<C> {
    /// A new, empty queue declared at `now_ms`.
    pub fn new(settings: QueueSettings, auto_delete: bool, now_ms: u64) -> Self {
        QueueState {
            messages: QueueMessages::with_max_priority(settings.max_priority),
            settings,
            auto_delete,
            expiring: BTreeMap::new(),
            retrying: BTreeMap::new(),
            retrying_bytes: 0,
            kept_dead_letters: (0, 0),
            armed_at: None,
            consumers: Vec::new(),
            next_subscription: 0,
            next_consumer: 0,
            unacked: 0,
            unacked_bytes: 0,
            deleted: false,
            had_consumer: false,
            last_used_ms: now_ms,
            expire_requested: false,
            paging: None,
            generation: 0,
            reading: false,
            wants_page: false,
        }
    }

    /// Lets the queue leave messages beyond `window` in the store: for a durable queue
    /// without priorities whose persistent messages the owner stores. Its owner then calls
    /// [`QueueState::page`] after each command.
    pub fn enable_paging(&mut self, window: Paging) {
        if self.settings.max_priority == 0 {
            self.paging = Some(window);
        }
    }

    /// As [`QueueState::enable_paging`], for a queue whose persistent messages the owner
    /// does not store (a transient or exclusive queue): its messages leave memory only when
    /// spilled ([`QueueState::spill`]).
    pub fn enable_spill_paging(&mut self, window: Paging) {
        self.messages.set_stores_persistent(false);
        self.enable_paging(window);
    }

    /// Whether the queue ever spilled a message (its spilled records may still exist).
    pub fn has_spilled(&self) -> bool {
        self.messages.has_spilled()
    }

    /// After a command, before [`QueueState::page`]: under memory pressure (`pressed`) the
    /// messages beyond the window the store does not have (never written, or `lost`: their
    /// write failed) are spilled ([`Effect::Spill`]), at most `budget` of them (the owner
    /// bounds what is in flight to the store);
    /// and the spilled records no longer needed are dropped ([`Effect::Unspill`]).
    pub fn spill(
        &mut self,
        pressed: bool,
        lost: impl Fn(u64) -> bool,
        budget: usize,
        fx: &mut Effects<C>,
    ) {
        let Some(window) = self.paging else {
            return;
        };
        for (from_seq, end_seq) in self.messages.take_unspilled() {
            fx.push(Effect::Unspill { from_seq, end_seq });
        }
        if pressed && !self.deleted {
            self.messages
                .spill(window, lost, budget, |seq, message, expires_at| {
                    fx.push(Effect::Spill {
                        seq,
                        message,
                        expires_at,
                    });
                });
        }
    }

    /// The run of messages left in the store only, if any.
    pub fn paged_run(&self) -> Option<PagedRun> {
        self.messages.paged_run()
    }

    /// Whether the stored message at `seq` is one of the run's (see
    /// [`QueueMessages::in_run`]).
    pub fn in_paged_run(&self, seq: u64) -> bool {
        self.messages.in_run(seq)
    }

    /// The messages left in the store only: (count, body octets).
    pub fn paged_out(&self) -> (u64, u64) {
        self.messages
            .paged_run()
            .map_or((0, 0), |run| (run.count, run.bytes))
    }

    /// After a command: leaves what lies beyond the window in the store (the messages
    /// `stored` says are committed there), and asks for a page of the run when the messages
    /// in memory in front of the consumers run low (half the window) and someone waits for
    /// them (a consumer, or a `basic.get` that found none). The owner reads it off the
    /// queue's lock and hands it back with [`QueueState::page_in`].
    pub fn page(&mut self, stored: impl Fn(u64) -> bool) -> Option<PageRequest> {
        let window = self.paging?;
        let expiring = &mut self.expiring;
        self.messages.page_out(window, stored, |seq, at| {
            expiring.remove(&(at, seq));
        });
        // A drop-head limit the messages in memory cannot bring the queue under is enforced
        // as pages come back.
        let waited_for = !self.consumers.is_empty()
            || self.wants_page
            || (self.settings.overflow == Overflow::DropHead && self.over_length());
        if self.reading || self.deleted || !waited_for {
            return None;
        }
        self.page_request(window)
    }

    /// A page to read now whatever else is in flight, for a reader that needs `wanted`
    /// messages in memory (a `basic.get` that found none, the management API's get): `None`
    /// without a run, or with that many in memory.
    pub fn page_for(&mut self, wanted: usize) -> Option<PageRequest> {
        let window = self.paging?;
        let run = self.messages.paged_run()?;
        let head = self.messages.head_len();
        if head >= wanted || self.deleted {
            return None;
        }
        self.reading = true;
        Some(PageRequest {
            generation: self.generation,
            from_seq: run.first_seq,
            end_seq: run.end_seq,
            // A whole page at least: the next get finds it in memory.
            limit: (wanted - head).max(window.page_len()),
        })
    }

    fn page_request(&mut self, window: Paging) -> Option<PageRequest> {
        let run = self.messages.paged_run()?;
        let low = self.messages.head_len() < window.page_len()
            && self.messages.head_bytes() < window.window_bytes / 2;
        if !low {
            return None;
        }
        self.reading = true;
        Some(PageRequest {
            generation: self.generation,
            from_seq: run.first_seq,
            end_seq: run.end_seq,
            limit: window.page_len(),
        })
    }

    /// A page asked for by `request` (`None`: the read failed; the next command asks
    /// again): merged behind the messages in memory, then delivered as consumers can take
    /// it. A page of a run a purge or a delete ended is dropped.
    pub fn page_in(
        &mut self,
        request: PageRequest,
        page: Option<Page>,
        now_ms: u64,
        fx: &mut Effects<C>,
    ) {
        if request.generation != self.generation {
            return;
        }
        self.reading = false;
        let Some(page) = page else {
            return;
        };
        if self.deleted {
            return;
        }
        let expiring = &mut self.expiring;
        self.messages.page_in(page, request.from_seq, |seq, at| {
            expiring.insert((at, seq), 0);
        });
        self.deliver_ready(now_ms, None, fx);
        self.enforce_length(fx);
        self.arm(now_ms, fx);
    }

    /// Brings the queue back from the store at start without reading its messages: `run`
    /// counts them, and the first page is read when a consumer or a `basic.get` wants it.
    pub fn restore_paged(&mut self, run: PagedRun, now_ms: u64, fx: &mut Effects<C>) {
        self.messages.restore_run(run);
        self.arm(now_ms, fx);
    }

    /// The settings in force.
    pub fn settings(&self) -> &QueueSettings {
        &self.settings
    }

    /// Ready messages.
    pub fn ready(&self) -> usize {
        self.messages.len()
    }

    /// Body bytes of ready messages.
    pub fn ready_bytes(&self) -> u64 {
        self.messages.bytes()
    }

    /// The shell keeps `count` dead-lettered messages of `bytes` body bytes for this queue
    /// (at-least-once dead-lettering): a publish that they and the queue's messages would take
    /// past a `reject-publish` limit is refused.
    pub fn set_kept_dead_letters(&mut self, count: u64, bytes: u64) {
        self.kept_dead_letters = (count, bytes);
    }

    /// Messages waiting for a delayed retry.
    pub fn retrying(&self) -> usize {
        self.retrying.len()
    }

    /// When the next message waiting for a retry is ready again.
    pub fn next_retry_at(&self) -> Option<u64> {
        self.retrying.first_key_value().map(|(&(at, _), _)| at)
    }

    /// The messages waiting for a retry, with the time each is ready again, in that order.
    pub fn retrying_entries(&self) -> impl Iterator<Item = (u64, &QueueEntry)> {
        self.retrying.iter().map(|(&(at, _), e)| (at, e))
    }

    /// Delivered and not yet settled.
    pub fn unacked(&self) -> usize {
        self.unacked
    }

    /// Ready messages whose TTL is pending, and when the first of them expires.
    pub fn expiring(&self) -> (usize, Option<u64>) {
        let first = self.expiring.first_key_value().map(|(&(at, _), _)| at);
        (self.expiring.len(), first)
    }

    /// Body bytes of the messages delivered and not yet settled.
    pub fn unacked_bytes(&self) -> u64 {
        self.unacked_bytes
    }

    fn count_unacked(&mut self, entry: &QueueEntry) {
        self.unacked += 1;
        self.unacked_bytes += entry.message.body.len() as u64;
    }

    fn settle_unacked(&mut self, entry: &QueueEntry) {
        self.unacked = self.unacked.saturating_sub(1);
        self.unacked_bytes = self
            .unacked_bytes
            .saturating_sub(entry.message.body.len() as u64);
    }

    /// Attached consumers.
    pub fn consumer_count(&self) -> usize {
        self.consumers.len()
    }

    /// The consumers' handles, highest priority first.
    pub fn consumer_handles(&self) -> impl Iterator<Item = &C> {
        self.consumers.iter().map(|c| &c.slot.handle)
    }

    /// Whether the queue has been deleted.
    pub fn is_deleted(&self) -> bool {
        self.deleted
    }

    /// The ready messages, in no particular order (inspection).
    pub fn ready_entries(&self) -> impl Iterator<Item = ReadyMessage<'_>> {
        self.messages.iter()
    }

    /// Packs the ready messages that came in during the last command and stayed (see
    /// [`QueueMessages::settle`]). The shell calls it once a command's deliveries are carried
    /// out, as one of them may have been handed back ([`QueueState::undelivered`]).
    pub fn settle(&mut self) {
        self.messages.settle();
    }

    /// Octets the packed ready messages hold: the shell charges them to its memory accounting,
    /// as they carry no charge of their own.
    pub fn packed_footprint(&self) -> u64 {
        self.messages.packed_footprint()
    }

    /// New settings (a policy changed). The queue's type, durability and priority levels stay
    /// as declared; a lower length limit takes effect at once, a new TTL applies to messages
    /// enqueued from now on, and the deadlines are armed again.
    pub fn set_settings(&mut self, settings: QueueSettings, now_ms: u64, fx: &mut Effects<C>) {
        let kept = (
            self.settings.max_priority,
            self.settings.durable,
            self.settings.queue_type,
        );
        if self.settings.expires.is_none() && settings.expires.is_some() {
            // Use was not tracked without an expiry: the period starts now.
            self.last_used_ms = now_ms;
        }
        self.settings = QueueSettings {
            max_priority: kept.0,
            durable: kept.1,
            queue_type: kept.2,
            ..settings
        };
        if self.settings.overflow == Overflow::DropHead {
            self.enforce_length(fx);
        }
        self.armed_at = None;
        self.arm(now_ms, fx);
    }

    /// Whether a command's outcome may depend on `now`: the queue has a TTL or `x-expires`,
    /// holds messages with a deadline or waiting for a retry, or is a quorum queue (a return
    /// may be delayed). When false, a caller may skip reading its clock for a command (not for
    /// `tick`) and pass any time; a publish of a message with an `expiration` needs the clock
    /// anyway.
    pub fn uses_clock(&self) -> bool {
        let s = &self.settings;
        s.message_ttl.is_some()
            || s.expires.is_some()
            || s.counts_deliveries()
            || !self.expiring.is_empty()
            || !self.retrying.is_empty()
    }

    /// Arms the first deadline of a queue that was just created (`x-expires`).
    pub fn start(&mut self, now_ms: u64, fx: &mut Effects<C>) {
        self.arm(now_ms, fx);
    }

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
        self.reading = false;
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

    fn ttl_of(&self, message: &Message) -> Option<u64> {
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

    /// When a returned message is ready again, if it must wait: the message's own
    /// `x-opt-delivery-time`, else the linear back-off min(min × max(1, delivery-count), max)
    /// for the returns the queue's retry type covers.
    fn retry_at(&self, entry: &QueueEntry, cause: ReturnCause, now_ms: u64) -> Option<u64> {
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
    fn take_retries(&mut self, up_to_ms: u64) -> usize {
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

    fn is_persisted(&self, message: &Message) -> bool {
        self.settings.persists(message)
    }

    /// A persisted message goes out for the first time to a consumer that must ack it: a
    /// restart must bring it back redelivered. Published to a waiting consumer, its persist
    /// says so; otherwise a state write does (dropped by the store if an ack follows soon).
    fn note_delivery(&self, entry: &QueueEntry, fx: &mut Effects<C>) {
        if entry.redelivered || !self.is_persisted(&entry.message) || fx.mark_delivered(entry.seq) {
            return;
        }
        self.note_state(entry, None, fx);
    }

    /// A persisted message's state changed: what a restart must bring back.
    fn note_state(&self, entry: &QueueEntry, ready_at: Option<u64>, fx: &mut Effects<C>) {
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

    fn forget(&self, entry: &QueueEntry, fx: &mut Effects<C>) {
        if self.is_persisted(&entry.message) {
            fx.push(Effect::Forget { seq: entry.seq });
        }
    }

    /// Messages and bytes the length limits count: ready ones and those waiting for a retry.
    fn length(&self) -> (u64, u64) {
        (
            (self.messages.len() + self.retrying.len()) as u64,
            self.messages.bytes() + self.retrying_bytes,
        )
    }

    fn would_overflow(&self, message: &Message) -> bool {
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

    fn over_length(&self) -> bool {
        let s = &self.settings;
        let (len, bytes) = self.length();
        s.max_length.is_some_and(|max| len > max)
            || s.max_length_bytes.is_some_and(|max| bytes > max)
    }

    /// `drop-head`: the oldest ready messages go until the queue is within its limits.
    fn enforce_length(&mut self, fx: &mut Effects<C>) {
        while self.over_length() {
            let Some(entry) = self.messages.pop() else {
                break;
            };
            self.unindex(&entry);
            self.forget(&entry, fx);
            self.dead_letter(entry.message, DeathReason::Maxlen, fx);
        }
    }

    fn dead_letter(&self, message: Arc<Message>, reason: DeathReason, fx: &mut Effects<C>) {
        if self.settings.dead_letter.is_some() {
            fx.push(Effect::DeadLetter { message, reason });
        } else {
            fx.push(Effect::Dropped { reason });
        }
    }

    fn put_back(&mut self, entry: QueueEntry) {
        if let Some(at) = entry.expires_at {
            let level = self.messages.level_of(&entry.message);
            self.expiring.insert((at, entry.seq), level);
        }
        self.messages.requeue(entry);
    }

    fn unindex(&mut self, entry: &QueueEntry) {
        if let Some(at) = entry.expires_at {
            self.expiring.remove(&(at, entry.seq));
        }
    }

    /// The head message that has not expired (expired ones met on the way die); `fresh` is a
    /// TTL-0 message published at this instant, which may still be delivered.
    fn pop_live(
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

    /// The consumer that gets the next message: the highest priority group with a consumer that
    /// has credit, round-robin within the group.
    fn pick_consumer(&mut self) -> Option<usize> {
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

    fn deliver_ready(&mut self, now_ms: u64, fresh: Option<u64>, fx: &mut Effects<C>) {
        while !self.messages.is_empty() {
            let Some(index) = self.pick_consumer() else {
                break;
            };
            let Some(entry) = self.pop_live(now_ms, fresh, fx) else {
                break;
            };
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

    /// Expired ready messages die: all that are due (on time), or those at the head.
    fn expire_due(&mut self, now_ms: u64, fx: &mut Effects<C>) {
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

    fn queue_expiry_deadline(&self) -> Option<u64> {
        let expires = self.settings.expires?;
        self.consumers
            .is_empty()
            .then(|| self.last_used_ms.saturating_add(expires))
    }

    /// Asks for a tick at the next deadline, unless an earlier one is already asked for.
    fn arm(&mut self, now_ms: u64, fx: &mut Effects<C>) {
        let message_deadline = match self.settings.expiry_mode {
            ExpiryMode::OnTime => self.expiring.first_key_value().map(|(&(at, _), _)| at),
            ExpiryMode::HeadOnly => self.messages.peek().and_then(|e| e.expires_at()),
        };
        let queue_deadline = if self.expire_requested {
            None
        } else {
            self.queue_expiry_deadline()
        };
        let Some(next) = [message_deadline, queue_deadline, self.next_retry_at()]
            .into_iter()
            .flatten()
            .min()
        else {
            return;
        };
        // A deadline already passed is served by the next tick as soon as possible.
        let next = next.max(now_ms);
        if self.armed_at.is_none_or(|armed| next < armed) {
            self.armed_at = Some(next);
            fx.push(Effect::Arm { at_ms: next });
        }
    }
}

/// The properties a redelivered message of a quorum queue carries, encoded: its own plus
/// `x-delivery-count` (failed attempts) and `x-acquired-count` (returns of any kind), each when
/// non-zero. `None` when the message goes out as published.
pub fn redelivery_properties(entry: &QueueEntry) -> Option<bytes::Bytes> {
    if entry.delivery_count == 0 && entry.acquired_count == 0 {
        return None;
    }
    let mut properties = entry.message.properties.clone();
    let headers = properties.headers.get_or_insert_with(Default::default);
    if entry.delivery_count > 0 {
        headers.insert(
            "x-delivery-count",
            dwellmq_codec::FieldValue::I64(i64::from(entry.delivery_count)),
        );
    }
    if entry.acquired_count > 0 {
        headers.insert(
            "x-acquired-count",
            dwellmq_codec::FieldValue::I64(i64::from(entry.acquired_count)),
        );
    }
    let mut encoded = bytes::BytesMut::with_capacity(entry.message.properties_encoded.len() + 48);
    properties.encode(&mut encoded);
    Some(encoded.freeze())
}
