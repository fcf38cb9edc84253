//! A queue in a vhost: its declaration, and core's queue state machine behind a lock.
//!
//! Every operation runs one command on [`QueueState`] with the current time and then carries out
//! its effects: deliveries while the lock is still held (so each consumer sees queue order),
//! dead letters, deadlines and expiry after it is released (dead letters route through the
//! vhost, possibly back into this queue).

use std::sync::{Arc, OnceLock, Weak};

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::arguments::{QueueArguments, QueueType};
use dwellmq_core::paging::{Page, PageRequest, PagedRun};
use dwellmq_core::policy::PolicyDefinition;
use dwellmq_core::queue::{
    Cancelled, ConsumeRefused, ConsumerSlot, DeadLetterTarget, DeathReason, Effect, Effects,
    PublishOutcome, QueueSettings, QueueState, ReturnCause,
};
use dwellmq_core::{BrokerError, BrokerResult, Message, QueueEntry, SpilledMessage};
use parking_lot::Mutex;

use super::dead_letter::pending::PendingDeadLetters;
use super::memory::BulkCharge;
use super::persist::DefinitionWrites;
use super::rates::QueueCounters;
use super::runtime::Runtime;
use super::stats::DeliveryTotals;
use super::tickets::PublishTicket;
use super::vhost::VHost;
use consumer::Consumer;

pub(crate) mod consumer;
mod kept_dead_letters;
pub(crate) mod page_reader;
mod store_writes;

use dwellmq_core::queue::StoreProgress;
use store_writes::StoreWrites;

/// How long a read for deadlines under the manual clock waits for memory to fall under the
/// watermark before it is put off (see `Queue::room_to_expire`).
const EXPIRY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Pages a `basic.get` reads at most before it answers: a run whose first pages hold only
/// expired messages answers get-empty rather than hold the channel for long.
const PAGES_PER_GET: usize = 16;

/// Who owns an exclusive queue: the id of the connection that declared it.
pub(crate) type ConnectionId = u64;

struct Inner {
    state: QueueState<Arc<Consumer>>,
    /// Reused by every command.
    effects: Effects<Arc<Consumer>>,
    /// The packed ready messages' memory (`QueueState::packed_footprint`).
    packed: BulkCharge,
}

/// Whether a command needs the current time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Time {
    /// Always.
    Now,
    /// Only if the queue's state makes the outcome depend on it.
    IfUsed,
}

/// Spills of one queue submitted to the store and not committed, at most: what waits for the
/// disk (copies of the messages, the writer's work) stays bounded whatever the publishers do;
/// beyond it messages wait in memory, counted, and the alarm is the last resort.
const SPILLS_IN_FLIGHT: usize = 8192;

/// A message that died in a command, to be dead-lettered once the queue's lock is released.
struct Died {
    message: Arc<Message>,
    reason: DeathReason,
    /// Its store record, kept until its copies are written (at-least-once dead-lettering;
    /// otherwise the command's forget has removed it already).
    seq: Option<u64>,
}

/// What a command left to do once the queue's lock is released.
#[derive(Default)]
struct Aftermath {
    dead: Vec<Died>,
    /// Where they go, as the settings said when they died.
    dead_letter_target: Option<DeadLetterTarget>,
    /// They are kept here until every target took them (at-least-once dead-lettering).
    at_least_once: bool,
    expire: bool,
}

/// A queue in a vhost.
pub(crate) struct Queue {
    pub(crate) name: ShortStr,
    pub(crate) vhost: ShortStr,
    pub(crate) durable: bool,
    pub(crate) exclusive_owner: Option<ConnectionId>,
    pub(crate) auto_delete: bool,
    /// Arguments as declared (for equivalence checks on redeclare).
    pub(crate) arguments: FieldTable,
    pub(crate) config: QueueArguments,
    runtime: Arc<Runtime>,
    /// The queue's id in the durable store: set for a durable, non-exclusive queue when the
    /// broker has a store (`persist.rs`); its persistent messages are stored under it.
    pub(crate) store_id: OnceLock<u64>,
    /// The vhost, for dead-lettering and `x-expires` (unset in some unit tests).
    home: OnceLock<Weak<VHost>>,
    inner: Mutex<Inner>,
    /// Message counters for the management API's rates.
    pub(crate) counters: QueueCounters,
    /// Counters for the broker's global message totals (added to the runtime's at deletion).
    totals: DeliveryTotals,
    /// Dead-lettered messages not every target took yet (at-least-once dead-lettering).
    pending_dead_letters: PendingDeadLetters,
    /// Which of its store writes are committed, for a queue that pages (`None` otherwise).
    progress: Option<Arc<StoreProgress>>,
    /// Names its spilled records in the store (a queue that pages; 0 otherwise).
    spill_id: u64,
    /// A nudge (see `PageReader::nudge`) is asked for and has not run yet: one at a time.
    nudge_pending: std::sync::atomic::AtomicBool,
}

