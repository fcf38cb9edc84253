//! Awaitable conditions: a test waits for the broker to reach a state instead of sleeping.

use std::fmt;
use std::time::Duration;

use super::BrokerHandle;
use crate::broker::BrokerState;

/// A state of the broker to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Condition {
    /// Exactly `count` messages ready in the queue.
    Ready {
        /// The vhost.
        vhost: String,
        /// The queue.
        queue: String,
        /// How many.
        count: usize,
    },
    /// Exactly `count` messages delivered from the queue and not yet acknowledged.
    Unacked {
        /// The vhost.
        vhost: String,
        /// The queue.
        queue: String,
        /// How many.
        count: usize,
    },
    /// Exactly `count` consumers on the queue.
    Consumers {
        /// The vhost.
        vhost: String,
        /// The queue.
        queue: String,
        /// How many.
        count: usize,
    },
    /// Nothing due at the current time is still to be done, and every delivery has been
    /// written to its consumer's socket.
    Idle,
}

impl Condition {
    /// `count` messages ready in `queue` of vhost `/`.
    pub fn ready(queue: &str, count: usize) -> Self {
        Condition::Ready {
            vhost: "/".into(),
            queue: queue.into(),
            count,
        }
    }

    /// `count` unacknowledged messages from `queue` of vhost `/`.
    pub fn unacked(queue: &str, count: usize) -> Self {
        Condition::Unacked {
            vhost: "/".into(),
            queue: queue.into(),
            count,
        }
    }

    /// `count` consumers on `queue` of vhost `/`.
    pub fn consumers(queue: &str, count: usize) -> Self {
        Condition::Consumers {
            vhost: "/".into(),
            queue: queue.into(),
            count,
        }
    }
}

/// A wait that timed out, with what was seen last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitTimeout {
    /// What was awaited.
    pub condition: Condition,
    /// What the broker showed when the time was up.
    pub seen: String,
}

impl fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "timed out waiting for {:?}; last seen: {}",
            self.condition, self.seen
        )
    }
}

impl std::error::Error for WaitTimeout {}

impl BrokerHandle {
    /// Waits until `condition` holds, checking every millisecond, for at most `timeout`.
    pub async fn wait_for(
        &self,
        condition: Condition,
        timeout: Duration,
    ) -> Result<(), WaitTimeout> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let (holds, seen) = check(&self.state, &condition);
            if holds {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(WaitTimeout { condition, seen });
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Whether `condition` holds now, and what was seen.
pub(crate) fn check(state: &BrokerState, condition: &Condition) -> (bool, String) {
    let queue_count =
        |vhost: &str, queue: &str, pick: fn(&super::QueueInfo) -> usize| match super::queue_info(
            state, vhost, queue,
        ) {
            Some(info) => Ok(pick(&info)),
            None => Err(format!("no queue '{queue}' in vhost '{vhost}'")),
        };
    let compare = |seen: Result<usize, String>, count: usize, what: &str| match seen {
        Ok(n) => (n == count, format!("{n} {what}")),
        Err(e) => (false, e),
    };
    match condition {
        Condition::Ready {
            vhost,
            queue,
            count,
        } => compare(queue_count(vhost, queue, |i| i.messages), *count, "ready"),
        Condition::Unacked {
            vhost,
            queue,
            count,
        } => compare(queue_count(vhost, queue, |i| i.unacked), *count, "unacked"),
        Condition::Consumers {
            vhost,
            queue,
            count,
        } => compare(
            queue_count(vhost, queue, |i| i.consumers),
            *count,
            "consumers",
        ),
        Condition::Idle => {
            let now = state.clock.now_ms();
            let due = state.next_wake().filter(|&at| at <= now);
            let busy = super::clock::unwritten(state).len();
            let idle = due.is_none() && busy == 0;
            let seen = match due {
                Some(at) => format!("a deadline due at {at} not yet served; {busy} connection(s) with unwritten output"),
                None => format!("{busy} connection(s) with unwritten output"),
            };
            (idle, seen)
        }
    }
}
