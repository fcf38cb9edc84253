//! What the test double adds to the broker: faults a test injects (nacked confirms, delayed
//! deliveries to a queue) and the counters that have no other home.
//!
//! Every check on the publish path is one relaxed atomic load while no fault is set, so a
//! broker that never sees a test costs nothing more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use dwellmq_codec::ShortStr;
use parking_lot::Mutex;

/// A queue whose deliveries are held back by a fault.
#[derive(Debug, Clone)]
pub(crate) struct DeliveryDelay {
    /// How long each message routed to the queue waits before it enters it, in broker time.
    pub(crate) delay_ms: u64,
    /// How many wait right now (shared with each held message, which counts itself out when
    /// it is released or dropped).
    pub(crate) pending: Arc<AtomicUsize>,
}

/// Faults and counters of one broker (never global: brokers in one process stay apart).
#[derive(Default)]
pub(crate) struct TestHooks {
    /// Publisher confirms still to be answered with `basic.nack` instead of `basic.ack`.
    nack_next: AtomicU64,
    /// Whether `delays` holds anything (read on every routed publish).
    any_delay: AtomicBool,
    /// By (vhost, queue).
    delays: Mutex<HashMap<(ShortStr, ShortStr), DeliveryDelay>>,
    /// Messages delivered to consumers with the `redelivered` flag.
    pub(crate) redelivered: AtomicU64,
}

impl TestHooks {
    /// Answers the next `n` publisher confirms (of any channel) with `basic.nack`.
    pub(crate) fn nack_next_confirms(&self, n: u64) {
        self.nack_next.store(n, Ordering::Relaxed);
    }

    /// Whether this confirm must be a nack (and counts it as taken).
    pub(crate) fn take_nack(&self) -> bool {
        if self.nack_next.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.nack_next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
    }

    /// Confirms still to be nacked.
    pub(crate) fn nacks_pending(&self) -> u64 {
        self.nack_next.load(Ordering::Relaxed)
    }

    /// Holds every message routed to `queue` for `delay_ms` before it enters the queue; 0
    /// removes the fault (messages already held keep waiting).
    pub(crate) fn delay_deliveries(&self, vhost: &str, queue: &str, delay_ms: u64) {
        let mut delays = self.delays.lock();
        let key = (ShortStr::from(vhost), ShortStr::from(queue));
        if delay_ms == 0 {
            delays.remove(&key);
        } else {
            delays
                .entry(key)
                .or_insert_with(|| DeliveryDelay {
                    delay_ms,
                    pending: Arc::default(),
                })
                .delay_ms = delay_ms;
        }
        self.any_delay.store(!delays.is_empty(), Ordering::Relaxed);
    }

    /// The delay set for `queue`, if any. Inline: on the publish path, with no fault set,
    /// it is the one load.
    #[inline]
    pub(crate) fn delivery_delay(&self, vhost: &str, queue: &str) -> Option<DeliveryDelay> {
        if !self.any_delay.load(Ordering::Relaxed) {
            return None;
        }
        self.delay_of(vhost, queue)
    }

    fn delay_of(&self, vhost: &str, queue: &str) -> Option<DeliveryDelay> {
        self.delays
            .lock()
            .get(&(ShortStr::from(vhost), ShortStr::from(queue)))
            .cloned()
    }

    /// Clears every fault and counter (a reset between tests).
    pub(crate) fn clear(&self) {
        self.nack_next.store(0, Ordering::Relaxed);
        self.delays.lock().clear();
        self.any_delay.store(false, Ordering::Relaxed);
        self.redelivered.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nacks_are_taken_one_by_one() {
        let hooks = TestHooks::default();
        assert!(!hooks.take_nack());
        hooks.nack_next_confirms(2);
        assert!(hooks.take_nack());
        assert!(hooks.take_nack());
        assert!(!hooks.take_nack());
    }

    #[test]
    fn delays_are_per_queue_and_removable() {
        let hooks = TestHooks::default();
        assert!(hooks.delivery_delay("/", "q").is_none());
        hooks.delay_deliveries("/", "q", 500);
        assert_eq!(
            hooks.delivery_delay("/", "q").map(|d| d.delay_ms),
            Some(500)
        );
        assert!(hooks.delivery_delay("/", "other").is_none());
        hooks.delay_deliveries("/", "q", 0);
        assert!(hooks.delivery_delay("/", "q").is_none());
    }
}