impl Queue {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: ShortStr,
        vhost: ShortStr,
        durable: bool,
        exclusive_owner: Option<ConnectionId>,
        auto_delete: bool,
        arguments: FieldTable,
        config: QueueArguments,
        runtime: Arc<Runtime>,
        policy: Option<&PolicyDefinition>,
    ) -> Self {
        let settings = settings_for(&config, &arguments, durable, &runtime, policy);
        let now = runtime.clock.now_ms();
        let mut state = QueueState::new(settings, auto_delete, now);
        // With a store, a classic queue leaves what lies beyond its window there: a durable
        // one its persistent messages as they are committed, any one the rest under memory
        // pressure (spilled). A priority queue does not (its levels would each need a run),
        // nor does a quorum queue (its retries and kept dead letters live beside its ready
        // list).
        let pages = runtime.store.is_some()
            && config.queue_type == QueueType::Classic
            && state.settings().max_priority == 0;
        let stores_persistent = durable && exclusive_owner.is_none();
        let progress = pages.then(|| {
            if stores_persistent {
                state.enable_paging(runtime.paging);
            } else {
                state.enable_spill_paging(runtime.paging);
            }
            Arc::new(StoreProgress::default())
        });
        let spill_id = if pages { runtime.next_spill_id() } else { 0 };
        Queue {
            pending_dead_letters: PendingDeadLetters::default(),
            name,
            vhost,
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            config,
            progress,
            spill_id,
            nudge_pending: Default::default(),
            inner: Mutex::new(Inner {
                state,
                effects: Effects::new(),
                packed: BulkCharge::new(Arc::clone(&runtime.memory)),
            }),
            counters: QueueCounters::default(),
            totals: DeliveryTotals::default(),
            runtime,
            store_id: OnceLock::new(),
            home: OnceLock::new(),
        }
    }

    /// Ties the queue to its vhost and arms its first deadline (`x-expires`).
    pub(crate) fn start(self: &Arc<Self>, home: Weak<VHost>) {
        let _ = self.home.set(home);
        self.run(|state, now, fx| state.start(now, fx));
    }

    /// This queue's delivery counters (summed over queues for the broker's totals).
    fn totals(&self) -> &DeliveryTotals {
        &self.totals
    }

    /// This queue's delivery counters, read (see [`DeliveryTotals::read`]).
    pub(crate) fn delivery_totals(&self) -> [u64; 7] {
        self.totals.read()
    }

    /// Whether deliveries are counted (a quorum queue): redeliveries then carry the counts.
    pub(crate) fn counts_deliveries(&self) -> bool {
        self.config.queue_type == QueueType::Quorum
    }

    /// Whether every message it takes is stored, persistent or not (a durable quorum queue).
    pub(crate) fn keeps_every_message(&self) -> bool {
        self.counts_deliveries() && self.store_id.get().is_some()
    }

    /// The policy that applies changed (or none applies any more).
    pub(crate) fn apply_policy(self: &Arc<Self>, policy: Option<&PolicyDefinition>) {
        let settings = settings_for(
            &self.config,
            &self.arguments,
            self.durable,
            &self.runtime,
            policy,
        );
        let (was_at_least_once, old_target) = {
            let inner = self.inner.lock();
            let old = inner.state.settings();
            (old.dead_letter_at_least_once, old.dead_letter.clone())
        };
        let (at_least_once, target) = (
            settings.dead_letter_at_least_once,
            settings.dead_letter.clone(),
        );
        self.run(|state, now, fx| state.set_settings(settings, now, fx));
        self.dead_letter_strategy_changed(was_at_least_once, at_least_once, old_target != target);
    }

    /// `RESOURCE_LOCKED` unless `connection` may use this queue.
    pub(crate) fn check_exclusive(&self, connection: ConnectionId) -> BrokerResult<()> {
        match self.exclusive_owner {
            Some(owner) if owner != connection => Err(BrokerError::ResourceLocked(format!(
                "cannot obtain exclusive access to locked queue '{}' in vhost '{}'. It could be \
                 originally declared on another connection or the exclusive property value does \
                 not match that of the original declaration.",
                self.name, self.vhost
            ))),
            _ => Ok(()),
        }
    }

    /// Runs one command with the current time, then carries out its effects.
    fn run<R>(
        self: &Arc<Self>,
        command: impl FnOnce(&mut QueueState<Arc<Consumer>>, u64, &mut Effects<Arc<Consumer>>) -> R,
    ) -> R {
        self.run_at(Time::Now, command)
    }

    /// Runs one command, reading the clock only if `time` or the queue's state needs it: two
    /// clock reads per message (publish and ack) are a measurable share of the hot path.
    fn run_at<R>(
        self: &Arc<Self>,
        time: Time,
        command: impl FnOnce(&mut QueueState<Arc<Consumer>>, u64, &mut Effects<Arc<Consumer>>) -> R,
    ) -> R {
        self.run_with(time, None, command)
    }

    /// As `run_at`; the persists of a publish count on `ticket` (its confirm waits for them).
    fn run_with<R>(
        self: &Arc<Self>,
        time: Time,
        ticket: Option<&Arc<PublishTicket>>,
        command: impl FnOnce(&mut QueueState<Arc<Consumer>>, u64, &mut Effects<Arc<Consumer>>) -> R,
    ) -> R {
        let (result, page) = self.run_command(time, ticket, command);
        if let Some(request) = page {
            self.read(request);
        }
        result
    }

    /// Runs one command and carries out its effects; returns its result and the read of the
    /// run the queue asked for after it, which the caller must have done.
    fn run_command<R>(
        self: &Arc<Self>,
        time: Time,
        ticket: Option<&Arc<PublishTicket>>,
        command: impl FnOnce(&mut QueueState<Arc<Consumer>>, u64, &mut Effects<Arc<Consumer>>) -> R,
    ) -> (R, Option<PageRequest>) {
        let mut after = Aftermath::default();
        let mut now = None;
        let mut group = None;
        let (result, page) = {
            let mut guard = self.inner.lock();
            let Inner {
                state,
                effects,
                packed,
            } = &mut *guard;
            if time == Time::Now || state.uses_clock() {
                now = Some(self.runtime.clock.now_ms());
            }
            // Without the clock no outcome depends on the time passed (`uses_clock`).
            let now_ms = now.unwrap_or(0);
            let result = command(state, now_ms, effects);
            let mut writes = StoreWrites::default();
            if !effects.is_empty() {
                // A dead-lettered message leaves this queue's store records and enters its
                // targets' in one commit: a crash loses neither (the store retries the group
                // whole after a failed commit).
                if self.store_id.get().is_some() && effects.has_dead_letters() {
                    group = self.runtime.store.as_ref().map(|store| store.group());
                }
                self.apply(state, effects, &mut after, ticket, &mut writes);
            }
            // After the deliveries: a message handed back by one of them settles too.
            state.settle(now_ms, effects);
            if let Some(progress) = &self.progress {
                state.write_missing(
                    self.runtime.memory.pressed(),
                    progress.as_ref(),
                    SPILLS_IN_FLIGHT.saturating_sub(progress.spills_in_flight()),
                    effects,
                );
            }
            if !effects.is_empty() {
                self.apply(state, effects, &mut after, ticket, &mut writes);
            }
            let page = self
                .progress
                .as_ref()
                .and_then(|progress| state.page(progress.as_ref(), now_ms));
            // Under the queue's lock: the store sees a message's persist before its state
            // changes and its removal.
            self.submit(writes);
            packed.set(state.packed_footprint());
            (result, page)
        };
        if let Some(target) = &after.dead_letter_target {
            let now = now.unwrap_or_else(|| self.runtime.clock.now_ms());
            if after.at_least_once {
                self.dead_letter_at_least_once(target, after.dead, now);
            } else {
                self.dead_letter(target, after.dead, now);
            }
        }
        drop(group);
        if after.expire {
            self.expire();
        }
        (result, page)
    }

    /// Has the page reader read `request` (and what the queue asks for next), or reads it
    /// here: when a deadline asked for it under the manual clock (so that `advance` plays
    /// its expiry out before it returns), or when no reader thread can start.
    pub(crate) fn read(self: &Arc<Self>, first: PageRequest) {
        let mut next = Some(first);
        while let Some(request) = next.take() {
            let at_once = request.due && self.runtime.manual_clock;
            if !at_once && self.runtime.page_reader.request(self, request) {
                return;
            }
            // Under the manual clock a test waits for the clock's advance: what the last
            // reads dead-lettered gets a moment to be written and leave memory.
            if at_once && !self.room_to_expire(EXPIRY_PATIENCE) {
                next = self.defer_read(request);
                continue;
            }
            let page = self.read_page(request, &[]);
            next = self.take_page(request, page);
        }
    }

    /// Whether the memory counted is under the watermark, waiting up to `patience` for it. A
    /// read for deadlines dead-letters what it finds into other queues, which hold it in memory
    /// until it is written: a backlog expiring at once goes a page at a time, as fast as
    /// that leaves memory, not all at once past the watermark.
    pub(crate) fn room_to_expire(&self, patience: std::time::Duration) -> bool {
        let memory = &self.runtime.memory;
        let deadline = std::time::Instant::now() + patience;
        while memory.over_watermark() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        true
    }

    /// A read for deadlines is put off (memory is over the watermark); returns the next
    /// read the queue asks for.
    pub(crate) fn defer_read(self: &Arc<Self>, request: PageRequest) -> Option<PageRequest> {
        self.run_command(Time::Now, None, |state, now, fx| {
            state.defer_read(request, now, fx)
        })
        .1
    }

    fn apply(
        self: &Arc<Self>,
        state: &mut QueueState<Arc<Consumer>>,
        effects: &mut Effects<Arc<Consumer>>,
        after: &mut Aftermath,
        ticket: Option<&Arc<PublishTicket>>,
        writes: &mut StoreWrites,
    ) {
        // Added once after the loop, under the same lock: one atomic add per batch of
        // deliveries, not per message.
        let mut delivered = 0;
        let mut delivered_auto_ack = 0;
        let at_least_once = state.settings().dead_letter_at_least_once;
        // A dead-lettered message's forget comes just before its dead-letter effect.
        let mut just_forgot = None;
        for effect in effects.drain() {
            let forgotten = just_forgot.take();
            match effect {
                Effect::Deliver {
                    consumer,
                    entry,
                    forget,
                } => {
                    let redelivered = entry.redelivered;
                    let seq = entry.seq;
                    self.charge_unpacked(&entry.message);
                    match consumer.sink.deliver(self, &consumer, entry) {
                        Ok(()) => {
                            delivered += 1;
                            delivered_auto_ack += u64::from(consumer.credit.no_ack);
                            // A no-ack delivery settles the message: it leaves the store now
                            // that it went out (one handed back stays stored).
                            if let (true, Some(&queue)) = (forget, self.store_id.get()) {
                                writes
                                    .detached
                                    .push(dwellmq_store::Op::Forget { queue, seq });
                            }
                            if redelivered {
                                QueueCounters::add(&self.counters.redeliver, 1);
                                DeliveryTotals::add(&self.totals().redelivered, 1);
                                self.runtime
                                    .hooks
                                    .redelivered
                                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                        Err(entry) => state.undelivered(&consumer.credit, entry),
                    }
                }
                Effect::DeadLetter { message, reason } => {
                    if after.dead_letter_target.is_none() {
                        after.dead_letter_target = state.settings().dead_letter.clone();
                        after.at_least_once = at_least_once;
                    }
                    let mut seq = None;
                    if let (true, Some(forgotten)) = (at_least_once, forgotten) {
                        // The record stays until the copies are written, in their commit.
                        if self.store_id.get().is_some() {
                            writes.detached.pop();
                        }
                        seq = Some(forgotten);
                    }
                    after.dead.push(Died {
                        message,
                        reason,
                        seq,
                    });
                }
                Effect::Dropped { reason } => self.runtime.deaths.dropped(reason),
                Effect::Arm { at_ms } => self.runtime.scheduler.arm_queue(at_ms, self),
                Effect::Expire => after.expire = true,
                // Submitted under the queue's lock, so that the store sees a message's
                // persist before its forget.
                Effect::Persist {
                    seq,
                    message,
                    expires_at,
                    delivered,
                } => self.persist(seq, message, expires_at, delivered, ticket),
                Effect::SetState { seq, state } => {
                    if let Some(&queue) = self.store_id.get() {
                        writes.detached.push(dwellmq_store::Op::SetState {
                            queue,
                            seq,
                            state: dwellmq_store::DeliveryState {
                                redelivered: state.redelivered,
                                delivery_count: state.delivery_count,
                                acquired_count: state.acquired_count,
                                ready_at_ms: state.ready_at.unwrap_or(0),
                                dead_letter_reason: None,
                            },
                        });
                    }
                }
                Effect::Forget { seq } => {
                    if let Some(&queue) = self.store_id.get() {
                        writes
                            .detached
                            .push(dwellmq_store::Op::Forget { queue, seq });
                    }
                    just_forgot = Some(seq);
                }
                Effect::Spill {
                    seq,
                    message,
                    expires_at,
                } => {
                    writes.written_seqs.push(seq);
                    writes.writes.push(dwellmq_store::Op::Spill {
                        spill: self.spill_id,
                        seq,
                        expires_at_ms: expires_at.unwrap_or(0),
                        message: match message {
                            SpilledMessage::Packed(packed) => {
                                dwellmq_store::Payload::Packed(packed)
                            }
                            SpilledMessage::Shared(message) => {
                                dwellmq_store::Payload::Message(message)
                            }
                        },
                    });
                }
                Effect::Rewrite {
                    seq,
                    message,
                    expires_at,
                } => {
                    if let Some(&queue) = self.store_id.get() {
                        writes.rewritten_seqs.push(seq);
                        writes.writes.push(dwellmq_store::Op::Persist {
                            queue,
                            seq,
                            expires_at_ms: expires_at.unwrap_or(0),
                            delivered: false,
                            message: dwellmq_store::Payload::Message(message),
                        });
                    }
                }
                Effect::RemovalsMark { mark } => writes.removals_mark = Some(mark),
                Effect::Unspill { from_seq, end_seq } => {
                    writes.detached.push(dwellmq_store::Op::Unspill {
                        spill: self.spill_id,
                        from_seq,
                        end_seq,
                    });
                }
                Effect::ForgetRun { from_seq, end_seq } => {
                    if let Some(&queue) = self.store_id.get() {
                        writes.detached.push(dwellmq_store::Op::ForgetRange {
                            queue,
                            from_seq,
                            end_seq,
                        });
                    }
                }
            }
        }
        if delivered > 0 {
            QueueCounters::add(&self.counters.deliver, delivered);
            self.totals().delivered(delivered, delivered_auto_ack);
        }
    }

    /// Submits a command's store writes (under the queue's lock).
    fn submit(self: &Arc<Self>, writes: StoreWrites) {
        let Some(store) = &self.runtime.store else {
            return;
        };
        writes.submit(store_writes::Reporting {
            store,
            progress: self.progress.as_ref(),
            queue: Arc::downgrade(self),
        });
    }

    /// Runs the paging steps with no command (a failed write is written again).
    pub(crate) fn nudge(self: &Arc<Self>) {
        self.nudge_pending
            .store(false, std::sync::atomic::Ordering::Release);
        self.run_at(Time::IfUsed, |_, _, _| ());
    }

    /// Has the page reader nudge this queue (see `nudge`): at once after its writes
    /// committed, a little later after they failed. One nudge pending at a time.
    fn request_nudge(self: &Arc<Self>, failed: bool) {
        if !self
            .nudge_pending
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            self.runtime.page_reader.nudge(Arc::downgrade(self), failed);
        }
    }

    /// A message unpacked from the ready list is charged again on its own from its delivery:
    /// it may stay unacknowledged for long, and the queue's bulk charge no longer counts it.
    fn charge_unpacked(&self, message: &Message) {
        if message.is_uncharged() {
            let charge = self.runtime.memory.charge_message(message.body_len());
            message.charge_late(Box::new(charge));
        }
    }

    fn persist(
        self: &Arc<Self>,
        seq: u64,
        message: Arc<Message>,
        expires_at: Option<u64>,
        delivered: bool,
        ticket: Option<&Arc<PublishTicket>>,
    ) {
        let (Some(&queue), Some(store)) = (self.store_id.get(), &self.runtime.store) else {
            return;
        };
        let op = dwellmq_store::Op::Persist {
            queue,
            seq,
            expires_at_ms: expires_at.unwrap_or(0),
            delivered,
            message: dwellmq_store::Payload::Message(message),
        };
        let progress = self.progress.clone();
        let queue = Arc::downgrade(self);
        super::tickets::submit_counted(store, vec![op], ticket, move |outcome| {
            if let Err(e) = outcome {
                tracing::warn!(error = %e, "persisting a message failed; it is persisted again");
            }
            let Some(progress) = progress else {
                return;
            };
            progress.completed(seq, outcome.is_ok());
            // What is committed may leave memory even if no command comes (a burst of
            // publishes handled before its first commit, then silence); a failed one,
            // which holds back everything behind it, is written again. One nudge is
            // pending per queue at a time, so a commit of many costs one.
            if let Some(queue) = queue.upgrade() {
                queue.request_nudge(outcome.is_err());
            }
        });
    }

    /// Reads a page of this queue's run from the store, trying again after each of `pauses`
    /// while the store cannot be read; `None` if it still cannot.
    pub(crate) fn read_page(
        &self,
        request: PageRequest,
        pauses: &[std::time::Duration],
    ) -> Option<Page> {
        let Some(store) = &self.runtime.store else {
            return None;
        };
        let source = self.stored_source();
        let max_bytes = self.runtime.paging.page_bytes();
        let mut pauses = pauses.iter();
        loop {
            match page_reader::read_page(store, source, request, max_bytes) {
                Ok(page) => return Some(page),
                Err(e) => {
                    let Some(pause) = pauses.next() else {
                        tracing::warn!(queue = %self.name, error = %e, "reading a page of a queue failed");
                        return None;
                    };
                    std::thread::sleep(*pause);
                }
            }
        }
    }

    /// Where its stored messages are: persisted ones under its store id, spilled ones under
    /// its spill id.
    fn stored_source(&self) -> page_reader::Source {
        page_reader::Source {
            queue: self.store_id.get().copied(),
            spill: self.spill_id,
        }
    }

    /// A page read for `request` (`None`: the read failed) joins the queue (or expires
    /// what is due where it is).
    pub(crate) fn page_in(self: &Arc<Self>, request: PageRequest, page: Option<Page>) {
        if let Some(next) = self.take_page(request, page) {
            self.read(next);
        }
    }

    /// As `page_in`; returns the next read the queue asks for.
    fn take_page(
        self: &Arc<Self>,
        request: PageRequest,
        page: Option<Page>,
    ) -> Option<PageRequest> {
        self.run_command(Time::Now, None, |state, now, fx| {
            state.page_in(request, page, now, fx)
        })
        .1
    }

    /// Brings the queue back from the store without reading its messages: the store holds
    /// `count` of them (`bytes` of bodies) from position `first_seq` on, and the next
    /// message takes `next_seq`.
    pub(crate) fn restore_paged(
        self: &Arc<Self>,
        first_seq: u64,
        count: u64,
        bytes: u64,
        next_seq: u64,
    ) {
        self.restore_run(first_seq, count, bytes, next_seq);
        self.read_first_page();
    }

    /// As [`Queue::restore_paged`] without the first page, for a queue not in its vhost yet
    /// (a kept one a declare takes back): it reads it once it is, so that what dies at its
    /// head has somewhere to go.
    pub(crate) fn restore_run(
        self: &Arc<Self>,
        first_seq: u64,
        count: u64,
        bytes: u64,
        next_seq: u64,
    ) {
        if let Some(progress) = &self.progress {
            progress.stored_below(next_seq);
        }
        let run = PagedRun {
            first_seq,
            end_seq: next_seq,
            count,
            bytes,
        };
        self.run(|state, now, fx| {
            state.restore_paged(run, now, fx);
            state.restore(Vec::new(), next_seq, now, fx);
        });
    }

    /// One page at once (bounded, whatever the backlog): a short queue is then in memory as
    /// before, and what expired at its head while the broker was down expires at start.
    pub(crate) fn read_first_page(self: &Arc<Self>) {
        self.read_for(self.runtime.paging.page_len());
    }

    /// Reads a page on the spot if fewer than `wanted` messages are in memory in front of a
    /// run; false if there was nothing to read.
    fn read_for(self: &Arc<Self>, wanted: usize) -> bool {
        let Some(request) = self.run(|state, _, _| state.page_for(wanted)) else {
            return false;
        };
        let page = self.read_page(request, &[]);
        self.page_in(request, page);
        true
    }

    /// Whether the queue leaves messages beyond its window in the store.
    pub(crate) fn pages(&self) -> bool {
        self.progress.is_some()
    }

    /// Routes dead messages to the dead-letter exchange.
    fn dead_letter(&self, target: &DeadLetterTarget, dead: Vec<Died>, now_ms: u64) {
        let Some(vhost) = self.home.get().and_then(Weak::upgrade) else {
            return;
        };
        for Died {
            message, reason, ..
        } in dead
        {
            self.runtime.deaths.dead_lettered(reason);
            super::dead_letter::route(super::dead_letter::Death {
                vhost: &vhost,
                runtime: &self.runtime,
                queue: &self.name,
                target,
                message: &message,
                reason,
                at_ms: now_ms,
            });
        }
    }

    /// `x-expires` elapsed: the queue deletes itself.
    fn expire(self: &Arc<Self>) {
        let Some(vhost) = self.home.get().and_then(Weak::upgrade) else {
            return;
        };
        tracing::debug!(queue = %self.name, vhost = %self.vhost, "queue expired (x-expires)");
        let _ = vhost.delete_queue_instance_reporting(self, DefinitionWrites::UNAWAITED);
    }

    /// Enqueues a routed message and delivers what consumers can take.
    pub(crate) fn publish(self: &Arc<Self>, message: Arc<Message>) -> PublishOutcome {
        self.publish_confirmed(message, None)
    }

    /// As `publish`; if the message is persisted here, its commit counts on `ticket`.
    pub(crate) fn publish_confirmed(
        self: &Arc<Self>,
        message: Arc<Message>,
        ticket: Option<&Arc<PublishTicket>>,
    ) -> PublishOutcome {
        let time = if message.properties.expiration.is_some() {
            Time::Now
        } else {
            Time::IfUsed
        };
        let outcome = self.run_with(time, ticket, |state, now, fx| {
            state.publish(message, now, fx)
        });
        QueueCounters::add(&self.counters.publish, 1);
        outcome
    }

    /// Puts back the messages the store held for this queue (at start), each with the time
    /// its delayed retry is due, if it waits for one.
    pub(crate) fn restore(
        self: &Arc<Self>,
        entries: Vec<(QueueEntry, Option<u64>)>,
        next_seq: u64,
    ) {
        // What was stored before is committed: it may be left in the store again.
        if let Some(progress) = &self.progress {
            progress.stored_below(next_seq);
        }
        self.run(|state, now, fx| state.restore(entries, next_seq, now, fx));
    }

    /// Delivers what consumers can take (after a qos or flow change, or a drained socket).
    pub(crate) fn drain(self: &Arc<Self>) {
        self.run_at(Time::IfUsed, |state, now, fx| state.drain(now, fx));
    }

    /// It is time for this queue's next deadline (or its kept dead letters' retry).
    pub(crate) fn tick(self: &Arc<Self>) {
        self.run(|state, now, fx| state.tick(now, fx));
        self.retry_dead_letters(false);
    }

    /// Delivered messages were acked (or were no-ack and are done).
    pub(crate) fn ack<'a>(self: &Arc<Self>, entries: impl IntoIterator<Item = &'a QueueEntry>) {
        let mut acked = 0;
        let entries = entries.into_iter().inspect(|_| acked += 1);
        self.run_at(Time::IfUsed, |state, now, fx| state.ack(entries, now, fx));
        QueueCounters::add(&self.counters.ack, acked);
        DeliveryTotals::add(&self.totals().acknowledged, acked);
    }

    /// Delivered messages were rejected without requeue: dead-lettered or dropped.
    pub(crate) fn reject(self: &Arc<Self>, entries: impl IntoIterator<Item = QueueEntry>) {
        self.run_at(Time::IfUsed, |state, now, fx| {
            state.reject(entries, now, fx)
        });
    }

    /// Puts delivered messages back, marked redelivered, at their original positions (or, in
    /// a quorum queue, past its delivery limit or into a delayed retry).
    pub(crate) fn requeue(
        self: &Arc<Self>,
        entries: impl IntoIterator<Item = QueueEntry>,
        cause: ReturnCause,
    ) {
        self.run(|state, now, fx| state.requeue(entries, cause, now, fx));
    }

    /// Adds a consumer; `ACCESS_REFUSED` if exclusivity forbids it. `on_added` runs once the
    /// consumer is accepted and before anything is delivered to it (to send `consume-ok`).
    pub(crate) fn add_consumer(
        self: &Arc<Self>,
        consumer: Arc<Consumer>,
        priority: i64,
        exclusive: bool,
        on_added: impl FnOnce(),
    ) -> BrokerResult<()> {
        let slot = ConsumerSlot {
            id: consumer.id,
            credit: Arc::clone(&consumer.credit),
            handle: consumer,
            priority,
            exclusive,
        };
        let refused = self.run(|state, now, fx| {
            state.can_consume(slot.exclusive)?;
            // consume-ok goes out before the first delivery.
            on_added();
            state.consume(slot, now, fx)
        });
        match refused {
            Ok(()) => Ok(()),
            Err(ConsumeRefused::Deleted) => Err(BrokerError::NotFound(format!(
                "no queue '{}' in vhost '{}'",
                self.name, self.vhost
            ))),
            Err(ConsumeRefused::ExclusiveInUse) => Err(BrokerError::AccessRefused(format!(
                "queue '{}' in vhost '{}' in exclusive use",
                self.name, self.vhost
            ))),
        }
    }

    /// Removes consumer `id`.
    pub(crate) fn remove_consumer(self: &Arc<Self>, id: u64) -> Cancelled<Arc<Consumer>> {
        self.run(|state, now, fx| state.cancel(id, now, fx))
    }

    /// `basic.get`: the head message and how many remain, or `None` when none is ready.
    pub(crate) fn get(self: &Arc<Self>, no_ack: bool) -> Option<(QueueEntry, usize)> {
        let mut got = None;
        // Nothing in memory while a run waits in the store: its first page is read here (a
        // short read), then the get is tried again; a page that brings no live message (all
        // expired) leads to the next one.
        for _ in 0..PAGES_PER_GET {
            let (taken, request) = self.run(|state, now, fx| {
                let taken = state.get(no_ack, now, fx);
                let request = if taken.is_none() {
                    state.page_for(1)
                } else {
                    None
                };
                (taken, request)
            });
            got = taken;
            let Some(request) = request else { break };
            let page = self.read_page(request, &[]);
            self.page_in(request, page);
        }
        if let Some((entry, _)) = &got {
            self.charge_unpacked(&entry.message);
        }
        self.totals()
            .got(got.as_ref().map(|(entry, _)| entry), no_ack);
        if let Some((entry, _)) = &got {
            QueueCounters::add(&self.counters.get, 1);
            if entry.redelivered {
                QueueCounters::add(&self.counters.redeliver, 1);
            }
        }
        got
    }

    /// Drops every ready message; returns how many.
    pub(crate) fn purge(self: &Arc<Self>) -> usize {
        self.run(|state, now, fx| {
            state.tick(now, fx);
            state.purge(fx)
        })
    }

    /// The queue was redeclared (it counts as used for `x-expires`).
    pub(crate) fn redeclared(self: &Arc<Self>) {
        self.run(|state, now, fx| state.redeclared(now, fx));
    }

    /// Ready messages (what `queue.declare-ok` reports), once expired ones are gone.
    pub(crate) fn message_count(self: &Arc<Self>) -> usize {
        self.run(|state, now, fx| {
            state.tick(now, fx);
            state.ready()
        })
    }

    /// What the management API and `/metrics` show of the contents, read under one lock (once
    /// expired messages are gone).
    pub(crate) fn figures(self: &Arc<Self>) -> QueueFigures {
        self.run(|state, now, fx| {
            state.tick(now, fx);
            let (expiring, next_expiry_at) = state.expiring();
            let (dead_lettered, dead_lettered_bytes) = self.pending_dead_letters.figures();
            let (paged_out, paged_out_bytes) = state.paged_out();
            QueueFigures {
                paged_out,
                paged_out_bytes,
                dead_lettered,
                dead_lettered_bytes,
                expiring,
                next_expiry_at,
                ready: state.ready(),
                ready_bytes: state.ready_bytes(),
                unacked: state.unacked(),
                unacked_bytes: state.unacked_bytes(),
                retrying: state.retrying(),
                next_retry_at: state.next_retry_at(),
                consumers: state.consumer_count(),
            }
        })
    }

    /// Ready messages the store holds a copy of, and their body bytes (none unless the queue
    /// is in the store). One pass over the ready messages: for the management API, not for
    /// every scrape.
    pub(crate) fn persisted_ready(&self) -> (usize, u64) {
        if self.store_id.get().is_none() {
            return (0, 0);
        }
        let inner = self.inner.lock();
        let (paged, paged_bytes) = inner.state.paged_out();
        inner
            .state
            .ready_entries()
            .filter(|e| e.is_persistent())
            .fold((paged as usize, paged_bytes), |(n, bytes), e| {
                (n + 1, bytes + e.body_len() as u64)
            })
    }

    /// Messages waiting for a delayed retry: (ready again at, the entry), in that order.
    pub(crate) fn retrying(&self) -> Vec<(u64, QueueEntry)> {
        let guard = self.inner.lock();
        guard
            .state
            .retrying_entries()
            .map(|(at, entry)| (at, entry.clone()))
            .collect()
    }

    /// Makes every message waiting for a retry ready now; returns how many.
    pub(crate) fn release_retries(self: &Arc<Self>) -> usize {
        self.run(|state, now, fx| state.release_retries(now, fx))
    }

    /// Delivered and not yet settled.
    pub(crate) fn unacked_count(&self) -> usize {
        self.inner.lock().state.unacked()
    }

    /// Consumers attached.
    pub(crate) fn consumer_count(&self) -> usize {
        self.inner.lock().state.consumer_count()
    }

    /// The consumers attached, in delivery priority order (the management API lists them).
    pub(crate) fn consumers(&self) -> Vec<Arc<Consumer>> {
        self.inner
            .lock()
            .state
            .consumer_handles()
            .cloned()
            .collect()
    }

    /// The management API's get: takes up to `count` ready messages from the head, each with
    /// the number of ready messages left behind it, and with `requeue` puts them all back
    /// afterwards, marked redelivered, at their places (what RabbitMQ does: `basic.get` then
    /// `basic.reject` with requeue), or else acknowledges them. Consumers are not involved and
    /// nothing stays unacked.
    pub(crate) fn take_for_inspection(
        self: &Arc<Self>,
        count: usize,
        requeue: bool,
    ) -> Vec<(QueueEntry, usize)> {
        // What it takes is read from the store first if it is not in memory.
        for _ in 0..PAGES_PER_GET {
            if !self.read_for(count) {
                break;
            }
        }
        self.run(|state, now, fx| {
            let mut taken = Vec::new();
            while taken.len() < count {
                let Some(got) = state.get(false, now, fx) else {
                    break;
                };
                taken.push(got);
            }
            let entries = taken.iter().map(|(entry, _)| entry);
            if requeue {
                state.requeue(entries.cloned(), ReturnCause::Nacked, now, fx);
            } else {
                state.ack(entries, now, fx);
            }
            taken
        })
    }

    /// Up to `limit` ready messages from the head, left in place (the test endpoints' peek),
    /// those left in the store read from it.
    pub(crate) fn peek(&self, limit: usize) -> Vec<QueueEntry> {
        let inner = self.inner.lock();
        let mut ready: Vec<QueueEntry> =
            inner.state.ready_entries().map(|e| e.to_entry()).collect();
        if let Some(run) = inner.state.paged_run() {
            ready.extend(
                self.read_run(run, limit)
                    .into_iter()
                    .filter(|e| inner.state.in_paged_run(e.seq)),
            );
        }
        // By position (queue order, except that a priority queue serves higher levels first).
        ready.sort_by_key(|e| e.seq);
        ready.truncate(limit);
        ready
    }

    /// Up to `limit` messages of the run, read from the store (inspection; none if it cannot
    /// be read).
    fn read_run(&self, run: PagedRun, limit: usize) -> Vec<QueueEntry> {
        let Some(store) = &self.runtime.store else {
            return Vec::new();
        };
        let source = self.stored_source();
        let stored = store
            .snapshot()
            .and_then(|snapshot| page_reader::read_merged(&snapshot, source, run.first_seq, limit))
            .map(|stored| stored.into_iter().map(|(m, _)| m).collect::<Vec<_>>());
        let stored = match stored {
            Ok(stored) => stored,
            Err(e) => {
                tracing::warn!(queue = %self.name, error = %e, "reading a queue's paged messages failed");
                return Vec::new();
            }
        };
        stored
            .into_iter()
            .take_while(|m| m.seq < run.end_seq)
            .map(|m| QueueEntry {
                seq: m.seq,
                redelivered: m.state.redelivered,
                delivery_count: 0,
                acquired_count: 0,
                expires_at: (m.expires_at_ms != 0).then_some(m.expires_at_ms),
                message: m.message.unpack_own(),
            })
            .collect()
    }

    /// Expiry times of the ready messages that have one, soonest first (at most `limit`).
    pub(crate) fn expiring(&self, limit: usize) -> (usize, Vec<u64>) {
        let inner = self.inner.lock();
        let mut all: Vec<u64> = inner
            .state
            .ready_entries()
            .filter_map(|e| e.expires_at())
            .collect();
        all.sort_unstable();
        let count = all.len();
        all.truncate(limit);
        (count, all)
    }

    /// Whether the queue has been deleted (its consumers were cancelled by the server).
    pub(crate) fn is_deleted(&self) -> bool {
        self.inner.lock().state.is_deleted()
    }

    /// Marks the queue deleted, drops its messages, and returns its consumers (to notify them).
    pub(crate) fn mark_deleted(&self) -> (usize, Vec<Arc<Consumer>>) {
        let mut guard = self.inner.lock();
        let Inner {
            state,
            effects,
            packed,
        } = &mut *guard;
        let result = state.delete(effects);
        packed.set(state.packed_footprint());
        // Only store hooks can come out of a delete; the store drops the queue's messages
        // with the queue, and its spilled ones go here.
        effects.drain();
        if let (true, Some(store)) = (state.has_spilled(), &self.runtime.store) {
            store.submit_detached(vec![dwellmq_store::Op::Unspill {
                spill: self.spill_id,
                from_seq: 0,
                end_seq: u64::MAX,
            }]);
        }
        self.pending_dead_letters.clear();
        // The broker's totals keep what it counted.
        self.runtime
            .queue_totals
            .of(self.config.queue_type)
            .absorb(&self.totals);
        result
    }
}

