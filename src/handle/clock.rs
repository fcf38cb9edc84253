//! Moving a manual clock and waiting for the output it causes: shared by
//! [`BrokerHandle::advance`](super::BrokerHandle::advance) and the HTTP test endpoints.

use std::time::Duration;

use dwellmq_timer::{Clock, ManualClock};

use super::{SettleTimeout, UnwrittenOutput};
use crate::broker::BrokerState;

/// What the timer thread does under the system clock, all at once: every deadline up to
/// `target_ms` is served at its own time, in order, so a chain of deadlines (a message that
/// expires into a queue where it waits again) plays out as it would in real time. Returns how
/// many held messages were released.
pub(crate) fn release_due(state: &BrokerState, clock: &ManualClock, target_ms: u64) -> usize {
    let mut released = 0;
    // Rounds at one instant; a deadline that keeps re-arming itself at `now` is a bug, and
    // must not hang the test that advances the clock.
    let mut rounds_at_now = 0;
    loop {
        let now = clock.now_ms();
        let scheduler = &state.runtime.scheduler;
        released += scheduler.release_due(now, &state.delayed);
        scheduler.move_in(now, None, &state.delayed);
        match state.next_wake() {
            Some(next) if next <= now && rounds_at_now < 1000 => rounds_at_now += 1,
            Some(next) if next <= target_ms && next > now => {
                rounds_at_now = 0;
                clock.set_now(next);
            }
            _ => break,
        }
    }
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
