//! Messages held by `x-delayed-message` exchanges until their due time: a client of the
//! broker's one scheduler ([`crate::broker::scheduler`]), which owns the deadlines and the wake.
//!
//! The scheduler keeps what is due within its horizon in a timer wheel and the rest in a far
//! tier ordered by (due time, sequence); this module adds what is particular to delayed
//! exchanges: per-exchange counts and due order (listing, purge, kept in the [`Book`] beside
//! the core scheduler), memory accounting, the disk tier of durable exchanges, and routing at
//! release through the exchange's bindings as they are then.
//!
//! Small messages are held packed ([`dwellmq_core::PackedMessage`]): a message that waits a
//! minute must not keep the publisher's whole read buffer alive for that minute.
//!
//! A release touches only warm memory: the wheel, a small map of what is in it, and the
//! per-exchange counters. Moving in reads each message once, a horizon before it is due.

mod control;
mod disk;
mod held;
mod info;
pub(crate) mod lateness;
mod release;
#[cfg(test)]
mod tests_disk;
#[cfg(test)]
mod tests_kept;
#[cfg(test)]
mod tests_model;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dwellmq_codec::ShortStr;
use dwellmq_core::schedule::{DeadlineId, HORIZON_MS};
use dwellmq_core::Message;
use parking_lot::Mutex;

use super::exchange::Exchange;
use super::memory::{held_footprint, message_footprint, MemoryMonitor};
use super::persist::PublishTicket;
use super::scheduler::{Entry, Locked, Scheduler, MOVE_IN_BATCH, RETIRED};
#[cfg(test)]
use super::timer_thread::TimerControl;
use super::vhost::{Routing, VHost};
pub(crate) use control::{ListPage, PauseAt};
use disk::{DiskTier, KeptOnDisk, Leaving, ReleasedIds};
pub(crate) use held::Held;
use held::{ExchangeKey, Kept, Target};
pub use info::{DelayedId, DelayedMessageInfo, ParseDelayedIdError};

/// Messages dropped per lock hold when an exchange is deleted or purged.
const PURGE_CHUNK: usize = 1024;

/// Per exchange incarnation: counts, and the due order of its messages in the far tier.
struct ExchangeIndex {
    /// What its messages point at.
    target: Arc<Target>,
    /// (due, sequence) of its messages in the far tier.
    beyond: BTreeSet<(u64, u64)>,
    count: usize,
    bytes: u64,
    /// The scheduler's next sequence number when the index was made (0 for one restored at
    /// start): its stored messages are numbered from here on ([`Book::incarnations`]).
    first_seq: u64,
}

impl ExchangeIndex {
    /// Takes `count` messages of `bytes` body octets in all out of the counts (saturating);
    /// true when it counts none any more.
    fn uncount(&mut self, count: usize, bytes: u64) -> bool {
        self.count = self.count.saturating_sub(count);
        self.bytes = self.bytes.saturating_sub(bytes);
        self.count == 0
    }
}

/// The delayed exchanges' part of the scheduler's locked state: what changes with the core
/// scheduler in one lock hold (a release takes a message out of the wheel and out of its
/// exchange's counts at once).
#[derive(Default)]
pub(crate) struct Book {
    /// Scheduler sequence → stored id, for the few held messages scheduled under another id
    /// than the store's (caught up with after a restart).
    stored_as: BTreeMap<u64, DeadlineId>,
    /// By incarnation: those holding messages, the exchanges' current ones and those a purge
    /// or deletion has not begun dropping yet. B-trees, not hash maps: a hash map holding many
    /// entries stalls everything using it for milliseconds whenever it rehashes.
    exchanges: BTreeMap<u64, ExchangeIndex>,
    /// The store holds messages by exchange name, not incarnation: by name, each incarnation
    /// holding messages or being dropped, by the first sequence number of its messages. A
    /// stored message is its name's latest incarnation that began at or before its sequence
    /// number (incarnations of one name follow one another: the old one is retired or renewed
    /// before the new one holds anything). One whose incarnation is not in `exchanges` (being
    /// dropped) is dropped, not moved into the wheel.
    incarnations: BTreeMap<ExchangeKey, BTreeMap<u64, u64>>,
    /// Durable exchanges whose stored definition could not be restored: their held messages
    /// stay on disk untouched (the disk tier does not read their ids) until a declare takes
    /// the exchange back, or a restart with a build or configuration that restores it.
    kept: std::collections::BTreeSet<ExchangeKey>,
    unroutable: u64,
}

/// Buffers a release round reuses, so a release allocates nothing in steady state.
#[derive(Default)]
pub(crate) struct ReleaseScratch {
    routing: Routing,
    extra_keys: Vec<ShortStr>,
}

