//! What the test double adds to the broker: faults a test injects (nacked confirms, delayed
//! deliveries to a queue), pause points that hold a step of the broker so that a test can make
//! a race happen (a page read in flight, a bind between its lookup and its add), and the
//! counters that have no other home.
//!
//! Every check on the publish path is one relaxed atomic load while no fault is set, and so is
//! every pause point while it is open, so a broker that never sees a test costs nothing more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dwellmq_codec::ShortStr;
use parking_lot::{Condvar, Mutex};

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
    /// Page reads wait here between reading the store and handing the page to their queue.
    pub(crate) page_reads: Gate,
    /// Binds wait here between finding their destination and adding the binding.
    pub(crate) binds: Gate,
}

/// A pause point for tests: code that passes it while it is closed waits there, its thread
/// blocked, until a test opens it or the wait given at its closing has passed (so that a test
/// that forgets it, or a lock held while waiting, cannot stall a broker for good).
#[derive(Default)]
pub(crate) struct Gate {
    /// Read first, alone, while open: one relaxed load.
    closed: AtomicBool,
    state: Mutex<GateState>,
    opened: Condvar,
}

#[derive(Default)]
struct GateState {
    closed: bool,
    /// How long one pass waits at most while closed.
    max_wait: Duration,
    /// Passes waiting now.
    waiting: usize,
    /// Passes that stopped here since the gate was last closed (waiting or gone on).
    stopped: usize,
}

impl Gate {
    /// Passes that come from now on wait, each for `max_wait` at most.
    pub(crate) fn close(&self, max_wait: Duration) {
        let mut state = self.state.lock();
        state.closed = true;
        state.max_wait = max_wait;
        state.stopped = 0;
        self.closed.store(true, Ordering::Relaxed);
    }

    /// Lets the waiting passes go on, and later ones through.
    pub(crate) fn open(&self) {
        let mut state = self.state.lock();
        state.closed = false;
        self.closed.store(false, Ordering::Relaxed);
        self.opened.notify_all();
    }

    /// Passes waiting now.
    pub(crate) fn waiting(&self) -> usize {
        self.state.lock().waiting
    }

    /// Passes that stopped here since the gate was last closed, waiting or gone on.
    pub(crate) fn stopped(&self) -> usize {
        self.state.lock().stopped
    }

    /// The pause point: returns at once while open; closed, waits until opened or for the
    /// gate's `max_wait`. On a worker of a multi-threaded runtime the wait gives the worker's
    /// tasks to another thread first (`block_in_place`): a task woken just before, such as the
    /// one that serves the connection whose delete the test races against the pause, must not
    /// wait with it.
    pub(crate) fn pass(&self) {
        if !self.closed.load(Ordering::Relaxed) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime)
                if runtime.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread =>
            {
                tokio::task::block_in_place(|| self.wait())
            }
            _ => self.wait(),
        }
    }

    fn wait(&self) {
        let mut state = self.state.lock();
        let deadline = Instant::now() + state.max_wait;
        state.waiting += 1;
        state.stopped += 1;
        while state.closed {
            if self.opened.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        state.waiting -= 1;
    }
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
        self.page_reads.open();
        self.binds.open();
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
    fn a_closed_gate_holds_a_pass_until_opened_or_its_wait_has_passed() {
        let gate = Arc::new(Gate::default());
        gate.pass(); // open: through at once
        gate.close(Duration::from_secs(30));
        let passer = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || gate.pass())
        };
        let started = Instant::now();
        while gate.waiting() == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the pass waits"
            );
            std::thread::yield_now();
        }
        assert!(!passer.is_finished());
        gate.open();
        passer.join().expect("the pass goes on");
        assert_eq!((gate.waiting(), gate.stopped()), (0, 1));
        // Closed with a short wait, a pass goes on by itself.
        gate.close(Duration::from_millis(1));
        gate.pass();
        assert_eq!(gate.waiting(), 0);
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
