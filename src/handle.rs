//! `Broker::start` and the handle an embedder keeps.

mod clock;
mod counters;
mod faults;
mod held;
mod inspect;
mod listener_role;
mod pauses;
mod reset;
mod restart;
mod start;
mod wait;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::DuplexStream;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use dwellmq_timer::Clock;

use crate::broker::delayed::{DelayedId, DelayedMessageInfo, DelayedMove, MoveDelayedError};
use crate::broker::BrokerState;
use crate::config::{Policy, PolicyError};
pub(crate) use clock::{release_due, settle};
pub(crate) use counters::counters;
pub use counters::{Counters, DEATH_REASONS};
pub use dwellmq_core::queue::DeathReason;
pub use faults::FaultError;
pub(crate) use faults::{delay_deliveries, force_close};
pub(crate) use held::move_held;
pub use inspect::PeekedMessage;
pub use listener_role::ListenerRole;
pub(crate) use reset::reset;
pub use reset::ResetError;
pub use start::{Broker, StartError};
pub(crate) use wait::check;
pub use wait::{Condition, WaitTimeout};

/// Bytes each direction of an in-memory connection buffers before the writer waits for the
/// reader (a socket's buffers play this part over TCP).
const IN_MEMORY_BUFFER: usize = 256 * 1024;

/// A running broker. Dropping the handle does not stop it; call [`BrokerHandle::shutdown`].
pub struct BrokerHandle {
    state: Arc<BrokerState>,
    addrs: Vec<SocketAddr>,
    tls_addrs: Vec<SocketAddr>,
    http_addr: Option<SocketAddr>,
    metrics_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    timer_thread: Option<std::thread::JoinHandle<()>>,
    /// Hands in-memory connections to the task that serves them.
    in_memory: mpsc::UnboundedSender<DuplexStream>,
}

/// How long [`BrokerHandle::settle`] waits.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// [`BrokerHandle::settle`] gave up: some connections still had output waiting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "output still unwritten after {waited:?} on {} connection(s): {} octets queued{}",
    unwritten.len(),
    unwritten.iter().map(|u| u.queued_bytes).sum::<usize>(),
    if unwritten.iter().any(|u| u.writing) { ", a write in progress" } else { "" }
)]
pub struct SettleTimeout {
    /// How long `settle` waited.
    pub waited: Duration,
    /// One entry per connection whose output was not all written.
    pub unwritten: Vec<UnwrittenOutput>,
}

pub use crate::broker::UnwrittenOutput;

/// A snapshot of one queue, for tests and operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// Queue name.
    pub name: String,
    /// Ready messages.
    pub messages: usize,
    /// Attached consumers.
    pub consumers: usize,
    /// Delivered and not yet acknowledged.
    pub unacked: usize,
    /// Returned to a quorum queue and waiting for a delayed retry (not ready, not unacked).
    pub retrying: usize,
    /// When the next of them is ready again, milliseconds since the Unix epoch.
    pub next_retry_at: Option<u64>,
    /// Dead-lettered and kept until every target queue takes it (`x-dead-letter-strategy:
    /// at-least-once`): never delivered from this queue again.
    pub dead_lettered: usize,
    /// Ready messages left in the store only (counted in `messages`): a durable classic
    /// queue longer than its window (`Limits::queue_window_messages`).
    pub paged_out: u64,
}