/// Every message held by every delayed exchange of one broker, and every queue deadline.
pub(crate) struct DelayedMessages {
    /// Messages of durable exchanges held on disk beyond the horizon (with a store). Taken
    /// before `inner` when both are needed.
    disk: Arc<Mutex<Option<DiskTier>>>,
    /// Where stored ids are noted once their `Release` is submitted, for the disk tier to
    /// forget them as moved out (set with the disk tier: nobody drains it without one).
    released: std::sync::OnceLock<Arc<ReleasedIds>>,
    /// The disk mover thread moves the disk tier's messages into the wheel (system clock with
    /// a store): the timer thread then never waits on `disk` or on a store read.
    disk_mover: std::sync::atomic::AtomicBool,
    /// When the disk mover next moves messages in, as it last planned under the disk tier's
    /// lock (`u64::MAX`: none held on disk; 0 until its first plan, which it is about to make
    /// and which will count every hold before it). A hold beyond the horizon wakes the mover
    /// only when it must move in sooner, without reading the index itself.
    mover_plan: std::sync::atomic::AtomicU64,
    /// The broker's scheduler, whose lock guards the held messages' book too.
    scheduler: Arc<Scheduler>,
    memory: Arc<MemoryMonitor>,
    /// How late messages were released.
    pub(crate) lateness: lateness::Lateness,
    /// The durable store: messages held by durable exchanges are written there (set once,
    /// at start, when the broker has a data directory).
    store: std::sync::OnceLock<Arc<dwellmq_store::Store>>,
    /// Purges stopped once begun, while the test double pauses them (`None`: not paused).
    paused_purges: Mutex<Option<control::PausedPurges>>,
    /// Runs once, between a move-in's read ahead and its lock hold: a test's way in there.
    #[cfg(test)]
    after_read_ahead: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

fn key_of(vhost: &ShortStr, exchange: &ShortStr) -> ExchangeKey {
    (vhost.clone(), exchange.clone())
}

fn id_of(id: DelayedId) -> DeadlineId {
    DeadlineId {
        due_ms: id.due_ms,
        seq: id.seq,
    }
}

impl DelayedMessages {
    /// A holder with a scheduler of its own that wakes no thread (tests of this module).
    #[cfg(test)]
    pub(crate) fn new(now_ms: u64, memory: Arc<MemoryMonitor>) -> Self {
        let timer = Arc::new(TimerControl::default());
        Self::with_scheduler(Arc::new(Scheduler::new(now_ms, timer)), memory)
    }

    /// A holder whose deadlines `scheduler` serves.
    pub(crate) fn with_scheduler(scheduler: Arc<Scheduler>, memory: Arc<MemoryMonitor>) -> Self {
        DelayedMessages {
            disk: Arc::new(Mutex::new(None)),
            released: std::sync::OnceLock::new(),
            disk_mover: std::sync::atomic::AtomicBool::new(false),
            mover_plan: std::sync::atomic::AtomicU64::new(0),
            scheduler,
            memory,
            lateness: lateness::Lateness::default(),
            store: std::sync::OnceLock::new(),
            paused_purges: Mutex::new(None),
            #[cfg(test)]
            after_read_ahead: Mutex::new(None),
        }
    }

    /// Messages held by durable exchanges go to `store` from now on.
    pub(crate) fn set_store(&self, store: Arc<dwellmq_store::Store>) {
        let _ = self.store.set(store);
    }

    /// Whether messages of durable exchanges are held on disk (the broker has a data directory).
    pub(crate) fn has_disk(&self) -> bool {
        self.disk.lock().is_some()
    }

