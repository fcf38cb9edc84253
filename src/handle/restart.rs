//! The test double's store faults: failing the next message writes, and restarting the broker
//! on the same data directory and addresses.

use std::sync::atomic::Ordering;

use super::{Broker, BrokerHandle, StartError};
use crate::config::ClockConfig;

impl BrokerHandle {
    /// The next `n` store commits that carry a message write (a persistent message on a
    /// durable queue, a message held by a durable delayed exchange) fail as a failed write
    /// would: nothing of the commit is written, its publishers get `basic.nack`, and what it
    /// removed or released is retried whole, as after a real failure. 0 clears it. Without a
    /// data directory nothing is written anyway and nothing fails.
    pub fn fail_next_writes(&self, n: u64) {
        self.state.fail_next_writes(n);
    }

    /// Failing commits still to come.
    pub fn writes_to_fail(&self) -> u64 {
        self.state.writes_to_fail()
    }

    /// Stops this broker and starts a new one with the same configuration, on the same
    /// addresses (ports picked at the first start are kept), the same data directory and, with
    /// a manual clock, at the time the clock had reached. What a restart keeps is exactly what
    /// the store holds: durable definitions, persistent messages on durable queues, messages
    /// held by durable delayed exchanges. Clients must reconnect.
    pub async fn restart(self) -> Result<BrokerHandle, StartError> {
        let mut config = self.state.config.clone();
        config.listen = self.addrs.clone();
        if config.http.is_some() {
            config.http = self.http_addr;
        }
        if config.metrics.is_some() {
            config.metrics = self.metrics_addr;
        }
        if let Some(tls) = config.tls.as_mut() {
            tls.listen = self.tls_addrs.clone();
        }
        if self.state.manual_clock.is_some() {
            config.clock = ClockConfig::Manual {
                start_ms: self.now_ms(),
            };
        }
        let restarts = self.state.restarts.load(Ordering::Relaxed) + 1;
        self.shutdown().await;
        let broker = Broker::start(config).await?;
        broker.state.restarts.store(restarts, Ordering::Relaxed);
        tracing::info!(restarts, "broker restarted on the same data");
        Ok(broker)
    }

    /// Waits until a test asks for a restart over HTTP (`POST /test/restart`); the binary
    /// then calls [`BrokerHandle::restart`].
    pub async fn restart_requested(&self) {
        self.state.restart.notified().await;
    }

    /// How many restarts led to this broker.
    pub fn restarts(&self) -> u64 {
        self.state.restarts.load(Ordering::Relaxed)
    }
}
