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
            Some(due) => Some(Duration::from_millis(due - now)),
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
            _ = shutdown.changed() => return,
        }
    }
}