    /// From now on the calling thread (the disk mover) moves disk-held messages into the
    /// wheel ([`DelayedMessages::next_disk_move`], [`DelayedMessages::move_in_disk`]); the
    /// timer thread's `next_wake` and `move_in` leave the disk tier alone.
    pub(crate) fn hand_disk_to_mover(&self) {
        self.disk_mover
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn mover_moves_disk(&self) -> bool {
        self.disk_mover.load(std::sync::atomic::Ordering::Acquire)
    }

    /// When the disk mover must next move messages into the wheel (a horizon before the
    /// earliest disk-held one is due); `None` when none is held on disk.
    pub(crate) fn next_disk_move(&self) -> Option<u64> {
        self.refill_disk_ahead();
        let mut disk = self.disk.lock();
        let disk = disk.as_mut()?;
        let at = disk_move_at(disk, &mut self.scheduler.lock());
        // Under the lock: a hold either is in this plan or sees it.
        self.mover_plan
            .store(at.unwrap_or(u64::MAX), std::sync::atomic::Ordering::Relaxed);
        at
    }

    /// Reads the next page of the disk tier's index outside its lock once a window runs low,
    /// so that moving in rarely waits for a read under it.
    fn refill_disk_ahead(&self) {
        let Some(read) = self.disk.lock().as_mut().and_then(|d| d.begin_refill()) else {
            return;
        };
        let page = read.read();
        if let Some(disk) = self.disk.lock().as_mut() {
            disk.end_refill(page);
        }
    }

    /// The disk mover's round: moves every disk-held message due within the horizon of
    /// `now_ms` into the wheel. Returns how many it moved.
    pub(crate) fn move_in_disk(&self, now_ms: u64) -> usize {
        let mut moved = 0;
        self.move_in_from_disk(now_ms, None, Instant::now(), &mut moved);
        moved
    }

    /// Holds messages of durable exchanges beyond the horizon on disk only, from now on;
    /// `now_ms` is the start of the catch-up with those the store holds that fell due while
    /// the broker was down. Those of exchanges kept so far ([`DelayedMessages::keep_unrestored`])
    /// stay on disk.
    pub(crate) fn attach_disk(&self, store: Arc<dwellmq_store::Store>, now_ms: u64) {
        let released = Arc::clone(self.released.get_or_init(Default::default));
        let mut disk = self.disk.lock();
        let kept = self.scheduler.lock().book.kept.clone();
        let kept = kept.iter().map(|(v, x)| (v.to_string(), x.to_string()));
        let kept = KeptOnDisk::new(kept.collect());
        *disk = Some(DiskTier::new(store, now_ms, released, kept));
    }

    /// Sets an exchange's counts to what the store holds for it (at start).
    pub(crate) fn restore_counts(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        count: u64,
        bytes: u64,
    ) {
        let mut inner = self.scheduler.lock();
        // Every message stored under its name is this incarnation's.
        let index = inner
            .book
            .index_of(vhost, exchange, exchange.incarnation(), 0);
        index.count += count as usize;
        index.bytes += bytes;
    }

    #[cfg(test)]
    /// Ids of disk-held messages kept in RAM (bounded by the window, not by how many are
    /// held), and how many are held on disk.
    pub(crate) fn disk_resident(&self) -> Option<(usize, u64)> {
        self.disk.lock().as_mut().map(|d| d.resident())
    }

    /// Submits the removal of stored held messages (released, cancelled, purged): the store's
    /// index hides them from now on (the writer retries a removal until it commits), so the
    /// disk tier may forget those it moved out. Never waits for the disk tier's lock.
    fn release_stored(&self, ids: Vec<DeadlineId>) {
        if let (false, Some(store)) = (ids.is_empty(), self.store.get()) {
            let ops = ids
                .iter()
                .map(|&id| dwellmq_store::Op::Release { id })
                .collect();
            store.submit_detached(ops);
            if let Some(released) = self.released.get() {
                released.note(&ids);
            }
        }
    }

    /// Keeps the stored messages of an exchange whose definition could not be restored: they
    /// stay on disk untouched (a restart that restores the exchange finds them).
    pub(crate) fn keep_unrestored(&self, vhost: &str, exchange: &str) {
        self.scheduler
            .lock()
            .book
            .kept
            .insert((ShortStr::from(vhost), ShortStr::from(exchange)));
    }

    /// A declare took back an exchange whose stored definition could not be restored, and
    /// its definition is committed at `now_ms`: the `count` messages (`bytes` of bodies)
    /// stored under its name before it are its own from now on, and the disk tier reads them:
    /// those that fell due meanwhile are released as a restart's catch-up would, oldest
    /// first at a bounded rate, the others on time.
    pub(crate) fn reattach_kept(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        (count, bytes): (u64, u64),
        now_ms: u64,
    ) {
        let key: ExchangeKey = (vhost.name.clone(), exchange.name.clone());
        // The disk tier's lock first (the lock order), so that no move-in comes between the
        // book and the tier.
        let mut disk = self.disk.lock();
        {
            let mut inner = self.scheduler.lock();
            if !inner.book.kept.remove(&key) {
                return;
            }
            let incarnation = exchange.incarnation();
            let index = inner.book.index_of(vhost, exchange, incarnation, 0);
            index.count += count as usize;
            index.bytes += bytes;
            // Stored messages of every sequence number before its own holds are its own too.
            inner
                .book
                .incarnations
                .entry(key.clone())
                .or_default()
                .insert(0, incarnation);
        }
        if let Some(disk) = disk.as_mut() {
            disk.retake(&vhost.name, &exchange.name, now_ms);
        }
        drop(disk);
        // The mover plans its next round anew.
        self.scheduler.wake();
    }

    /// Numbers new deadlines above every id the store holds (before anything is scheduled).
    pub(crate) fn reserve_below(&self, seq: u64) {
        self.scheduler.lock().core.reserve_below(seq);
    }

    /// Holds `message` until `due_ms`.
    #[cfg(test)]
    pub(crate) fn hold(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<Message>,
        due_ms: u64,
    ) {
        self.hold_confirmed(vhost, exchange, message, due_ms, None)
    }

    /// As `hold`; a durable exchange's message is written to the store (its commit counts on
    /// `ticket`, which holds the publisher's confirm). One due beyond the horizon is then held
    /// on disk only (its body in RAM only until its commit).
    pub(crate) fn hold_confirmed(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<Message>,
        due_ms: u64,
        ticket: Option<&Arc<PublishTicket>>,
    ) {
        // Woken once the locks are released.
        if self.hold_locked(vhost, exchange, message, due_ms, ticket) {
            self.scheduler.wake();
        }
    }

    /// As `hold_confirmed`; true when the timer thread must wake sooner than it planned.
    fn hold_locked(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<Message>,
        due_ms: u64,
        ticket: Option<&Arc<PublishTicket>>,
    ) -> bool {
        let store = self.store.get().filter(|_| exchange.durable);
        let original = store.is_some().then(|| Arc::clone(&message));
        // Packed outside the lock; the published message (and its charge) goes away.
        let message = Kept::new(message);
        let body_len = message.body_len() as u64;
        let mut disk_guard = store.map(|_| self.disk.lock());
        let mut guard = self.scheduler.lock();
        let inner = &mut *guard;
        let far = inner.core.horizon_ms() < due_ms;
        // The scheduler's now, for the store's bucketing of the due time.
        let held_at_ms = inner.core.horizon_ms().saturating_sub(HORIZON_MS);
        let to_disk = far && disk_guard.as_ref().is_some_and(|d| d.is_some());
        let next_wake = match (to_disk, self.mover_moves_disk()) {
            (false, _) => None,
            (true, false) => {
                self.next_wake_locked(disk_guard.as_mut().and_then(|d| d.as_mut()), inner)
            }
            // The mover's plan (it sleeps until then), set under the disk tier's lock.
            (true, true) => Some(self.mover_plan.load(std::sync::atomic::Ordering::Relaxed)),
        };
        let Some(index) = inner.index_for(vhost, exchange) else {
            // Deleted since it was routed to: the message goes with it.
            return false;
        };
        index.count += 1;
        index.bytes += body_len;
        let held = Held {
            target: Arc::clone(&index.target),
            message,
            stored: store.is_some(),
        };
        let incarnation = held.incarnation();
        let (id, wake) = if to_disk {
            // Only the store keeps it (its index shows it from the submission on).
            drop(held);
            let id = inner.core.allocate(due_ms);
            let wake = next_wake.is_none_or(|next| due_ms.saturating_sub(HORIZON_MS) < next);
            (id, wake)
        } else {
            self.memory.charge_bytes(held.message.charged_by_holder());
            let (id, wake) = inner.core.schedule(due_ms, Entry::Release(held));
            if store.is_some() {
                if let Some(disk) = disk_guard.as_mut().and_then(|d| d.as_mut()) {
                    disk.held_in_wheel(id);
                }
            }
            if inner.core.is_far(id) {
                if let Some(index) = inner.book.exchanges.get_mut(&incarnation) {
                    index.beyond.insert((id.due_ms, id.seq));
                }
            }
            return self.submit_hold(
                store,
                original,
                (vhost, exchange),
                id,
                held_at_ms,
                ticket,
                None,
                wake,
            );
        };
        let disk = disk_guard.as_mut().and_then(|d| d.as_mut());
        if let Some(disk) = disk {
            disk.hold(id);
        }
        // Under the disk tier's lock: the hold reaches the store (and its index) before any
        // release of it can, and before a refill can miss it.
        let on_disk = Some(FailedHold {
            disk: Arc::clone(&self.disk),
            scheduler: Arc::clone(&self.scheduler),
            incarnation,
            bytes: body_len,
        });
        self.submit_hold(
            store,
            original,
            (vhost, exchange),
            id,
            held_at_ms,
            ticket,
            on_disk,
            wake,
        )
    }

    /// Submits a durable exchange's held message to the store (nothing for a transient one).
    #[allow(clippy::too_many_arguments)]
    fn submit_hold(
        &self,
        store: Option<&Arc<dwellmq_store::Store>>,
        original: Option<Arc<Message>>,
        (vhost, exchange): (&Arc<VHost>, &Arc<Exchange>),
        id: DeadlineId,
        held_at_ms: u64,
        ticket: Option<&Arc<PublishTicket>>,
        on_disk: Option<FailedHold>,
        wake: bool,
    ) -> bool {
        let (Some(store), Some(original)) = (store, original) else {
            return wake;
        };
        let op = dwellmq_store::Op::Hold {
            id,
            held_at_ms,
            vhost: vhost.name.to_string(),
            exchange: exchange.name.to_string(),
            message: dwellmq_store::Payload::Message(original),
        };
        crate::broker::persist::submit_counted(store, vec![op], ticket, move |outcome| {
            if let Err(e) = outcome {
                tracing::warn!(error = %e, "storing a delayed message failed");
                if let Some(failed) = on_disk {
                    failed.correct(id);
                }
            }
        });
        wake
    }

    /// When the timer thread must next act.
    pub(crate) fn next_wake(&self) -> Option<u64> {
        if self.mover_moves_disk() {
            return self.scheduler.next_wake();
        }
        let mut disk = self.disk.lock();
        let mut inner = self.scheduler.lock();
        self.next_wake_locked(disk.as_mut(), &mut inner)
    }

    fn next_wake_locked(&self, disk: Option<&mut DiskTier>, inner: &mut Locked) -> Option<u64> {
        let scheduler = inner.core.next_wake();
        let disk = disk.and_then(|disk| disk_move_at(disk, inner));
        match (scheduler, disk) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Serves everything due at `now_ms` (the scheduler's round, with this holder as its
    /// delayed-exchange client). Returns how many messages were released.
    #[cfg(test)]
    pub(crate) fn release_due(&self, now_ms: u64) -> usize {
        self.scheduler.release_due(now_ms, self)
    }

    /// Starts a round of releases; with `any_stored` (a released message is in the store) the
    /// round is one store group: one commit holds the releases and the routed copies, so a
    /// crash can neither lose a released message nor deliver it twice.
    pub(crate) fn begin_releases<'a>(
        &'a self,
        any_stored: bool,
        scratch: &'a mut ReleaseScratch,
    ) -> ReleaseRound<'a> {
        let group = self
            .store
            .get()
            .filter(|_| any_stored)
            .map(|store| store.group());
        ReleaseRound {
            delayed: self,
            _group: group,
            scratch,
            released: 0,
            unroutable: 0,
            lateness: lateness::LatenessBatch::default(),
        }
    }

    /// Moves what is due within the horizon of `now_ms` into the wheel (the scheduler's
    /// move-in, then the disk tier's); returns whether it finished within `budget`.
    #[cfg(test)]
    pub(crate) fn move_in(&self, now_ms: u64, budget: Option<Duration>) -> bool {
        self.scheduler.move_in(now_ms, budget, self)
    }

    /// The disk tier's part of a move-in, unless the disk mover thread does it.
    pub(crate) fn move_in_from_disk_unless_mover(
        &self,
        now_ms: u64,
        budget: Option<Duration>,
        started: Instant,
    ) -> bool {
        if self.mover_moves_disk() {
            return true;
        }
        self.move_in_from_disk(now_ms, budget, started, &mut 0)
    }

    /// Moves the disk-held messages due within the horizon of `now_ms` into the wheel, a batch
    /// per lock hold, reading their bodies from the store. Stops early as `move_in` does.
    fn move_in_from_disk(
        &self,
        now_ms: u64,
        budget: Option<Duration>,
        started: Instant,
        moved: &mut usize,
    ) -> bool {
        let up_to = now_ms.saturating_add(HORIZON_MS);
        loop {
            self.refill_disk_ahead();
            // Bodies are read before the lock is taken for the move: a store read can take
            // milliseconds, and publishers to durable delayed exchanges wait for this lock.
            // Bodies of an older snapshot are safe to use: a body of an incarnation dropped
            // meanwhile finds no index, and is dropped.
            let mut read_ahead = self.read_upcoming(up_to);
            #[cfg(test)]
            if let Some(hook) = self.after_read_ahead.lock().take() {
                hook();
            }
            let mut disk_guard = self.disk.lock();
            let Some(disk) = disk_guard.as_mut() else {
                return true;
            };
            let mut moving: Vec<Leaving> = Vec::with_capacity(MOVE_IN_BATCH);
            while moving.len() < MOVE_IN_BATCH {
                match disk.pop_due(up_to) {
                    Ok(Some(leaving)) => moving.push(leaving),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::error!(error = %e, "reading the delayed index failed");
                        break;
                    }
                }
            }
            if moving.is_empty() {
                return true;
            }
            let bodies = match read_bodies(disk.store(), &moving, &mut read_ahead) {
                Ok(bodies) => bodies,
                Err(e) => {
                    tracing::error!(error = %e, "reading delayed messages failed; retried");
                    disk.put_back(moving.iter().map(|m| m.stored));
                    return true;
                }
            };
            *moved += moving.len();
            let mut guard = self.scheduler.lock();
            let inner = &mut *guard;
            let mut dropped = Vec::new();
            for (leaving, body) in moving.into_iter().zip(bodies) {
                let Some(stored) = body else {
                    // Its hold failed since the window took it in.
                    disk.vanished(leaving.stored);
                    continue;
                };
                let key: ExchangeKey = (
                    ShortStr::from(stored.vhost.as_str()),
                    ShortStr::from(stored.exchange.as_str()),
                );
                let index = inner.book.stored_index(&key, leaving.stored.seq);
                let held = index.map(|index| Held {
                    target: Arc::clone(&index.target),
                    message: Kept::Packed(stored.message),
                    stored: true,
                });
                if held.is_none() && inner.book.kept.contains(&key) {
                    // Its exchange's definition could not be restored: it stays on disk as it
                    // is, for the declare that takes the exchange back (the tier does not read
                    // kept exchanges' ids; this is a safety net, never a drop).
                    disk.leave_on_disk(leaving.stored);
                    continue;
                }
                let Some(held) = held else {
                    // Its incarnation is being dropped or gone.
                    dropped.push(leaving.stored);
                    continue;
                };
                held.message.warm_up();
                self.memory.charge_bytes(held.message.charged_by_holder());
                let scheduled = if leaving.scheduled == leaving.stored {
                    leaving.scheduled
                } else {
                    // Caught up with: numbered anew, so that those due in the same millisecond
                    // come out oldest first, and its stored id kept aside for its release.
                    let id = inner.core.allocate(leaving.scheduled.due_ms);
                    inner.book.stored_as.insert(id.seq, leaving.stored);
                    id
                };
                inner.core.restore(scheduled, Entry::Release(held));
            }
            let release_due = inner.core.wheel_due(now_ms);
            drop(guard);
            drop(disk_guard);
            self.release_stored(dropped);
            if budget.is_some() && release_due || budget.is_some_and(|b| started.elapsed() >= b) {
                return false;
            }
        }
    }

