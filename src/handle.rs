//! `Broker::start` and the handle an embedder keeps.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use dwellmq_timer::Clock;

use crate::broker::delayed::{DelayedId, DelayedMessageInfo};
use crate::broker::BrokerState;
use crate::config::BrokerConfig;
use crate::server::accept_loop;

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No listen address was configured.
    #[error("no listen address configured")]
    NoListenAddress,
    /// The timer thread could not be started.
    #[error("cannot start the timer thread: {0}")]
    Timer(std::io::Error),
    /// The definitions file could not be read or applied.
    #[error("cannot import definitions: {0}")]
    Definitions(String),
    /// No configured address could be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address that failed.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Entry point for embedding.
pub struct Broker;

impl Broker {
    /// Starts a broker inside the current tokio runtime and returns once it listens.
    ///
    /// Port 0 binds a free port; [`BrokerHandle::local_addr`] tells which. When several
    /// addresses are configured (the default listens on IPv4 and IPv6 loopback), addresses
    /// that cannot be bound are skipped with a warning as long as one succeeds.
    pub async fn start(config: BrokerConfig) -> Result<BrokerHandle, StartError> {
        if config.listen.is_empty() {
            return Err(StartError::NoListenAddress);
        }
        let mut listeners = Vec::new();
        let mut first_error = None;
        for &addr in &config.listen {
            match TcpListener::bind(addr).await {
                Ok(listener) => listeners.push(listener),
                Err(source) => {
                    tracing::warn!(%addr, error = %source, "cannot listen");
                    first_error.get_or_insert(StartError::Bind { addr, source });
                }
            }
        }
        if listeners.is_empty() {
            return Err(first_error.unwrap_or(StartError::NoListenAddress));
        }
        let addrs: Vec<SocketAddr> = listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        let http_listener = match config.http {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|source| StartError::Bind { addr, source })?,
            ),
            None => None,
        };
        let http_addr = http_listener.as_ref().and_then(|l| l.local_addr().ok());
        let definitions = config.definitions.clone();
        let state = BrokerState::new(config);
        if let Some(path) = definitions {
            crate::http::definitions::import_file(&state, &path)
                .map_err(StartError::Definitions)?;
            tracing::info!(path = %path.display(), "definitions imported");
        }
        let (shutdown, shutdown_rx) = watch::channel(false);
        let mut tasks: Vec<JoinHandle<()>> = listeners
            .into_iter()
            .map(|l| tokio::spawn(accept_loop(Arc::clone(&state), l, shutdown_rx.clone())))
            .collect();
        if let Some(listener) = http_listener {
            let serve = crate::http::serve(
                Arc::clone(&state),
                addrs.clone(),
                listener,
                shutdown_rx.clone(),
            );
            tasks.push(tokio::spawn(serve));
        }
        let timer_thread = match state.manual_clock {
            None => Some(
                crate::broker::timer_thread::spawn(Arc::clone(&state))
                    .map_err(StartError::Timer)?,
            ),
            Some(_) => None,
        };
        for addr in &addrs {
            tracing::info!(%addr, "listening");
        }
        if let Some(addr) = http_addr {
            tracing::info!(%addr, "HTTP API listening");
        }
        Ok(BrokerHandle {
            state,
            addrs,
            http_addr,
            shutdown,
            tasks,
            timer_thread,
        })
    }
}

/// A running broker. Dropping the handle does not stop it; call [`BrokerHandle::shutdown`].
pub struct BrokerHandle {
    state: Arc<BrokerState>,
    addrs: Vec<SocketAddr>,
    http_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    timer_thread: Option<std::thread::JoinHandle<()>>,
}

/// A snapshot of one queue, for tests and operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// Queue name.
    pub name: String,
    /// Ready messages.
    pub messages: usize,
    /// Attached consumers.
    pub consumers: usize,
}

impl BrokerHandle {
    /// The first address the broker listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every address the broker listens on.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Where the HTTP management API listens, if it is on (`BrokerConfig::http`).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// `amqp://host:port` for the first listen address (IPv6 hosts in brackets).
    pub fn amqp_url(&self) -> String {
        format!("amqp://{}", self.local_addr())
    }

    /// Queue snapshot in `vhost`, or `None` if the queue does not exist.
    pub fn queue_info(&self, vhost: &str, queue: &str) -> Option<QueueInfo> {
        let queue = self.state.vhost(vhost)?.queue(queue).ok()?;
        Some(QueueInfo {
            name: queue.name.to_string(),
            messages: queue.message_count(),
            consumers: queue.consumer_count(),
        })
    }

