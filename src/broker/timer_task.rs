//! The task that releases delayed messages on time under the system clock.
//!
//! It sleeps until the earliest deadline and is woken early when a message with an earlier
//! deadline arrives. Under a manual clock there is no such task: `BrokerHandle::advance`
//! releases what is due itself, so tests are deterministic.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::BrokerState;

pub(crate) async fn run(state: Arc<BrokerState>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let now = state.clock.now_ms();
        let wait = match state.delayed.next_due() {
            Some(due) if due <= now => {
                state.delayed.release_due(now);
                continue;
            }
            Some(due) => Some(until_wall_ms(due)),
            None => None,
        };
        let sleep = async {
            match wait {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = state.timer_wake.notified() => {}
            _ = crate::server::shutdown_requested(&mut shutdown) => return,
        }
    }
}

/// Time from now until the wall-clock millisecond `due_ms` starts, at microsecond precision.
///
/// The clock reports whole milliseconds; sleeping `due - now` of those would wake up to a
/// millisecond late on top of the runtime timer's own rounding.
fn until_wall_ms(due_ms: u64) -> Duration {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Duration::from_millis(due_ms).saturating_sub(now)
}