    /// The message to route at release; a packed one takes its memory charge along.
    fn message_to_release(&self, kept: Kept) -> Option<Arc<Message>> {
        match kept {
            Kept::Shared(message) => Some(message),
            Kept::Packed(packed) => {
                // Unpacked, it counts as a queued message: its charge grows to that.
                let (held, queued) = (
                    held_footprint(packed.body_len()),
                    message_footprint(packed.body_len()),
                );
                self.memory.charge_bytes(queued.saturating_sub(held));
                let guard = Box::new(self.memory.adopt(queued));
                let message = packed.unpack(Some(guard));
                if message.is_none() {
                    // Unreachable for a message packed in this process; a store could feed
                    // a corrupt one. Dropping it beats failing every release after it.
                    tracing::error!("a held message could not be unpacked and was dropped");
                }
                message
            }
        }
    }

    /// Drops a held message that will never be released (cancelled or purged).
    fn discard(&self, kept: Kept) {
        self.memory.release_bytes(kept.charged_by_holder());
    }
}

/// One round of releases ([`DelayedMessages::begin_releases`]).
pub(crate) struct ReleaseRound<'a> {
    delayed: &'a DelayedMessages,
    _group: Option<dwellmq_store::Group<'a>>,
    scratch: &'a mut ReleaseScratch,
    released: usize,
    unroutable: u64,
    lateness: lateness::LatenessBatch,
}

