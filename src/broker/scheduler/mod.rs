//! The broker's one deadline scheduler: it owns core's [`Scheduler`](CoreScheduler) and the
//! timer's wake, and serves every deadline in due order. It knows its clients only by the
//! traits in [`client`]:
//!
//! - a [`DeadlineClient`] arms a callback at a deadline ([`Locked::arm`]): a disk tier's next
//!   move-in;
//! - a [`DueOnce`] owns its work ([`Scheduler::arm_once`]): a queue's tick (message TTL,
//!   `x-expires`, a delayed retry; it carries the queue and its owner, both weak), the test
//!   double's delayed deliveries;
//! - its [`Holder`] keeps items inside the entries themselves (the delayed exchanges' held
//!   messages), with a book of them beside the core scheduler under its one lock
//!   ([`Locked`]): a release takes a message out of the wheel and out of its exchange's
//!   counts in one lock hold.
//!
//! Serving is one loop for every driver ([`driver`]): under the system clock the timer thread
//! (`super::timer_thread`) sleeps until the next deadline and is unparked by a client whose
//! deadline is earlier than planned; under a manual clock `BrokerHandle::advance` steps the
//! clock from deadline to deadline.

mod client;
mod driver;
mod incarnation;
mod round;
mod wake;

use std::sync::{Arc, Weak};

use dwellmq_core::schedule::{DeadlineId, Due, Scheduler as CoreScheduler};
use parking_lot::{Mutex, MutexGuard};

pub(crate) use client::{DeadlineClient, DueOnce, HeldRound, Holder};
pub(crate) use driver::Drive;
pub(crate) use incarnation::{next_incarnation, RETIRED};
pub(crate) use wake::TimerControl;

/// Items moved into the wheel per lock hold: publishers wait for the lock meanwhile.
pub(crate) const MOVE_IN_BATCH: usize = 64;

/// What the scheduler holds.
pub(crate) enum Entry<T> {
    /// The holder's item (a delayed exchange's message).
    Held(T),
    /// A client called back when due (a queue works out which of its deadlines came).
    Client(Weak<dyn DeadlineClient>),
    /// A deadline owning its work.
    Once(Box<dyn DueOnce>),
}

/// What the scheduler's lock guards: the core scheduler, and the holder's book that must
/// change with it in the same lock hold.
pub(crate) struct Locked<H: Holder> {
    pub(crate) core: CoreScheduler<Entry<H::Item>>,
    pub(crate) book: H::Book,
}

/// Buffers a round reuses, so that serving deadlines allocates nothing in steady state.
struct RoundScratch<H: Holder> {
    due: Vec<Due<Entry<H::Item>>>,
    /// Clients called this round (each once).
    called: Vec<Arc<dyn DeadlineClient>>,
    holder: H::Scratch,
}

impl<H: Holder> Default for RoundScratch<H> {
    fn default() -> Self {
        RoundScratch {
            due: Vec::new(),
            called: Vec::new(),
            holder: H::Scratch::default(),
        }
    }
}

/// Every deadline of one broker; `H` is the client that keeps its items in the entries.
pub(crate) struct Scheduler<H: Holder> {
    state: Mutex<Locked<H>>,
    timer: Arc<TimerControl>,
    /// Taken before `state` by the one serving thread at a time.
    scratch: Mutex<RoundScratch<H>>,
}

impl<H: Holder> Scheduler<H> {
    pub(crate) fn new(now_ms: u64, timer: Arc<TimerControl>) -> Self {
        Scheduler {
            state: Mutex::new(Locked {
                core: CoreScheduler::new(now_ms),
                book: H::Book::default(),
            }),
            timer,
            scratch: Mutex::new(RoundScratch::default()),
        }
    }

    /// The core scheduler and the holder's book. Lock order: a delayed exchange's disk tier
    /// before this; never a queue's lock while this is held.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Locked<H>> {
        self.state.lock()
    }

    /// Makes the timer thread (and the disk mover) look at their deadlines again.
    pub(crate) fn wake(&self) {
        self.timer.wake();
    }

    /// Makes the timer thread alone look at its deadlines again.
    pub(crate) fn wake_timer(&self) {
        self.timer.wake_timer();
    }

    /// Makes the disk mover look at its work again.
    pub(crate) fn wake_mover(&self) {
        self.timer.wake_mover();
    }

    /// Runs `work` at or after `at_ms`.
    pub(crate) fn arm_once(&self, at_ms: u64, work: Box<dyn DueOnce>) {
        self.schedule(at_ms, Entry::Once(work));
    }

    fn schedule(&self, at_ms: u64, entry: Entry<H::Item>) {
        let (_, sooner) = self.state.lock().core.schedule(at_ms, entry);
        if sooner {
            self.wake();
        }
    }

    /// The next deadline: a release, a callback, or a move-in from the far tier.
    pub(crate) fn next_wake(&self) -> Option<u64> {
        self.state.lock().core.next_wake()
    }
}

impl<H: Holder> Locked<H> {
    /// Calls `client` back at or after `at_ms`, in this lock hold; true when the earliest
    /// deadline moved earlier (the caller wakes the timer once the lock is released).
    pub(crate) fn arm(&mut self, at_ms: u64, client: Weak<dyn DeadlineClient>) -> bool {
        self.core.schedule(at_ms, Entry::Client(client)).1
    }

    /// The holder's item `id`, wherever it is (`None` for another kind of entry).
    pub(crate) fn held(&self, id: DeadlineId) -> Option<&H::Item> {
        match self.core.get(id)? {
            Entry::Held(item) => Some(item),
            _ => None,
        }
    }

    /// Takes the holder's item `id` out, wherever it is; `None` if it is not one of its items.
    pub(crate) fn take_held(&mut self, id: DeadlineId) -> Option<H::Item> {
        self.held(id)?;
        match self.core.cancel(id)? {
            Entry::Held(item) => Some(item),
            _ => None,
        }
    }
}
