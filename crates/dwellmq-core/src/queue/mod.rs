//! A queue as a driven state machine: commands carry `now` in, effects come out.
//!
//! The queue keeps its ready messages in order (priority levels included), counts what it has
//! delivered and not yet had settled, chooses consumers (highest `x-priority` first, round-robin
//! within a priority, exclusive consumers), and applies TTL, length limits, dead-lettering and
//! `x-expires`. It never writes a frame, never routes, never reads a clock: it says what must
//! happen through [`Effects`], and the caller does it. `C` is the caller's handle for a
//! consumer, handed back in [`Effect::Deliver`].

mod commands;
mod credit;
mod delivery;
mod effects;
mod expiry;
mod limits;
mod paging;
#[cfg(test)]
mod paging_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod run_expiry_tests;
mod settings;
#[cfg(test)]
mod spill_tests;
mod store_progress;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use credit::{delivery_reservation, ChannelCredit, Congestion, ConsumerCredit};
pub use effects::{DeathReason, DeliveryMark, Effect, Effects};
pub use paging::{WriteProgress, DEFERRED_READ_MS, READ_RETRY_MS};
pub use settings::{DeadLetterTarget, ExpiryMode, QueueSettings};
pub use store_progress::StoreProgress;

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
    /// A message came back outside a command (`undelivered`): `settle` asks for a tick.
    rearm: bool,
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
    /// Reads of the run asked for and not handed back yet.
    reads_in_flight: u32,
    /// A read of the run failed: asked again at this time.
    read_retry_at: Option<u64>,
    /// Restored with a run whose deadlines are not known: read for them from the first
    /// tick on (see [`QueueState::restore_paged`]).
    awaiting_tick: bool,
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
            rearm: false,
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
            reads_in_flight: 0,
            read_retry_at: None,
            awaiting_tick: false,
            wants_page: false,
        }
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
    /// [`QueueMessages::settle`]), and asks for a tick again if a message handed back
    /// ([`QueueState::undelivered`]) needs one. The shell calls it once a command's
    /// deliveries are carried out.
    pub fn settle(&mut self, now_ms: u64, fx: &mut Effects<C>) {
        self.messages.settle();
        if std::mem::take(&mut self.rearm) {
            self.arm(now_ms, fx);
        }
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
            || self.messages.run_may_expire()
    }

    /// Arms the first deadline of a queue that was just created (`x-expires`).
    pub fn start(&mut self, now_ms: u64, fx: &mut Effects<C>) {
        self.arm(now_ms, fx);
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