impl ReleaseRound<'_> {
    /// Routes one due message through its exchange's bindings as they are now.
    pub(crate) fn release(&mut self, now_ms: u64, id: DeadlineId, held: Held) {
        let delayed = self.delayed;
        self.released += 1;
        self.lateness.record(now_ms.saturating_sub(id.due_ms));
        let Target {
            vhost, exchange, ..
        } = &*held.target;
        if !held.target.is_current() {
            // Its exchange was purged or deleted, and the drop has not reached it yet.
            delayed.discard(held.message);
            return;
        }
        let Some(message) = delayed.message_to_release(held.message) else {
            return;
        };
        let ReleaseScratch {
            routing,
            extra_keys,
        } = &mut *self.scratch;
        let message = release::release_form(message, &delayed.memory, extra_keys);
        // Through the one publish pipeline, as a publish to the holder without a delay:
        // copies in durable queues join this round's store group with the releases.
        let outcome = crate::broker::publish::route_and_enqueue(
            vhost,
            crate::broker::publish::Outgoing {
                exchange,
                message: &message,
                routing_key: &message.routing_key,
                extra_keys,
                bcc: None,
                hold_until: None,
                mandatory: false,
                dead_lettered: false,
            },
            routing,
            None,
        );
        if outcome.dropped {
            self.unroutable += 1;
        }
    }

    /// Ends the round: the store removes the released messages it holds (`stored`: after
    /// their routed copies, in the same group); returns how many were released.
    pub(crate) fn finish(self, stored: Vec<DeadlineId>) -> usize {
        let delayed = self.delayed;
        delayed.release_stored(stored);
        if self.released > 0 {
            delayed.lateness.add(&self.lateness);
        }
        if self.unroutable > 0 {
            tracing::debug!(
                unroutable = self.unroutable,
                "delayed messages found no route at release and were dropped"
            );
            delayed.scheduler.lock().book.unroutable += self.unroutable;
        }
        self.released
    }
}

