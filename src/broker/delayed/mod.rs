//! Messages held by `x-delayed-message` exchanges until their due time: the holder client of
//! the broker's one scheduler ([`crate::broker::scheduler`]), which owns the deadlines and the
//! wake, and keeps the held messages inside its entries.
//!
//! The scheduler keeps what is due within its horizon in a timer wheel and the rest in a far
//! tier ordered by (due time, sequence); this module adds what is particular to delayed
//! exchanges: per-exchange counts and due order (listing, purge, kept in the [`Book`] beside
//! the core scheduler), memory accounting, the disk tier of durable exchanges, and the release
//! ([`release`]) through the exchange's bindings as they are then.
//!
//! - [`hold`]: a published message is held (in the scheduler, or on disk only);
//! - [`release`]: a due one is released, and everything a release touches;
//! - [`disk`]: the disk tier and its moving in;
//! - [`cancel`], [`relocate`] (move one to another due time), [`purge`], [`listing`]: what an
//!   operator does and sees.
//!
//! Small messages are held packed ([`dwellmq_core::PackedMessage`]): a message that waits a
//! minute must not keep the publisher's whole read buffer alive for that minute.

mod book;
mod cancel;
mod disk;
mod held;
mod hold;
mod info;
pub(crate) mod lateness;
mod listing;
mod purge;
mod release;
mod relocate;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use dwellmq_codec::ShortStr;
use dwellmq_core::schedule::DeadlineId;
use parking_lot::Mutex;

use super::exchange::Exchange;
use super::memory::MemoryMonitor;
#[cfg(test)]
use super::scheduler::TimerControl;
use super::scheduler::RETIRED;
use super::vhost::VHost;
pub(crate) use book::Book;
use disk::{DiskTier, KeptOnDisk, ReleasedIds};
use held::{ExchangeKey, Kept};
pub use info::{DelayedId, DelayedMessageInfo, ParseDelayedIdError};
pub(crate) use listing::ListPage;
pub(crate) use purge::PauseAt;
pub use relocate::{DelayedMove, MoveDelayedError};

/// The broker's scheduler, with the delayed exchanges as its holder.
pub(crate) type Scheduler = super::scheduler::Scheduler<DelayedMessages>;
/// The scheduler's locked state: its entries and the delayed exchanges' book.
pub(crate) type Locked = super::scheduler::Locked<DelayedMessages>;

/// Every message held by every delayed exchange of one broker.
pub(crate) struct DelayedMessages {
    /// This holder, for the scheduler to call back (its disk tier's move-ins).
    me: Weak<DelayedMessages>,
    /// Messages of durable exchanges held on disk beyond the horizon (with a store). Taken
    /// before the scheduler's lock when both are needed.
    disk: Arc<Mutex<Option<DiskTier>>>,
    /// Where stored ids are noted once their `Release` is submitted, for the disk tier to
    /// forget them as moved out (set with the disk tier: nobody drains it without one).
    released: OnceLock<Arc<ReleasedIds>>,
    /// The disk mover thread moves the disk tier's messages into the wheel (system clock with
    /// a store): the timer thread then never waits on `disk` or on a store read.
    disk_mover: AtomicBool,
    /// The earliest move-in of the disk tier armed in the scheduler and not yet come
    /// (`u64::MAX`: none). A hold or a plan arms another only when it must move in sooner.
    disk_armed: AtomicU64,
    /// The broker's scheduler, whose lock guards the held messages' book too.
    scheduler: Arc<Scheduler>,
    memory: Arc<MemoryMonitor>,
    /// How late messages were released.
    pub(crate) lateness: lateness::Lateness,
    /// The durable store: messages held by durable exchanges are written there (set once,
    /// at start, when the broker has a data directory).
    store: OnceLock<Arc<dwellmq_store::Store>>,
    /// Purges stopped once begun, while the test double pauses them (`None`: not paused).
    paused_purges: Mutex<Option<purge::PausedPurges>>,
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

fn delayed_id(id: DeadlineId) -> DelayedId {
    DelayedId {
        due_ms: id.due_ms,
        seq: id.seq,
    }
}

/// The id after `id` in (due, seq) order.
fn successor(id: DeadlineId) -> DeadlineId {
    match id.seq.checked_add(1) {
        Some(seq) => DeadlineId { seq, ..id },
        None => DeadlineId {
            due_ms: id.due_ms.saturating_add(1),
            seq: 0,
        },
    }
}

impl DelayedMessages {
    /// A holder with a scheduler of its own that wakes no thread (tests of this module).
    #[cfg(test)]
    pub(crate) fn new(now_ms: u64, memory: Arc<MemoryMonitor>) -> Arc<Self> {
        let timer = Arc::new(TimerControl::default());
        Self::with_scheduler(Arc::new(Scheduler::new(now_ms, timer)), memory)
    }

