//! The broker's one deadline scheduler: it owns core's [`Scheduler`](CoreScheduler) and the
//! timer's wake, and serves every deadline in due order. Its clients:
//!
//! - queues arm a tick at their next deadline (message TTL, `x-expires`, a delayed retry):
//!   [`Scheduler::arm_queue`];
//! - the test double's delivery-delay fault holds a message back from its queue:
//!   [`Scheduler::deliver_later`];
//! - delayed exchanges hold messages until their due time and release them
//!   ([`super::delayed::DelayedMessages`]). Their per-exchange book lives beside the core
//!   scheduler under its one lock ([`Locked`]): a release takes a message out of the wheel
//!   and out of its exchange's counts in one lock hold, as cheap as before the split.
//!
//! The wake: under the system clock the timer thread (`super::timer_thread`) sleeps until the
//! next deadline and is unparked by a client whose deadline is earlier than planned; under a
//! manual clock there is no thread, and `BrokerHandle::advance` serves the rounds itself.

mod deliveries;
mod incarnation;

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use dwellmq_core::schedule::{Due, MoveIn, Scheduler as CoreScheduler};
use dwellmq_core::Message;
use parking_lot::{Mutex, MutexGuard};

use super::delayed::{Book, DelayedMessages, Held, ReleaseScratch};
use super::queue::{Queue, QueueOwner};
use super::timer_thread::TimerControl;
pub(crate) use deliveries::DelayedDelivery;
pub(crate) use incarnation::{next_incarnation, RETIRED};

/// Messages moved into the wheel per lock hold: publishers wait for the lock meanwhile.
pub(crate) const MOVE_IN_BATCH: usize = 64;

/// What the scheduler holds.
pub(crate) enum Entry {
    /// A delayed exchange's message (deadline kind `DelayedRelease`).
    Release(Held),
    /// A queue's next deadline (kinds `MessageExpiry`, `QueueExpiry`, `RetryReady`): the queue
    /// works out which when it ticks, and its owner carries out what the tick hands up.
    Tick(Weak<Queue>, Weak<dyn QueueOwner>),
    /// A message held back from its queue by an injected fault.
    Deliver(DelayedDelivery),
}

/// What the scheduler's lock guards: the core scheduler, and the delayed exchanges' book that
/// must change with it in the same lock hold.
pub(crate) struct Locked {
    pub(crate) core: CoreScheduler<Entry>,
    pub(crate) book: Book,
}

/// Buffers a round reuses, so that serving deadlines allocates nothing in steady state.
#[derive(Default)]
struct RoundScratch {
    due: Vec<Due<Entry>>,
    ticked: Vec<Arc<Queue>>,
    release: ReleaseScratch,
}

/// Every deadline of one broker.
pub(crate) struct Scheduler {
    state: Mutex<Locked>,
    timer: Arc<TimerControl>,
    /// Taken before `state` by the one serving thread at a time.
    scratch: Mutex<RoundScratch>,
}

impl Scheduler {
    pub(crate) fn new(now_ms: u64, timer: Arc<TimerControl>) -> Self {
        Scheduler {
            state: Mutex::new(Locked {
                core: CoreScheduler::new(now_ms),
                book: Book::default(),
            }),
            timer,
            scratch: Mutex::new(RoundScratch::default()),
        }
    }

    /// The core scheduler and the delayed book, for the delayed-exchange client. Lock order:
    /// a delayed exchange's disk tier before this; never a queue's lock while this is held.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Locked> {
        self.state.lock()
    }

    /// Makes the timer thread (and the disk mover) look at their deadlines again.
    pub(crate) fn wake(&self) {
        self.timer.wake();
    }

    /// Ticks `queue` (with `owner`) at or after `at_ms`.
    pub(crate) fn arm_queue(&self, at_ms: u64, queue: &Arc<Queue>, owner: Weak<dyn QueueOwner>) {
        let entry = Entry::Tick(Arc::downgrade(queue), owner);
        let (_, sooner) = self.state.lock().core.schedule(at_ms, entry);
        if sooner {
            self.wake();
        }
    }

    /// Holds `message` back from `queue` until `due_ms` (a delivery-delay fault), counted in
    /// `pending` while it waits.
    pub(crate) fn deliver_later(
        &self,
        queue: &Arc<Queue>,
        owner: Weak<dyn QueueOwner>,
        message: Arc<Message>,
        due_ms: u64,
        pending: &Arc<std::sync::atomic::AtomicUsize>,
    ) {
        let entry = Entry::Deliver(DelayedDelivery::new(queue, owner, message, pending));
        let (_, sooner) = self.state.lock().core.schedule(due_ms, entry);
        if sooner {
            self.wake();
        }
    }

    /// The core scheduler's next deadline (a release, a tick, or a move-in from its far tier).
    pub(crate) fn next_wake(&self) -> Option<u64> {
        self.state.lock().core.next_wake()
    }

    /// Serves everything due at `now_ms` in due order (schedule order within a millisecond):
    /// queues are ticked (each once per round: one tick serves all its deadlines due now),
    /// faults deliver, and `delayed` releases its messages. Returns how many messages were
    /// released.
    pub(crate) fn release_due(&self, now_ms: u64, delayed: &DelayedMessages) -> usize {
        let mut scratch = self.scratch.lock();
        let RoundScratch {
            due,
            ticked,
            release,
        } = &mut *scratch;
        let mut stored = Vec::new();
        {
            let mut guard = self.state.lock();
            let Locked { core, book } = &mut *guard;
            core.take_due(now_ms, due);
            for d in due.iter() {
                if let Entry::Release(held) = &d.item {
                    book.taken(held, d.id, d.from_far_tier, &mut stored);
                }
            }
        }
        let mut round = delayed.begin_releases(!stored.is_empty(), release);
        for Due { id, item, .. } in due.drain(..) {
            match item {
                Entry::Release(held) => round.release(now_ms, id, held),
                Entry::Tick(queue, owner) => {
                    if let (Some(queue), Some(owner)) = (queue.upgrade(), owner.upgrade()) {
                        if !ticked.iter().any(|q| Arc::ptr_eq(q, &queue)) {
                            queue.tick(&*owner);
                            ticked.push(queue);
                        }
                    }
                }
                Entry::Deliver(delivery) => delivery.deliver(),
            }
        }
        ticked.clear();
        round.finish(stored)
    }

    /// Moves the deadlines due within the horizon of `now_ms` from the far tier into the
    /// wheel, in (due, sequence) order and in batches (held messages are touched, so that
    /// their release finds them warm), then `delayed`'s disk-held ones. Stops early once
    /// `budget` is spent or a moved deadline is already due; returns whether it finished.
    pub(crate) fn move_in(
        &self,
        now_ms: u64,
        budget: Option<Duration>,
        delayed: &DelayedMessages,
    ) -> bool {
        let started = Instant::now();
        loop {
            let mut guard = self.state.lock();
            let Locked { core, book } = &mut *guard;
            let round = core.move_in(now_ms, MOVE_IN_BATCH, |id, entry| {
                if let Entry::Release(held) = entry {
                    book.moved_in(id, held);
                }
            });
            if round == MoveIn::Done {
                drop(guard);
                return delayed.move_in_from_disk_unless_mover(now_ms, budget, started);
            }
            // Moved-in deadlines already due (moving in fell behind) are served first.
            let release_due = core.wheel_due(now_ms);
            drop(guard);
            if release_due || budget.is_some_and(|b| started.elapsed() >= b) {
                return false;
            }
        }
    }
}