/// A hold on disk whose commit failed: what its completion needs to take it out of its
/// exchange's counts, if the disk tier still held it.
struct FailedHold {
    disk: Arc<Mutex<Option<DiskTier>>>,
    scheduler: Arc<Scheduler>,
    incarnation: u64,
    bytes: u64,
}

impl FailedHold {
    /// On the writer thread, after the failed commit (locks in the usual order).
    fn correct(self, id: DeadlineId) {
        let mut disk = self.disk.lock();
        if disk.as_mut().is_some_and(|disk| disk.hold_failed(id)) {
            self.scheduler
                .lock()
                .book
                .forget_counts(self.incarnation, 1, self.bytes);
        }
    }
}

/// When `disk`'s first message must move into the wheel (a horizon before it is due).
fn disk_move_at(disk: &mut DiskTier, inner: &mut Locked) -> Option<u64> {
    match disk.next() {
        Ok(next) => next.map(|id| id.due_ms.saturating_sub(HORIZON_MS)),
        Err(e) => {
            // Looked at again within a horizon.
            tracing::error!(error = %e, "reading the delayed index failed");
            Some(inner.core.horizon_ms())
        }
    }
}

/// Bodies read ahead of a move-in, by stored id.
type ReadAhead = BTreeMap<DeadlineId, dwellmq_store::DelayedMessage>;

impl DelayedMessages {
    /// Reads the bodies of the disk-held messages the next move-in up to `up_to_ms` takes out
    /// (the disk lock is held only to find their ids). A failed read leaves them to the
    /// move-in itself, which reports it.
    fn read_upcoming(&self, up_to_ms: u64) -> ReadAhead {
        let (ids, store) = {
            let mut disk = self.disk.lock();
            let Some(disk) = disk.as_mut() else {
                return ReadAhead::new();
            };
            match disk.upcoming_stored(up_to_ms, MOVE_IN_BATCH) {
                Ok(ids) if !ids.is_empty() => (ids, Arc::clone(disk.store())),
                _ => return ReadAhead::new(),
            }
        };
        let Ok(view) = store.held_view() else {
            return ReadAhead::new();
        };
        ids.into_iter()
            .filter_map(|id| Some((id, view.delayed_message(id).ok()??)))
            .collect()
    }
}

/// Reads the bodies of the messages moving in that were not read ahead, from one view.
fn read_bodies(
    store: &dwellmq_store::Store,
    moving: &[Leaving],
    read_ahead: &mut ReadAhead,
) -> Result<Vec<Option<dwellmq_store::DelayedMessage>>, dwellmq_store::StoreError> {
    let mut bodies: Vec<Option<dwellmq_store::DelayedMessage>> = moving
        .iter()
        .map(|m| read_ahead.remove(&m.stored))
        .collect();
    if bodies.iter().any(Option::is_none) {
        let view = store.held_view()?;
        for (m, body) in moving.iter().zip(bodies.iter_mut()) {
            if body.is_none() {
                *body = view.delayed_message(m.stored)?;
            }
        }
    }
    Ok(bodies)
}

