//! Moving a manual clock and waiting for the output it causes: shared by
//! [`BrokerHandle::advance`](super::BrokerHandle::advance) and the HTTP test endpoints.

use std::time::Duration;

use dwellmq_timer::{Clock, ManualClock};

use super::{SettleTimeout, UnwrittenOutput};
use crate::broker::scheduler::Drive;
use crate::broker::BrokerState;

/// Rounds served at one instant before the stepping gives up on it: a deadline that keeps
/// re-arming itself at `now` is a bug, and must not hang the test that advances the clock.
const ROUNDS_AT_ONE_INSTANT: u32 = 1000;

/// A manual clock stepped from deadline to deadline up to a target.
struct Stepper<'a> {
    clock: &'a ManualClock,
    target_ms: u64,
}

impl Drive for Stepper<'_> {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    fn wait(&mut self, _now_ms: u64, next: Option<u64>) -> bool {
        match next {
            Some(next) if next <= self.target_ms => {
                self.clock.set_now(next);
                true
            }
            _ => false,
        }
    }

    fn rounds_at_one_instant(&self) -> Option<u32> {
        Some(ROUNDS_AT_ONE_INSTANT)
    }
}

/// What the timer thread does under the system clock, all at once: every deadline up to
/// `target_ms` is served at its own time, in order, by the same loop, so a chain of deadlines
/// (a message that expires into a queue where it waits again) plays out as it would in real
/// time. Returns how many held messages were released.
pub(crate) fn release_due(state: &BrokerState, clock: &ManualClock, target_ms: u64) -> usize {
    let mut stepper = Stepper { clock, target_ms };
    let released = state
        .runtime
        .scheduler
        .serve_until(&mut stepper, &state.delayed);
    clock.set_now(target_ms);
    released
}

/// Connections whose output is not all written yet.
pub(crate) fn unwritten(state: &BrokerState) -> Vec<UnwrittenOutput> {
    state
        .outbounds
        .lock()
        .iter()
        .filter_map(|o| o.upgrade())
        .filter_map(|o| o.unwritten())
        .collect()
}

/// Waits until every delivery and reply queued so far has been written to its socket, for up
/// to `timeout`.
pub(crate) async fn settle(state: &BrokerState, timeout: Duration) -> Result<(), SettleTimeout> {
    // Tokio's clock, so that a test with paused time waits in its own time.
    let started = tokio::time::Instant::now();
    loop {
        let unwritten = unwritten(state);
        if unwritten.is_empty() {
            return Ok(());
        }
        let waited = started.elapsed();
        if waited >= timeout {
            return Err(SettleTimeout { waited, unwritten });
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