    /// A holder whose deadlines `scheduler` serves.
    pub(crate) fn with_scheduler(
        scheduler: Arc<Scheduler>,
        memory: Arc<MemoryMonitor>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| DelayedMessages {
            me: Weak::clone(me),
            disk: Arc::new(Mutex::new(None)),
            released: OnceLock::new(),
            disk_mover: AtomicBool::new(false),
            disk_armed: AtomicU64::new(u64::MAX),
            scheduler,
            memory,
            lateness: lateness::Lateness::default(),
            store: OnceLock::new(),
            paused_purges: Mutex::new(None),
            #[cfg(test)]
            after_read_ahead: Mutex::new(None),
        })
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
    /// disk tier's deadlines in the scheduler only wake it.
    pub(crate) fn hand_disk_to_mover(&self) {
        self.disk_mover.store(true, Ordering::Release);
    }

    fn mover_moves_disk(&self) -> bool {
        self.disk_mover.load(Ordering::Acquire)
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
        let wake = self.plan_disk_move(disk.as_mut(), &mut self.scheduler.lock(), None);
        drop(disk);
        if wake {
            self.scheduler.wake();
        }
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
        if let Some(tier) = disk.as_mut() {
            tier.retake(&vhost.name, &exchange.name, now_ms);
        }
        // Its catch-up may move in sooner than planned.
        self.plan_disk_move(disk.as_mut(), &mut self.scheduler.lock(), None);
        drop(disk);
        // The mover plans its next round anew.
        self.scheduler.wake();
    }

    /// Numbers new deadlines above every id the store holds (before anything is scheduled).
    pub(crate) fn reserve_below(&self, seq: u64) {
        self.scheduler.lock().core.reserve_below(seq);
    }

    /// When the scheduler must next act (the disk tier's move-ins are its deadlines too).
    pub(crate) fn next_wake(&self) -> Option<u64> {
        self.scheduler.next_wake()
    }

    /// Held messages that found no route when released (dropped), since start.
    pub(crate) fn unroutable(&self) -> u64 {
        self.scheduler.lock().book.unroutable
    }

    /// Counts unroutable releases from zero again (a reset between tests).
    pub(crate) fn clear_unroutable(&self) {
        self.scheduler.lock().book.unroutable = 0;
    }

    /// Messages held by all delayed exchanges.
    pub(crate) fn len(&self) -> usize {
        self.scheduler
            .lock()
            .book
            .exchanges
            .values()
            .map(|i| i.count)
            .sum()
    }

    /// Drops a held message that will never be released (cancelled or purged).
    fn discard(&self, kept: Kept) {
        self.memory.release_bytes(kept.charged_by_holder());
    }
}

/// What the tests of this module drive by hand.
#[cfg(test)]
impl DelayedMessages {
    /// Holds `message` until `due_ms`.
    pub(crate) fn hold(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<dwellmq_core::Message>,
        due_ms: u64,
    ) {
        self.hold_confirmed(vhost, exchange, message, due_ms, None)
    }

    /// Serves everything due at `now_ms` (the scheduler's round, with this holder as its
    /// client). Returns how many messages were released.
    pub(crate) fn release_due(&self, now_ms: u64) -> usize {
        self.scheduler.release_due(now_ms, self)
    }

    /// Moves what is due within the horizon of `now_ms` into the wheel (the scheduler's
    /// move-in, then the disk tier's, unless the disk mover does that); returns whether it
    /// finished within `budget`.
    pub(crate) fn move_in(&self, now_ms: u64, budget: Option<std::time::Duration>) -> bool {
        let started = std::time::Instant::now();
        if !self.scheduler.move_in(now_ms, budget) {
            return false;
        }
        self.mover_moves_disk() || self.move_in_from_disk(now_ms, budget, started, &mut 0)
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_disk;
#[cfg(test)]
mod tests_kept;
#[cfg(test)]
mod tests_model;
#[cfg(test)]
mod tests_move;