    /// Names of the queues in `vhost`, sorted.
    pub fn queue_names(&self, vhost: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .state
            .vhost(vhost)
            .map(|v| v.queues().iter().map(|q| q.name.to_string()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Names of the exchanges in `vhost`, sorted (the default exchange is `""`).
    pub fn exchange_names(&self, vhost: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .state
            .vhost(vhost)
            .map(|v| v.exchanges().iter().map(|x| x.name.to_string()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Connections currently open.
    pub fn connection_count(&self) -> usize {
        self.state
            .open_connections
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes of message bodies held (what the memory watermark compares).
    pub fn memory_used(&self) -> i64 {
        self.state.memory.used()
    }

    /// The broker's current time, milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        self.state.clock.now_ms()
    }

    /// Moves a manual clock forward by `by` and releases every delayed message now due, in
    /// due order, before returning (their deliveries are queued to the consumers' sockets).
    /// Returns how many were released. Panics if the broker runs on the system clock: that is
    /// a programming error in the test, not a runtime condition.
    pub fn advance(&self, by: Duration) -> usize {
        let clock = self.manual_clock();
        clock.advance(by);
        self.release_due(clock.now_ms())
    }

    /// Sets a manual clock to `now_ms` (never backwards) and releases what is due, like
    /// [`BrokerHandle::advance`].
    pub fn set_now(&self, now_ms: u64) -> usize {
        let clock = self.manual_clock();
        clock.set_now(now_ms);
        self.release_due(clock.now_ms())
    }

    /// What the timer thread does under the system clock, all at once.
    fn release_due(&self, now_ms: u64) -> usize {
        let released = self.state.delayed.release_due(now_ms);
        self.state.delayed.move_in(now_ms, None);
        released
    }

    fn manual_clock(&self) -> &dwellmq_timer::ManualClock {
        self.state
            .manual_clock
            .as_deref()
            .expect("advance/set_now need BrokerConfig::with_manual_clock")
    }

    /// Waits until every delivery queued so far has been written to its consumer's socket.
    pub async fn settle(&self) {
        for _ in 0..10_000 {
            let idle = self
                .state
                .outbounds
                .lock()
                .iter()
                .filter_map(|o| o.upgrade())
                .all(|o| o.is_idle());
            if idle {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Messages held by the delayed exchange `exchange` in `vhost`.
    pub fn delayed_count(&self, vhost: &str, exchange: &str) -> usize {
        self.state.delayed.stats(vhost, exchange).0
    }

    /// Body bytes held by the delayed exchange.
    pub fn delayed_bytes(&self, vhost: &str, exchange: &str) -> u64 {
        self.state.delayed.stats(vhost, exchange).1
    }

    /// When the delayed exchange's next message is due (ms since the Unix epoch), if it holds any.
    pub fn delayed_next_due(&self, vhost: &str, exchange: &str) -> Option<u64> {
        let first = self.state.delayed.list(vhost, exchange, 1);
        first.first().map(|m| m.due_ms)
    }

    /// Messages held by all delayed exchanges.
    pub fn delayed_total(&self) -> usize {
        self.state.delayed.len()
    }

    /// The held messages of a delayed exchange in due order (at most `limit`).
    pub fn delayed_messages(
        &self,
        vhost: &str,
        exchange: &str,
        limit: usize,
    ) -> Vec<DelayedMessageInfo> {
        self.state.delayed.list(vhost, exchange, limit)
    }

    /// Cancels one held message by id; false if it is unknown or already released.
    pub fn cancel_delayed(&self, id: DelayedId) -> bool {
        self.state.delayed.cancel(id)
    }

    /// Drops every message held by a delayed exchange; returns how many.
    pub fn purge_delayed(&self, vhost: &str, exchange: &str) -> usize {
        self.state
            .delayed
            .purge_exchange(&vhost.into(), &exchange.into())
    }

    /// Held messages that found no route when released (dropped), since start.
    pub fn delayed_unroutable(&self) -> u64 {
        self.state.delayed.unroutable()
    }

    /// Stops accepting, closes every connection with `CONNECTION_FORCED`, and waits (up to
    /// a few seconds per connection for `close-ok`) until all are gone.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        self.state.timer.stop();
        if let Some(thread) = self.timer_thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}