/// A message of a quorum queue waiting for its delayed retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryingMessageInfo {
    /// When it is ready again, milliseconds since the Unix epoch.
    pub ready_at_ms: u64,
    /// Failed attempts so far (`x-delivery-count`).
    pub delivery_count: u32,
    /// Returns of any kind so far (`x-acquired-count`).
    pub acquired_count: u32,
    /// Its routing key.
    pub routing_key: String,
    /// Body size in octets.
    pub body_size: usize,
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

    /// Where Prometheus metrics listen on their own, if configured (`BrokerConfig::metrics`).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Where AMQP over TLS is served (`BrokerConfig::tls`), if it is.
    pub fn tls_local_addr(&self) -> Option<SocketAddr> {
        self.tls_addrs.first().copied()
    }

    /// `amqps://host:port` for the first TLS address, if TLS is served.
    pub fn amqps_url(&self) -> Option<String> {
        self.tls_local_addr().map(|addr| format!("amqps://{addr}"))
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
        queue_info(&self.state, vhost, queue)
    }

    /// The messages of a quorum queue waiting for a delayed retry, the next one first.
    pub fn retrying_messages(&self, vhost: &str, queue: &str) -> Vec<RetryingMessageInfo> {
        let Some(queue) = self.state.vhost(vhost).and_then(|v| v.queue(queue).ok()) else {
            return Vec::new();
        };
        queue
            .retrying()
            .into_iter()
            .map(|(ready_at_ms, entry)| RetryingMessageInfo {
                ready_at_ms,
                delivery_count: entry.delivery_count,
                acquired_count: entry.acquired_count,
                routing_key: entry.message.routing_key.to_string(),
                body_size: entry.message.body_len(),
            })
            .collect()
    }

    /// Makes every message of a queue that waits for a delayed retry ready at once; returns
    /// how many.
    pub fn release_retries(&self, vhost: &str, queue: &str) -> usize {
        self.state
            .vhost(vhost)
            .and_then(|v| Some((v.queue(queue).ok()?, v)))
            .map_or(0, |(q, v)| q.release_retries(&*v))
    }

    /// Adds or replaces (by name) a policy in `vhost` and applies it at once to the queues and
    /// exchanges it matches (and stops applying the one it replaces).
    pub fn set_policy(&self, vhost: &str, policy: Policy) -> Result<(), PolicyError> {
        set_policy(&self.state, vhost, policy)
    }

    /// Removes a policy; false if `vhost` has none of that name.
    pub fn clear_policy(&self, vhost: &str, name: &str) -> bool {
        self.state.vhost(vhost).is_some_and(|v| {
            v.clear_policy(name, crate::broker::persist::DefinitionWrites::UNAWAITED)
        })
    }

    /// The policies of `vhost`, by name.
    pub fn policies(&self, vhost: &str) -> Vec<Policy> {
        self.state
            .vhost(vhost)
            .map(|v| v.policies())
            .unwrap_or_default()
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

    /// Octets counted as held (what the memory watermark compares): output buffered for clients
    /// ([`BrokerHandle::buffered_output`]), and for messages bodies plus
    /// [`MESSAGE_MEMORY_OVERHEAD`](crate::MESSAGE_MEMORY_OVERHEAD) per message as published
    /// (unacknowledged, or waiting unpacked), what a small one waiting packed in a queue holds
    /// ([`queued_message_footprint`](crate::queued_message_footprint), body included), and
    /// [`HELD_MESSAGE_MEMORY_OVERHEAD`](crate::HELD_MESSAGE_MEMORY_OVERHEAD) per small message a
    /// delayed exchange holds packed.
    pub fn memory_used(&self) -> i64 {
        self.state.memory.used()
    }

    /// The shared state (fuzzing checks the accounting through it).
    pub(crate) fn state(&self) -> &Arc<BrokerState> {
        &self.state
    }

    /// Octets buffered for output to clients and not yet taken by their sockets, over every
    /// open connection (each is charged to [`BrokerHandle::memory_used`] too). Bounded per
    /// connection: a connection over its bound stops reading its client until it drains.
    pub fn buffered_output(&self) -> usize {
        self.state
            .outbounds
            .lock()
            .iter()
            .filter_map(|o| o.upgrade())
            .map(|o| o.buffered())
            .sum()
    }

    /// The memory watermark in octets, as resolved at start from
    /// [`Limits::memory_high_watermark`](crate::Limits::memory_high_watermark).
    pub fn memory_high_watermark(&self) -> u64 {
        self.state.memory.high_watermark()
    }

    /// Whether publishers are blocked because of the store (writes failing, or more queued
    /// for the disk than `Limits::store_backlog_bytes`): RabbitMQ's disk alarm.
    pub fn disk_alarm(&self) -> bool {
        self.state.disk.is_on()
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
        let target = clock.now_ms().saturating_add(by.as_millis() as u64);
        clock::release_due(&self.state, clock, target)
    }

    /// Sets a manual clock to `now_ms` (never backwards) and releases what is due, like
    /// [`BrokerHandle::advance`].
    pub fn set_now(&self, now_ms: u64) -> usize {
        let clock = self.manual_clock();
        let target = now_ms.max(clock.now_ms());
        clock::release_due(&self.state, clock, target)
    }

    fn manual_clock(&self) -> &dwellmq_timer::ManualClock {
        self.state
            .manual_clock
            .as_deref()
            .expect("advance/set_now need BrokerConfig::with_manual_clock")
    }

    /// Waits until every delivery and reply queued so far has been written to its socket, for
    /// up to [`SETTLE_TIMEOUT`]; past that, says which connections still had output waiting
    /// (a client that stopped reading, say) instead of letting a test go on as if all had
    /// been sent.
    pub async fn settle(&self) -> Result<(), SettleTimeout> {
        self.settle_within(SETTLE_TIMEOUT).await
    }

    /// [`BrokerHandle::settle`] with another time limit.
    pub async fn settle_within(&self, timeout: Duration) -> Result<(), SettleTimeout> {
        clock::settle(&self.state, timeout).await
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

    /// Moves one held message to another due time: [`DelayedMove::Now`] releases it at once,
    /// `At` and `After` hold it until then (not in the past, at most ten years ahead). Its
    /// headers (`x-delay` as published), body and properties stay; it is released once, at its
    /// new time. Returns its new id: an id names its due time. A durable exchange's message
    /// moves in one store commit (a crash leaves it at its old time or its new one).
    pub fn move_delayed(
        &self,
        id: DelayedId,
        to: DelayedMove,
    ) -> Result<DelayedId, MoveDelayedError> {
        held::move_held(&self.state, None, id, to)
    }

    /// Drops every message held by a delayed exchange; returns how many.
    pub fn purge_delayed(&self, vhost: &str, exchange: &str) -> usize {
        self.state
            .delayed
            .purge_exchange(&vhost.into(), &exchange.into())
    }

    /// Purges of delayed exchanges (an operator's, or an exchange's deletion) stop before
    /// they begin, from now until [`BrokerHandle::resume_delayed_purges`]: a deleted
    /// exchange is gone from its vhost, and its messages not yet dropped.
    pub fn pause_delayed_purges_at_start(&self) {
        self.state
            .delayed
            .pause_purges(crate::broker::delayed::PauseAt::Start);
    }

    /// Purges of delayed exchanges stop once they have begun, until
    /// [`BrokerHandle::resume_delayed_purges`]: the old messages are no longer the exchange's,
    /// and are not dropped yet.
    pub fn pause_delayed_purges_once_begun(&self) {
        self.state
            .delayed
            .pause_purges(crate::broker::delayed::PauseAt::Begun);
    }

    /// Finishes the purges paused by [`BrokerHandle::pause_delayed_purges`] and lets later
    /// ones run; returns how many messages they dropped.
    pub fn resume_delayed_purges(&self) -> usize {
        self.state.delayed.resume_purges()
    }

    /// Messages that left their queues for `reason` since start: (dead-lettered, dropped
    /// because the queue has no dead-letter exchange).
    pub fn death_counts(&self, reason: DeathReason) -> (u64, u64) {
        self.state.queue_services().deaths.get(reason)
    }

    /// Held messages that found no route when released (dropped), since start.
    pub fn delayed_unroutable(&self) -> u64 {
        self.state.delayed.unroutable()
    }

    /// A new client connection that never touches the network: the returned stream is the
    /// client's end of an in-memory pipe whose other end the broker serves exactly like an
    /// accepted socket (handshake, limits, shutdown), as a loopback peer. Speak AMQP over it
    /// with any client that accepts an `AsyncRead + AsyncWrite` stream.
    ///
    /// Everything runs on the tokio runtime, so a test on tokio's paused clock
    /// (`#[tokio::test(start_paused = true)]`) sees heartbeats and handshake timeouts happen
    /// in virtual time, with no real waiting; TCP connections would let the clock jump while
    /// the runtime waits for the network. After [`BrokerHandle::shutdown`] the stream reads EOF.
    pub fn connect_in_memory(&self) -> DuplexStream {
        let (client, server) = tokio::io::duplex(IN_MEMORY_BUFFER);
        // Refused only once the broker has shut down: `server` is dropped and `client` reads
        // EOF, as a refused socket would.
        let _ = self.in_memory.send(server);
        client
    }

    /// Starts shutting down without waiting: stops accepting, asks every connection to close
    /// with `CONNECTION_FORCED` and stops the delayed-message timer thread. For synchronous
    /// contexts such as a test fixture's `Drop`; [`BrokerHandle::shutdown`] does the same and
    /// waits for it to finish.
    pub fn begin_shutdown(&self) {
        let _ = self.shutdown.send(true);
        self.state.timer.stop();
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
        // Commits what is queued and releases the data directory (a new broker may open it).
        if let Some(store) = self.state.store().cloned() {
            let _ = tokio::task::spawn_blocking(move || store.shutdown()).await;
        }
    }
}

/// A queue snapshot, for the handle and the test endpoints.
pub(crate) fn queue_info(state: &BrokerState, vhost: &str, queue: &str) -> Option<QueueInfo> {
    let vhost = state.vhost(vhost)?;
    let queue = vhost.queue(queue).ok()?;
    let retrying = queue.retrying();
    let figures = queue.figures(&*vhost);
    Some(QueueInfo {
        name: queue.name.to_string(),
        messages: queue.message_count(&*vhost),
        consumers: queue.consumer_count(),
        unacked: queue.unacked_count(),
        retrying: retrying.len(),
        next_retry_at: retrying.first().map(|(at, _)| *at),
        dead_lettered: figures.dead_lettered,
        paged_out: figures.paged_out,
    })
}

fn set_policy(state: &BrokerState, vhost: &str, policy: Policy) -> Result<(), PolicyError> {
    let vhost = state
        .vhost(vhost)
        .ok_or_else(|| PolicyError(format!("no vhost '{vhost}'")))?;
    // The embedder's call returns at once; the write is on disk with the next commit.
    vhost.set_policy(policy, crate::broker::persist::DefinitionWrites::UNAWAITED)
}
