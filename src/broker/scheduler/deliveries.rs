//! The test double's delayed deliveries: a message a fault holds back from its queue, entered
//! into the queue when due unless the queue is gone by then.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use dwellmq_core::Message;

use crate::broker::queue::{Queue, QueueOwner};

/// One message a delivery-delay fault holds.
pub(crate) struct DelayedDelivery {
    queue: Weak<Queue>,
    /// The queue's owner, who carries out what the publish hands up.
    owner: Weak<dyn QueueOwner>,
    message: Arc<Message>,
    /// The fault's count of waiting messages.
    pending: Arc<AtomicUsize>,
}

impl DelayedDelivery {
    /// Counts itself into `pending` until it is delivered or dropped.
    pub(super) fn new(
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

    /// Enters the message into its queue, if the queue still exists.
    pub(super) fn deliver(self) {
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
