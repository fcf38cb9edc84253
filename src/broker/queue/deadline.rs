//! A queue as a client of the broker's scheduler: its tick at its next deadline (message TTL,
//! `x-expires`, a delayed retry, its kept dead letters' retry), and the test double's delayed
//! deliveries into it. Each deadline carries the queue's owner beside the queue (both weak):
//! the owner carries out what the tick or the delivery hands up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use dwellmq_core::Message;

use super::owner::QueueOwner;
use super::Queue;
use crate::broker::scheduler::{DueOnce, Holder, Scheduler};

impl Queue {
    /// Ticks this queue at or after `at_ms` (the scheduler wakes its timer itself when this
    /// is its earliest deadline). The queue's state arms only a deadline earlier than the one
    /// armed, so a queue has few ticks in the scheduler at once; one that finds nothing due
    /// arms nothing.
    pub(crate) fn arm<H: Holder>(
        self: &Arc<Self>,
        scheduler: &Scheduler<H>,
        owner: Weak<dyn QueueOwner>,
        at_ms: u64,
    ) {
        let tick = QueueTick {
            queue: Arc::downgrade(self),
            owner,
        };
        scheduler.arm_once(at_ms, Box::new(tick));
    }

    /// Holds `message` back from this queue until `due_ms` (a delivery-delay fault), counted
    /// in `pending` while it waits.
    pub(crate) fn deliver_later<H: Holder>(
        self: &Arc<Self>,
        scheduler: &Scheduler<H>,
        owner: Weak<dyn QueueOwner>,
        message: Arc<Message>,
        due_ms: u64,
        pending: &Arc<AtomicUsize>,
    ) {
        let delivery = DelayedDelivery::new(self, owner, message, pending);
        scheduler.arm_once(due_ms, Box::new(delivery));
    }
}

/// A queue's tick: the queue works out which of its deadlines came, if it and its owner are
/// still there.
struct QueueTick {
    queue: Weak<Queue>,
    owner: Weak<dyn QueueOwner>,
}

impl DueOnce for QueueTick {
    fn due(self: Box<Self>, _now_ms: u64) {
        if let (Some(queue), Some(owner)) = (self.queue.upgrade(), self.owner.upgrade()) {
            queue.tick(&*owner);
        }
    }
}

/// One message a delivery-delay fault holds: entered into its queue when due, unless the
/// queue is gone by then.
struct DelayedDelivery {
    queue: Weak<Queue>,
    owner: Weak<dyn QueueOwner>,
    message: Arc<Message>,
    /// The fault's count of waiting messages.
    pending: Arc<AtomicUsize>,
}

impl DelayedDelivery {
    /// Counts itself into `pending` until it is delivered or dropped.
    fn new(
        queue: &Arc<Queue>,
        owner: Weak<dyn QueueOwner>,
        message: Arc<Message>,
        pending: &Arc<AtomicUsize>,
    ) -> Self {
        pending.fetch_add(1, Ordering::Relaxed);
        DelayedDelivery {
            queue: Arc::downgrade(queue),
            owner,
            message,
            pending: Arc::clone(pending),
        }
    }
}

impl DueOnce for DelayedDelivery {
    fn due(self: Box<Self>, _now_ms: u64) {
        if let (Some(queue), Some(owner)) = (self.queue.upgrade(), self.owner.upgrade()) {
            queue.publish(&*owner, Arc::clone(&self.message));
        }
    }
}

impl Drop for DelayedDelivery {
    fn drop(&mut self) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
    }
}