/// A queue's contents at one instant (`Queue::figures`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueFigures {
    pub(crate) ready: usize,
    /// Body bytes of the ready messages.
    pub(crate) ready_bytes: u64,
    pub(crate) unacked: usize,
    /// Body bytes of the unacked messages.
    pub(crate) unacked_bytes: u64,
    /// Waiting for a delayed retry (quorum queues).
    pub(crate) retrying: usize,
    /// When the first of those is ready again (ms on the broker's clock).
    pub(crate) next_retry_at: Option<u64>,
    pub(crate) consumers: usize,
    /// Dead-lettered and kept until every target takes them (at-least-once dead-lettering),
    /// and their body bytes.
    pub(crate) dead_lettered: usize,
    pub(crate) dead_lettered_bytes: u64,
    /// Ready messages whose TTL is pending, and when the first expires.
    pub(crate) expiring: usize,
    pub(crate) next_expiry_at: Option<u64>,
    /// Ready messages left in the store only (counted in `ready`), and their body bytes.
    pub(crate) paged_out: u64,
    pub(crate) paged_out_bytes: u64,
}

/// A queue's settings: its arguments combined with the policy that applies.
fn settings_for(
    config: &QueueArguments,
    arguments: &FieldTable,
    durable: bool,
    runtime: &Runtime,
    policy: Option<&PolicyDefinition>,
) -> QueueSettings {
    QueueSettings::effective(
        config,
        arguments.contains_key("x-overflow"),
        durable,
        runtime.expiry_mode,
        policy,
    )
}
