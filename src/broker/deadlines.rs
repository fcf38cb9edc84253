//! Queue deadlines: when a queue must next `tick` (a message's TTL, or `x-expires`).
//!
//! A queue asks for one tick at its earliest deadline (an `Arm` effect), not one per message,
//! so this holds a handful of entries however many messages wait. The timer thread (or
//! `BrokerHandle::advance` under a manual clock) takes the due ones and ticks their queues. An
//! entry whose deadline has moved on fires harmlessly: the queue re-arms what it needs.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::queue::Queue;

#[derive(Default)]
struct Inner {
    by_due: BTreeMap<(u64, u64), Weak<Queue>>,
    next_seq: u64,
}

/// Every queue's next deadline.
#[derive(Default)]
pub(crate) struct QueueDeadlines {
    inner: Mutex<Inner>,
}

impl QueueDeadlines {
    /// Asks for `queue.tick` at `at_ms`; true when this is now the earliest deadline (the timer
    /// thread must wake sooner than it planned).
    pub(crate) fn arm(&self, at_ms: u64, queue: &Arc<Queue>) -> bool {
        let mut inner = self.inner.lock();
        let earliest = inner
            .by_due
            .first_key_value()
            .is_none_or(|(&(due, _), _)| at_ms < due);
        let seq = inner.next_seq;
        inner.next_seq += 1;
        inner.by_due.insert((at_ms, seq), Arc::downgrade(queue));
        earliest
    }

    /// The earliest deadline.
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.inner
            .lock()
            .by_due
            .first_key_value()
            .map(|(&(due, _), _)| due)
    }

    /// Takes the queues due at `now_ms` (each once), in deadline order.
    pub(crate) fn take_due(&self, now_ms: u64, out: &mut Vec<Arc<Queue>>) {
        let mut inner = self.inner.lock();
        while let Some(entry) = inner.by_due.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            if let Some(queue) = entry.remove().upgrade() {
                if !out.iter().any(|q| Arc::ptr_eq(q, &queue)) {
                    out.push(queue);
                }
            }
        }
    }
}
