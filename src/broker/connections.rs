//! Open AMQP connections as operators see them (the management API's `/api/connections`), and
//! the way to close one from outside.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use dwellmq_codec::FieldTable;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch};

use super::queue::ConnectionId;

/// One channel, as `/api/channels` shows it.
pub(crate) struct ChannelSummary {
    pub(crate) number: u16,
    pub(crate) consumers: usize,
    /// `basic.qos` prefetch for new consumers (global=false).
    pub(crate) prefetch_count: u32,
    /// Channel-wide prefetch (global=true).
    pub(crate) global_prefetch_count: u32,
    pub(crate) unacked: usize,
    pub(crate) confirm: bool,
    pub(crate) transactional: bool,
    /// Messages published on the channel.
    pub(crate) publish: u64,
    /// Publishes confirmed.
    pub(crate) confirm_count: u64,
    /// Deliveries acknowledged.
    pub(crate) ack: u64,
    /// Deliveries and gets.
    pub(crate) deliver_get: u64,
}

/// A close a test asks for (the test double's fault injection): the whole connection, or one
/// of its channels, with the reply code and text of `error`.
#[derive(Debug, Clone)]
pub(crate) struct ForcedClose {
    /// `None` closes the connection.
    pub(crate) channel: Option<u16>,
    pub(crate) error: dwellmq_core::BrokerError,
}

/// A request for the connection's channels, answered by its task (which owns them).
pub(crate) type ChannelsRequest = oneshot::Sender<Vec<ChannelSummary>>;

/// How long a listing waits for a connection's task to describe its channels.
const CHANNELS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// One open connection, as listed.
pub(crate) struct ConnectionInfo {
    pub(crate) id: ConnectionId,
    /// RabbitMQ's connection name: `peer -> local`.
    pub(crate) name: String,
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
    pub(crate) user: String,
    pub(crate) vhost: String,
    pub(crate) connected_at_ms: u64,
    pub(crate) client_properties: FieldTable,
    pub(crate) heartbeat_secs: u16,
    pub(crate) frame_max: u32,
    pub(crate) channel_max: u16,
    /// Open channels, as of the last batch of frames handled.
    pub(crate) channels: AtomicUsize,
    /// Octets read from the client, and written to it as of the last batch of frames.
    pub(crate) recv_oct: AtomicU64,
    pub(crate) send_oct: AtomicU64,
    /// Set to the reason when an operator closes the connection.
    close: watch::Sender<Option<String>>,
    /// To the connection's task: describe your channels.
    channel_requests: mpsc::Sender<ChannelsRequest>,
    /// To the connection's task: close yourself or a channel (a test's fault).
    forced: mpsc::UnboundedSender<ForcedClose>,
    /// The other end, until the connection's task takes it.
    forced_requests: Mutex<Option<mpsc::UnboundedReceiver<ForcedClose>>>,
}

impl ConnectionInfo {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: ConnectionId,
        peer: SocketAddr,
        local: SocketAddr,
        user: String,
        vhost: String,
        connected_at_ms: u64,
        client_properties: FieldTable,
        (heartbeat_secs, frame_max, channel_max): (u16, u32, u16),
    ) -> (Self, mpsc::Receiver<ChannelsRequest>) {
        let (channel_requests, requests) = mpsc::channel(16);
        let (forced, forced_requests) = mpsc::unbounded_channel();
        let info = ConnectionInfo {
            id,
            name: format!("{peer} -> {local}"),
            peer,
            local,
            user,
            vhost,
            connected_at_ms,
            client_properties,
            heartbeat_secs,
            frame_max,
            channel_max,
            channels: AtomicUsize::new(0),
            recv_oct: AtomicU64::new(0),
            send_oct: AtomicU64::new(0),
            close: watch::channel(None).0,
            channel_requests,
            forced,
            forced_requests: Mutex::new(Some(forced_requests)),
        };
        (info, requests)
    }

    /// The connection's channels, as its task describes them; `None` if it does not answer
    /// in time (it is closing, or too busy).
    pub(crate) async fn channels(&self) -> Option<Vec<ChannelSummary>> {
        let (reply, answer) = oneshot::channel();
        self.channel_requests.try_send(reply).ok()?;
        tokio::time::timeout(CHANNELS_TIMEOUT, answer)
            .await
            .ok()?
            .ok()
    }

    /// Asks the connection to close with `reason` (it sends `connection.close`,
    /// `CONNECTION_FORCED`).
    pub(crate) fn close(&self, reason: String) {
        self.close.send_replace(Some(reason));
    }

    /// Resolves with the reason once an operator closed the connection.
    pub(crate) fn close_requested(&self) -> watch::Receiver<Option<String>> {
        self.close.subscribe()
    }

    /// Asks the connection's task to close itself or a channel as `close` says.
    pub(crate) fn force_close(&self, close: ForcedClose) {
        let _ = self.forced.send(close);
    }

    /// Where the connection's task hears of forced closes (once; later calls get a receiver
    /// that never yields).
    pub(crate) fn forced_closes(&self) -> mpsc::UnboundedReceiver<ForcedClose> {
        self.forced_requests
            .lock()
            .take()
            .unwrap_or_else(|| mpsc::unbounded_channel().1)
    }

    /// The name the client gave the connection (`connection_name` client property), if any.
    pub(crate) fn client_name(&self) -> Option<String> {
        match self.client_properties.get("connection_name")? {
            dwellmq_codec::FieldValue::LongStr(s) => Some(String::from_utf8_lossy(s).into()),
            _ => None,
        }
    }

    pub(crate) fn channel_count(&self) -> usize {
        self.channels.load(Ordering::Relaxed)
    }
}

/// Every open connection of a broker.
#[derive(Default)]
pub(crate) struct Connections {
    open: Mutex<BTreeMap<ConnectionId, Arc<ConnectionInfo>>>,
    /// Connections listed and unlisted since start (RabbitMQ's connection churn).
    pub(crate) opened: AtomicU64,
    pub(crate) closed: AtomicU64,
}

/// Keeps a connection listed while it lives.
pub(crate) struct Listed<'a> {
    connections: &'a Connections,
    pub(crate) info: Arc<ConnectionInfo>,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.connections.open.lock().remove(&self.info.id);
        self.connections.closed.fetch_add(1, Ordering::Relaxed);
    }
}

impl Connections {
    /// Lists `info` until the returned guard is dropped.
    pub(crate) fn register(&self, info: ConnectionInfo) -> Listed<'_> {
        let info = Arc::new(info);
        self.open.lock().insert(info.id, Arc::clone(&info));
        self.opened.fetch_add(1, Ordering::Relaxed);
        Listed {
            connections: self,
            info,
        }
    }

    /// Open connections, oldest first.
    pub(crate) fn list(&self) -> Vec<Arc<ConnectionInfo>> {
        self.open.lock().values().cloned().collect()
    }

    /// The connection called `name`.
    pub(crate) fn find(&self, name: &str) -> Option<Arc<ConnectionInfo>> {
        self.open.lock().values().find(|c| c.name == name).cloned()
    }
}