impl Locked {
    /// The index of the exchange's current incarnation, made if it holds nothing yet; `None`
    /// once the exchange is deleted.
    fn index_for(
        &mut self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
    ) -> Option<&mut ExchangeIndex> {
        let incarnation = exchange.incarnation();
        if incarnation == RETIRED {
            return None;
        }
        let first_seq = self.core.next_seq();
        Some(self.book.index_of(vhost, exchange, incarnation, first_seq))
    }

    /// Cancels `id` for a purge (its index is gone already): notes its store id in `stored`
    /// if the store holds it.
    fn cancel_dropped(&mut self, id: DeadlineId, stored: &mut Vec<DeadlineId>) -> Option<Entry> {
        let entry = self.core.cancel(id)?;
        if let Entry::Release(held) = &entry {
            if held.stored {
                stored.push(self.book.stored_id(id));
            }
        }
        Some(entry)
    }
}

impl Book {
    /// A due message left the scheduler for release: out of its exchange's counts (and
    /// order, if it came from the far tier), its store id noted in `stored` if it is stored.
    pub(crate) fn taken(
        &mut self,
        held: &Held,
        id: DeadlineId,
        from_far_tier: bool,
        stored: &mut Vec<DeadlineId>,
    ) {
        self.forget(held, from_far_tier.then_some((id.due_ms, id.seq)));
        if held.stored {
            stored.push(self.stored_id(id));
        }
    }

    /// A message moved from the far tier into the wheel: touched, so that its release a
    /// horizon later finds it warm, and out of its exchange's far-tier order.
    pub(crate) fn moved_in(&mut self, id: DeadlineId, held: &Held) {
        held.message.warm_up();
        if let Some(index) = self.exchanges.get_mut(&held.incarnation()) {
            index.beyond.remove(&(id.due_ms, id.seq));
        }
    }

    /// The index of incarnation `incarnation` of the exchange, made (its stored messages
    /// numbered from `first_seq` on) if it holds nothing yet.
    fn index_of(
        &mut self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        incarnation: u64,
        first_seq: u64,
    ) -> &mut ExchangeIndex {
        let Book {
            exchanges,
            incarnations,
            ..
        } = self;
        exchanges.entry(incarnation).or_insert_with(|| {
            let target = Target::new(vhost, exchange, incarnation);
            incarnations
                .entry(target.key.clone())
                .or_default()
                .insert(first_seq, incarnation);
            ExchangeIndex {
                target,
                beyond: BTreeSet::new(),
                count: 0,
                bytes: 0,
                first_seq,
            }
        })
    }

    /// The incarnation a message the store holds for exchange `key` under sequence number
    /// `seq` belongs to, if it is known (holding messages, or being dropped).
    fn stored_incarnation(&self, key: &ExchangeKey, seq: u64) -> Option<u64> {
        let by_first_seq = self.incarnations.get(key)?;
        by_first_seq.range(..=seq).next_back().map(|(_, &inc)| inc)
    }

    /// The index of the incarnation a stored message belongs to; `None` when that one is
    /// being dropped or gone.
    fn stored_index(&self, key: &ExchangeKey, seq: u64) -> Option<&ExchangeIndex> {
        self.exchanges.get(&self.stored_incarnation(key, seq)?)
    }

    /// The index of the exchange `key`'s current incarnation, if it holds anything.
    fn current(&self, key: &ExchangeKey) -> Option<&ExchangeIndex> {
        let by_first_seq = self.incarnations.get(key)?;
        by_first_seq
            .values()
            .rev()
            .filter_map(|inc| self.exchanges.get(inc))
            .find(|index| index.target.is_current())
    }

    /// Forgets an incarnation's place among its name's ([`Book::incarnations`]): it holds
    /// nothing any more.
    fn forget_incarnation(&mut self, key: &ExchangeKey, first_seq: u64) {
        if let Some(by_first_seq) = self.incarnations.get_mut(key) {
            by_first_seq.remove(&first_seq);
            if by_first_seq.is_empty() {
                self.incarnations.remove(key);
            }
        }
    }

    /// Removes an incarnation's index once it counts no message.
    fn remove_index(&mut self, incarnation: u64) {
        if let Some(index) = self.exchanges.remove(&incarnation) {
            self.forget_incarnation(&index.target.key, index.first_seq);
        }
    }

    /// The store's id of a held message the scheduler knows as `scheduled`.
    fn stored_id(&mut self, scheduled: DeadlineId) -> DeadlineId {
        self.stored_as.remove(&scheduled.seq).unwrap_or(scheduled)
    }

    /// Takes `count` messages of `bytes` body octets in all out of their incarnation's counts,
    /// and the index with them once it counts none (nothing if it is being dropped).
    fn forget_counts(&mut self, incarnation: u64, count: usize, bytes: u64) {
        if let Some(index) = self.exchanges.get_mut(&incarnation) {
            if index.uncount(count, bytes) {
                self.remove_index(incarnation);
            }
        }
    }

