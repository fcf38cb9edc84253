//! A queue as a client of the broker's scheduler: its tick at its next deadline (message TTL,
//! `x-expires`, a delayed retry, its kept dead letters' retry), and the test double's delayed
//! deliveries into it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use dwellmq_core::Message;

use super::Queue;
use crate::broker::scheduler::{DeadlineClient, DueOnce};

impl DeadlineClient for Queue {
    fn due(self: Arc<Self>, _now_ms: u64) {
        // The queue works out which of its deadlines came.
        self.tick();
    }
}

impl Queue {
    /// Ticks this queue at or after `at_ms` (the scheduler wakes its timer itself when this
    /// is its earliest deadline).
    pub(crate) fn arm(self: &Arc<Self>, at_ms: u64) {
        let client: Weak<dyn DeadlineClient> = Arc::downgrade(self) as Weak<Queue>;
        self.runtime.scheduler.arm(at_ms, client);
    }

    /// Holds `message` back from this queue until `due_ms` (a delivery-delay fault), counted
    /// in `pending` while it waits.
    pub(crate) fn deliver_later(
        self: &Arc<Self>,
        message: Arc<Message>,
        due_ms: u64,
        pending: &Arc<AtomicUsize>,
    ) {
        let delivery = DelayedDelivery::new(self, message, pending);
        self.runtime.scheduler.arm_once(due_ms, Box::new(delivery));
    }
}

/// One message a delivery-delay fault holds: entered into its queue when due, unless the
/// queue is gone by then.
struct DelayedDelivery {
    queue: Weak<Queue>,
    message: Arc<Message>,
    /// The fault's count of waiting messages.
    pending: Arc<AtomicUsize>,
}

impl DelayedDelivery {
    /// Counts itself into `pending` until it is delivered or dropped.
    fn new(queue: &Arc<Queue>, message: Arc<Message>, pending: &Arc<AtomicUsize>) -> Self {
        pending.fetch_add(1, Ordering::Relaxed);
        DelayedDelivery {
            queue: Arc::downgrade(queue),
            message,
            pending: Arc::clone(pending),
        }
    }
}

impl DueOnce for DelayedDelivery {
    fn due(self: Box<Self>, _now_ms: u64) {
        if let Some(queue) = self.queue.upgrade() {
            queue.publish(Arc::clone(&self.message));
        }
    }
}

impl Drop for DelayedDelivery {
    fn drop(&mut self) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
    }
}