    /// Takes a message leaving the holder out of its exchange's counts (and, for one still in
    /// the far tier, out of its exchange's due order).
    fn forget(&mut self, held: &Held, beyond: Option<(u64, u64)>) {
        // One lookup per release (a number, not a name): this runs for every message released.
        let incarnation = held.incarnation();
        let Some(index) = self.exchanges.get_mut(&incarnation) else {
            return;
        };
        if let Some(due_seq) = beyond {
            index.beyond.remove(&due_seq);
        }
        if index.uncount(1, held.message.body_len() as u64) {
            self.remove_index(incarnation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::exchange::{DeclaredBy, DeclaredType};
    use crate::broker::queue::Queue;
    use crate::broker::vhost::{ExchangeSpec, QueueSpec};
    use dwellmq_codec::{BasicProperties, FieldTable, FieldValue};
    use dwellmq_core::routing::{Binding, Destination};

    /// A vhost with a delayed fanout exchange `d` bound to queue `q`.
    fn setup() -> (Arc<VHost>, Arc<Exchange>, Arc<Queue>) {
        setup_with(false)
    }

    /// As [`setup`], with the exchange durable or not (the disk tier's tests use a durable
    /// one).
    pub(super) fn setup_with(durable: bool) -> (Arc<VHost>, Arc<Exchange>, Arc<Queue>) {
        let vhost = Arc::new(VHost::new("/".into()));
        let (exchange, queue) = declare_bound(&vhost, durable, "q");
        (vhost, exchange, queue)
    }

    /// Declares the delayed fanout exchange `d` (durable or not) and a queue named `queue`
    /// bound to it.
    pub(super) fn declare_bound(
        vhost: &Arc<VHost>,
        durable: bool,
        queue: &str,
    ) -> (Arc<Exchange>, Arc<Queue>) {
        let exchange = vhost
            .declare_exchange(ExchangeSpec {
                name: "d".into(),
                kind: DeclaredType::Delayed,
                passive: false,
                durable,
                auto_delete: false,
                internal: false,
                arguments: [("x-delayed-type", FieldValue::from("fanout"))]
                    .into_iter()
                    .collect(),
                declared_by: DeclaredBy::user("guest"),
            })
            .unwrap();
        let spec = QueueSpec {
            name: queue.into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
        };
        let bound = vhost.declare_queue(spec, 1).unwrap();
        vhost
            .bind(Binding {
                source: "d".into(),
                destination: Destination::Queue(queue.into()),
                routing_key: "".into(),
                arguments: FieldTable::new(),
            })
            .unwrap();
        (exchange, bound)
    }

    fn message(body: &'static [u8]) -> Arc<Message> {
        Message::new(
            "d".into(),
            "k".into(),
            BasicProperties::default(),
            bytes::Bytes::from_static(body).into(),
            None,
        )
    }

    #[test]
    fn a_release_racing_an_exchange_deletion_drops_the_message() {
        let (vhost, exchange, queue) = setup();
        let memory = MemoryMonitor::new(u64::MAX);
        let delayed = DelayedMessages::new(0, Arc::clone(&memory));
        delayed.hold(&vhost, &exchange, message(b"near"), 10);
        delayed.hold(&vhost, &exchange, message(b"far"), 5_000);
        assert_eq!(
            memory.used() as usize,
            held_footprint(4) + held_footprint(3)
        );
        // Deleted, and its purge not yet done: what falls due meanwhile must not be routed
        // through the dead exchange's bindings.
        vhost.delete_exchange("d", false).unwrap();
        assert_eq!(delayed.release_due(10), 1);
        assert_eq!(queue.message_count(&*vhost), 0);
        assert_eq!(delayed.unroutable(), 0);
        assert_eq!(delayed.forget_exchange(&"/".into(), &"d".into()), 1);
        assert_eq!(delayed.len(), 0);
        assert_eq!(memory.used(), 0);
    }

    #[test]
    fn moving_in_is_bounded_by_the_budget_and_release_catches_up() {
        let (vhost, exchange, queue) = setup();
        let delayed = DelayedMessages::new(0, MemoryMonitor::new(u64::MAX));
        for _ in 0..100 {
            delayed.hold(&vhost, &exchange, message(b"m"), 1_500);
        }
        delayed.hold(&vhost, &exchange, message(b"m"), 1_700);
        // Nothing moved in yet: the timer must wake when the first one enters the horizon.
        assert_eq!(delayed.next_wake(), Some(500));
        // A spent budget stops after one batch, and the timer is still needed at once.
        assert!(!delayed.move_in(600, Some(Duration::ZERO)));
        assert_eq!(delayed.next_wake(), Some(500));
        assert!(delayed.move_in(600, None));
        // Now the wheel's earliest (1500) or the next move-in (1700 - horizon), whichever first.
        assert_eq!(delayed.next_wake(), Some(700));
        // Released straight from either tier once due, even with no move-in in between.
        delayed.hold(&vhost, &exchange, message(b"m"), 9_000);
        assert_eq!(delayed.release_due(10_000), 102);
        assert_eq!(queue.message_count(&*vhost), 102);
        assert_eq!(delayed.next_wake(), None);
    }
}
