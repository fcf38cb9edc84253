//! One client connection: negotiation, the frame loop, heartbeats, blocking and teardown.

mod forced;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use dwellmq_codec::methods::{ChannelClose, ConnectionBlocked, ConnectionClose};
use dwellmq_codec::{decode_frame, Frame, FramePayload, Method, ShortStr};
use dwellmq_core::BrokerError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::channel::{Channel, ConnContext};
use super::commit_wait::CommitWait;
use super::delivery::DeliveryChannel;
use super::frames::{Fault, FaultOrExit};
use super::handshake::{negotiate, ClientCapabilities, Negotiated};
use super::outbound::{run_writer, Outbound};
use super::shutdown_requested;
use crate::broker::connections::{ChannelSummary, ConnectionInfo};
use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::ConnectionId;
use crate::broker::stats::MessageCounts;
use crate::broker::vhost::VHost;
use crate::broker::BrokerState;

/// How long to wait for `close-ok` after sending `connection.close`.
const CLOSE_OK_TIMEOUT: Duration = Duration::from_secs(3);

/// How long, once the connection is over, to keep reading until the client closes its side.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

enum ChannelSlot {
    Open(Box<Channel>),
    /// We sent `channel.close` and wait for `close-ok`; other frames are dropped.
    Closing,
}

/// The per-connection state the frame loop works on.
struct Connection {
    id: ConnectionId,
    user: String,
    state: Arc<BrokerState>,
    vhost: Arc<VHost>,
    outbound: Arc<Outbound>,
    frame_max: u32,
    channel_max: u16,
    capabilities: ClientCapabilities,
    channels: HashMap<u16, ChannelSlot>,
    exclusive_queues: Vec<Arc<crate::broker::queue::Queue>>,
    /// Only connections that publish are blocked by the memory alarm, as in RabbitMQ.
    has_published: bool,
    sent_blocked: bool,
    counts: MessageCounts,
    /// `process` left complete frames in the buffer (the output was over its bound, or a
    /// reply waits for a commit).
    stopped_early: bool,
    /// A reply waiting for a store commit (`tx.commit-ok`, a declare-ok): nothing more is
    /// read meanwhile.
    commit_wait: Arc<CommitWait>,
    /// When the bytes in the buffer were read (broker clock, ms): a delayed message is due
    /// its `x-delay` after it reached the broker, not after the broker got to it in a long
    /// read (or after a pause).
    received_ms: u64,
}

/// What the frame loop should do next.
enum Flow {
    Continue,
    /// The client closed the connection and we answered `close-ok`.
    Closed,
}

/// Serves one connection, given as the two halves of its byte stream (a TCP socket's, or an
/// in-memory stream's), until it closes.
pub(crate) async fn serve<R, W>(
    state: Arc<BrokerState>,
    reader: R,
    writer: W,
    ends: (SocketAddr, SocketAddr),
    shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_with_identity(state, reader, writer, ends, shutdown, None).await
}

/// [`serve`] for a connection whose peer proved an identity before AMQP began (the common
/// name of a verified TLS client certificate): the EXTERNAL mechanism is offered, for it.
pub(crate) async fn serve_with_identity<R, W>(
    state: Arc<BrokerState>,
    mut reader: R,
    writer: W,
    (peer, local): (SocketAddr, SocketAddr),
    shutdown: watch::Receiver<bool>,
    identity: Option<String>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let id = state.next_connection_id();
    let span = tracing::info_span!("conn", id, %peer);
    async move {
        let outbound = Arc::new(Outbound::new(Arc::clone(&state.memory)));
        let writer_task = tokio::spawn(run_writer(Arc::clone(&outbound), writer));
        {
            let mut outbounds = state.outbounds.lock();
            outbounds.retain(|o| o.strong_count() > 0);
            let probe: Arc<dyn crate::broker::IdleProbe> = Arc::clone(&outbound) as _;
            outbounds.push(Arc::downgrade(&probe));
        }
        let mut buf = BytesMut::with_capacity(64 * 1024);

        let mut shutdown = shutdown;
        // A peer still negotiating when the broker shuts down is dropped (as RabbitMQ does):
        // it must not hold up `BrokerHandle::shutdown` until the handshake timeout.
        let negotiated = tokio::select! {
            negotiated = tokio::time::timeout(
                state.config.limits.handshake_timeout,
                negotiate(&state, &mut reader, &mut buf, &outbound, peer, identity.as_deref()),
            ) => negotiated,
            _ = shutdown_requested(&mut shutdown) => {
                tracing::debug!("broker shutting down during the handshake");
                Ok(Ok(None))
            }
        };
        match negotiated {
            Ok(Ok(Some(n))) => {
                tracing::info!(user = %n.user, vhost = %n.vhost.name, "connection open");
                let shutdown = shutdown.clone();
                run(
                    id,
                    &state,
                    n,
                    (peer, local),
                    &mut reader,
                    &mut buf,
                    &outbound,
                    shutdown,
                )
                .await;
            }
            Ok(Ok(None)) | Ok(Err(FaultOrExit::Exit)) => {}
            Ok(Err(FaultOrExit::Fault(fault))) => {
                tracing::warn!(error = %fault.error, "negotiation failed");
                send_connection_close(&outbound, &fault);
            }
            Err(_) => tracing::warn!("handshake timed out"),
        }
        outbound.close();
        finish_writing(&outbound, writer_task).await;
        drain_until_peer_closes(&mut reader, &mut buf, &mut shutdown).await;
        tracing::debug!("connection closed");
    }
    .instrument(span)
    .await
}

/// Lets the writer send what is queued (the last `close` or `close-ok` among it) while the
/// client keeps reading; a client that reads nothing for [`CLOSE_OK_TIMEOUT`] gets the rest
/// dropped, or it would hold its connection, its buffer and the broker's shutdown forever.
async fn finish_writing(outbound: &Outbound, mut writer_task: tokio::task::JoinHandle<()>) {
    loop {
        let written = outbound.written_total();
        match tokio::time::timeout(CLOSE_OK_TIMEOUT, &mut writer_task).await {
            Ok(_) => return,
            Err(_) if outbound.written_total() == written => {
                tracing::warn!(
                    buffered = outbound.buffered(),
                    "client stopped reading; dropping its unwritten output"
                );
                writer_task.abort();
                outbound.abandon();
                return;
            }
            Err(_) => {}
        }
    }
}

fn send_connection_close(outbound: &Outbound, fault: &Fault) {
    outbound.send_method(
        0,
        &Method::ConnectionClose(ConnectionClose {
            reply_code: fault.error.reply_code(),
            reply_text: ShortStr::from(fault.error.reply_text()),
            class_id: fault.class_id,
            method_id: fault.method_id,
        }),
    );
}

#[allow(clippy::too_many_arguments)]
async fn run<R: AsyncRead + Unpin>(
    id: ConnectionId,
    state: &Arc<BrokerState>,
    negotiated: Negotiated,
    (peer, local): (SocketAddr, SocketAddr),
    reader: &mut R,
    buf: &mut BytesMut,
    outbound: &Arc<Outbound>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (info, mut channel_requests) = ConnectionInfo::new(
        id,
        peer,
        local,
        negotiated.user.clone(),
        negotiated.vhost.name.to_string(),
        state.clock.now_ms(),
        negotiated.client_properties,
        (
            negotiated.heartbeat_secs,
            negotiated.frame_max,
            negotiated.channel_max,
        ),
    );
    let listed = state.connections.register(info);
    let mut operator_close = listed.info.close_requested();
    let mut forced_closes = listed.info.forced_closes();
    let mut conn = Connection {
        id,
        user: negotiated.user,
        state: Arc::clone(state),
        vhost: negotiated.vhost,
        outbound: Arc::clone(outbound),
        frame_max: negotiated.frame_max,
        channel_max: negotiated.channel_max,
        capabilities: negotiated.capabilities,
        channels: HashMap::new(),
        exclusive_queues: Vec::new(),
        has_published: false,
        sent_blocked: false,
        counts: MessageCounts::default(),
        stopped_early: false,
        commit_wait: CommitWait::new(),
        received_ms: state.clock.now_ms(),
    };
    let heartbeat = Duration::from_secs(u64::from(negotiated.heartbeat_secs));
    let mut ticker = tokio::time::interval(if heartbeat.is_zero() {
        Duration::from_secs(3600)
    } else {
        heartbeat / 2
    });
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_read = Instant::now();
    let mut last_written = outbound.written_total();
    let mut memory_alarm = state.memory.subscribe();
    let mut disk_alarm = state.disk.subscribe();
    let commit_wait = Arc::clone(&conn.commit_wait);

    // Frames the client pipelined behind `connection.open` may already be in `buf`: they are
    // handled now, not when (if ever) more bytes arrive.
    let mut unprocessed = !buf.is_empty();
    let outcome: Result<(), FaultOrExit> = loop {
        let alarms = Alarms {
            memory: *memory_alarm.borrow(),
            disk: *disk_alarm.borrow(),
        };
        let blocked = alarms.any() && conn.has_published;
        conn.update_blocked(blocked, alarms);
        // The connection's own output is over its bound: nothing more is read (every request
        // read could add a reply) until the client has read enough of it.
        // A reply waits for a commit: nothing more is handled until it went out.
        let paused = outbound.read_paused() || conn.commit_wait.is_pending();
        if blocked || conn.commit_wait.is_pending() {
            // Nothing is read while blocked, so the client's heartbeats cannot be seen:
            // heartbeat monitoring pauses (as in RabbitMQ) instead of killing the connection.
            last_read = Instant::now();
        }
        if unprocessed && !blocked && !paused {
            match conn.handle_input(buf, &listed.info) {
                Ok(Flow::Continue) => {
                    unprocessed = conn.stopped_early;
                    continue;
                }
                Ok(Flow::Closed) => break Ok(()),
                Err(fault) => break Err(FaultOrExit::Fault(fault)),
            }
        }
        tokio::select! {
            read = reader.read_buf(buf), if !blocked && !paused => match read {
                Ok(0) | Err(_) => break Err(FaultOrExit::Exit),
                Ok(read) => {
                    listed.info.recv_oct.fetch_add(read as u64, Ordering::Relaxed);
                    last_read = Instant::now();
                    conn.received_ms = conn.state.clock.now_ms();
                    match conn.handle_input(buf, &listed.info) {
                        Ok(Flow::Continue) => unprocessed = conn.stopped_early,
                        Ok(Flow::Closed) => break Ok(()),
                        Err(fault) => break Err(FaultOrExit::Fault(fault)),
                    }
                    if buf.capacity() - buf.len() < 4096 {
                        buf.reserve(64 * 1024);
                    }
                }
            },
            _ = ticker.tick(), if !heartbeat.is_zero() => {
                // While paused on its output, a client that reads it is alive even though
                // its heartbeats wait unread; one that reads nothing for two intervals is not.
                let written = outbound.written_total();
                if paused && written != last_written {
                    last_read = Instant::now();
                }
                last_written = written;
                if last_read.elapsed() > heartbeat * 2 {
                    tracing::warn!(timeout = ?heartbeat, "missed heartbeats from client, closing");
                    break Err(FaultOrExit::Exit);
                }
                outbound.with(|sink| sink.heartbeat());
            }
            _ = memory_alarm.changed() => {}
            _ = disk_alarm.changed() => {}
            _ = commit_wait.ended() => {
                if conn.finish_commit_wait() {
                    // What the client pipelined behind the waiting method is handled now.
                    unprocessed = !buf.is_empty();
                }
            }
            _ = outbound.writable() => conn.on_writable(),
            Some(reply) = channel_requests.recv() => {
                let _ = reply.send(conn.channel_summaries());
            }
            Some(close) = forced_closes.recv() => {
                if let Some(fault) = conn.force_close(close) {
                    break Err(FaultOrExit::Fault(fault));
                }
            }
            Ok(()) = operator_close.changed() => {
                let reason = operator_close.borrow().clone().unwrap_or_default();
                break Err(FaultOrExit::Fault(Fault::new(
                    BrokerError::ConnectionForced(reason),
                    0,
                    0,
                )));
            }
            _ = shutdown_requested(&mut shutdown) => {
                break Err(FaultOrExit::Fault(Fault::new(
                    BrokerError::ConnectionForced("broker forced connection closure with reason 'shutdown'".into()),
                    0,
                    0,
                )));
            }
        }
    };
    if let Err(FaultOrExit::Fault(fault)) = &outcome {
        tracing::warn!(error = %fault.error, "closing connection");
        send_connection_close(outbound, fault);
        await_close_ok(reader, buf, conn.frame_max).await;
    }
    conn.teardown();
}

/// After sending `connection.close`, discard frames until `close-ok` (or the peer's own
/// `close`) arrives, the socket ends, or the timeout passes.
async fn await_close_ok<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut BytesMut, frame_max: u32) {
    let wait = async {
        loop {
            match decode_frame(buf, frame_max) {
                Ok(Some(frame)) => {
                    if matches!(
                        frame.payload,
                        FramePayload::Method(
                            Method::ConnectionCloseOk | Method::ConnectionClose(_)
                        )
                    ) {
                        return;
                    }
                    continue;
                }
                Ok(None) => {}
                // After a framing error the buffer holds the bad frame and would fail again
                // forever: drop it, so that the `close-ok` the client sends next is seen.
                Err(_) => buf.clear(),
            }
            match reader.read_buf(buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_OK_TIMEOUT, wait).await;
}

/// Once the last frame is written (and our side shut down), reads and discards until the
/// client closes its side, as RabbitMQ does, for at most [`DRAIN_TIMEOUT`] or until the
/// broker shuts down.
///
/// Closing a socket with unread input makes the kernel send a reset instead of a clean end,
/// and a reset can destroy the `close-ok` still on its way to the client: a client with
/// frames in flight after its `connection.close` (amqp091-go answering a channel close,
/// amqplib with a full write buffer) then sees EPIPE or EOF instead of its close completing.
async fn drain_until_peer_closes<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    shutdown: &mut watch::Receiver<bool>,
) {
    let drain = async {
        loop {
            buf.clear();
            if buf.capacity() < 4096 {
                buf.reserve(64 * 1024);
            }
            match reader.read_buf(buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(DRAIN_TIMEOUT, drain) => {}
        _ = shutdown_requested(shutdown) => {}
    }
}

impl Connection {
    /// The open channels, by number, as the management API lists them.
    fn channel_summaries(&self) -> Vec<ChannelSummary> {
        let mut out: Vec<ChannelSummary> = self
            .channels
            .values()
            .filter_map(|slot| match slot {
                ChannelSlot::Open(channel) => Some(channel.summary()),
                ChannelSlot::Closing => None,
            })
            .collect();
        out.sort_by_key(|c| c.number);
        out
    }

    fn context(&mut self) -> (ConnContext<'_>, &mut HashMap<u16, ChannelSlot>) {
        (
            ConnContext {
                id: self.id,
                user: &self.user,
                state: &self.state,
                vhost: &self.vhost,
                outbound: &self.outbound,
                exclusive_queues: &mut self.exclusive_queues,
                consumer_cancel_notify: self.capabilities.consumer_cancel_notify,
                counts: &mut self.counts,
                commit_wait: &self.commit_wait,
                received_ms: self.received_ms,
            },
            &mut self.channels,
        )
    }

    /// [`Connection::process`], then updates what the management API shows.
    fn handle_input(&mut self, buf: &mut BytesMut, info: &ConnectionInfo) -> Result<Flow, Fault> {
        let processed = self.process(buf);
        info.channels.store(self.channels.len(), Ordering::Relaxed);
        info.send_oct
            .store(self.outbound.written_total(), Ordering::Relaxed);
        processed
    }

    /// Handles the complete frames in `buf`, then sends the confirms they produced. Stops
    /// early (setting `stopped_early`, the rest stays in `buf`) once the output is over its
    /// bound, so that one large read cannot add more than a frame's worth of replies past it.
    fn process(&mut self, buf: &mut BytesMut) -> Result<Flow, Fault> {
        self.stopped_early = false;
        let result = loop {
            if self.outbound.read_paused() || self.commit_wait.is_pending() {
                self.stopped_early = true;
                break Ok(Flow::Continue);
            }
            match decode_frame(buf, self.frame_max) {
                Ok(Some(frame)) => match self.on_frame(frame) {
                    Ok(Flow::Continue) => {}
                    other => break other,
                },
                Ok(None) => break Ok(Flow::Continue),
                Err(e) => break Err(Fault::from(e)),
            }
        };
        for slot in self.channels.values_mut() {
            if let ChannelSlot::Open(channel) = slot {
                channel.flush_confirms(&self.outbound);
                channel.flush_counters();
            }
        }
        self.state.stats.flush(&mut self.counts);
        result
    }

    fn on_frame(&mut self, frame: Frame) -> Result<Flow, Fault> {
        if frame.channel == 0 {
            return self.on_connection_frame(frame.payload);
        }
        let id = frame.channel;
        if matches!(frame.payload, FramePayload::Heartbeat) {
            return Err(Fault::new(
                BrokerError::FrameError("heartbeat frame on a non-zero channel".into()),
                0,
                0,
            ));
        }
        let (class_id, method_id) = match &frame.payload {
            FramePayload::Method(m) => (m.class_id(), m.method_id()),
            _ => (60, 40),
        };
        let channel_max = self.channel_max;
        let frame_max = self.frame_max;
        if matches!(frame.payload, FramePayload::Method(Method::BasicPublish(_))) {
            self.has_published = true;
        }
        let (mut cx, channels) = self.context();
        let slot = channels.get_mut(&id);
        match (slot, frame.payload) {
            (None, FramePayload::Method(Method::ChannelOpen)) => {
                // As RabbitMQ 3.10: channel_max bounds how many channels are open (closing
                // ones included), not the channel number a client picks.
                let open = channels.len();
                if open >= usize::from(channel_max) {
                    return Err(Fault::new(
                        BrokerError::NotAllowed(format!(
                            "number of channels opened ({open}) has reached the negotiated channel_max ({channel_max})"
                        )),
                        0,
                        0,
                    ));
                }
                let delivery =
                    Arc::new(DeliveryChannel::new(id, Arc::clone(cx.outbound), frame_max));
                channels.insert(id, ChannelSlot::Open(Box::new(Channel::new(delivery))));
                cx.counts.channels_opened += 1;
                cx.outbound.send_method(id, &Method::ChannelOpenOk);
                Ok(Flow::Continue)
            }
            (None, _) => Err(Fault::new(
                BrokerError::ChannelError("expected 'channel.open'".into()),
                class_id,
                method_id,
            )),
            (Some(ChannelSlot::Closing), FramePayload::Method(Method::ChannelCloseOk)) => {
                channels.remove(&id);
                Ok(Flow::Continue)
            }
            (Some(ChannelSlot::Closing), FramePayload::Method(Method::ChannelClose(_))) => {
                cx.outbound.send_method(id, &Method::ChannelCloseOk);
                Ok(Flow::Continue)
            }
            (Some(ChannelSlot::Closing), _) => Ok(Flow::Continue),
            (Some(ChannelSlot::Open(_)), FramePayload::Method(Method::ChannelOpen)) => {
                Err(Fault::new(
                    BrokerError::ChannelError("second 'channel.open' seen".into()),
                    20,
                    10,
                ))
            }
            (Some(ChannelSlot::Open(channel)), FramePayload::Method(Method::ChannelClose(_))) => {
                channel.close(&mut cx);
                cx.outbound.send_method(id, &Method::ChannelCloseOk);
                channels.remove(&id);
                Ok(Flow::Continue)
            }
            (Some(ChannelSlot::Open(_)), FramePayload::Method(Method::ChannelCloseOk)) => {
                Ok(Flow::Continue)
            }
            (Some(ChannelSlot::Open(channel)), payload) => {
                let result = match payload {
                    FramePayload::Method(method) => channel.on_method(&mut cx, method),
                    FramePayload::Header(header) => channel.on_header(&mut cx, header),
                    FramePayload::Body(body) => channel.on_body(&mut cx, body),
                    FramePayload::Heartbeat => Ok(()),
                };
                match result {
                    Ok(()) => Ok(Flow::Continue),
                    Err(error) if error.is_connection_error() => {
                        Err(Fault::new(error, class_id, method_id))
                    }
                    Err(error) => {
                        close_channel(&mut cx, channels, id, &error, (class_id, method_id));
                        Ok(Flow::Continue)
                    }
                }
            }
        }
    }

    fn on_connection_frame(&mut self, payload: FramePayload) -> Result<Flow, Fault> {
        match payload {
            FramePayload::Heartbeat => Ok(Flow::Continue),
            FramePayload::Method(Method::ConnectionClose(close)) => {
                tracing::debug!(code = close.reply_code, text = %close.reply_text, "client closed the connection");
                self.outbound.send_method(0, &Method::ConnectionCloseOk);
                Ok(Flow::Closed)
            }
            FramePayload::Method(Method::ConnectionCloseOk) => Ok(Flow::Closed),
            FramePayload::Method(Method::ConnectionUpdateSecret(_)) => {
                self.outbound
                    .send_method(0, &Method::ConnectionUpdateSecretOk);
                Ok(Flow::Continue)
            }
            FramePayload::Method(Method::ConnectionBlocked(_) | Method::ConnectionUnblocked) => {
                Ok(Flow::Continue)
            }
            // RabbitMQ's answer to any other method on channel 0 once the connection is open.
            FramePayload::Method(m) => Err(Fault::new(
                BrokerError::ChannelError("unexpected method in connection state running".into()),
                m.class_id(),
                m.method_id(),
            )),
            FramePayload::Header(_) | FramePayload::Body(_) => Err(Fault::new(
                BrokerError::UnexpectedFrame("content frame on channel 0".into()),
                0,
                0,
            )),
        }
    }

    /// Sends the reply whose commit ended (`tx.commit-ok`, a declare-ok), or closes its
    /// channel (506) if the commit failed. Returns whether a reply waited and is done.
    fn finish_commit_wait(&mut self) -> bool {
        let Some((waiting, committed)) = self.commit_wait.take() else {
            return false;
        };
        let (mut cx, channels) = self.context();
        if let Some(ChannelSlot::Open(_)) = channels.get(&waiting.channel) {
            if committed {
                cx.outbound.send_method(waiting.channel, &waiting.reply);
            } else {
                let error = BrokerError::ResourceError(waiting.failure.into());
                close_channel(
                    &mut cx,
                    channels,
                    waiting.channel,
                    &error,
                    (waiting.class_id, waiting.method_id),
                );
            }
        }
        true
    }

    /// Sends `connection.blocked` / `unblocked` as the alarms change (the reason names the
    /// alarms in effect when the block began, as RabbitMQ's does).
    fn update_blocked(&mut self, blocked: bool, alarms: Alarms) {
        if blocked == self.sent_blocked {
            return;
        }
        self.sent_blocked = blocked;
        if !self.capabilities.connection_blocked {
            return;
        }
        let method = if blocked {
            Method::ConnectionBlocked(ConnectionBlocked {
                reason: ShortStr::from_static(alarms.reason()),
            })
        } else {
            Method::ConnectionUnblocked
        };
        self.outbound.send_method(0, &method);
    }

    fn on_writable(&mut self) {
        for slot in self.channels.values() {
            if let ChannelSlot::Open(channel) = slot {
                channel.on_writable();
            }
        }
    }

    /// Closes every channel (requeueing unacked messages) and deletes exclusive queues.
    fn teardown(&mut self) {
        let (mut cx, channels) = self.context();
        for (_, slot) in channels.drain() {
            if let ChannelSlot::Open(mut channel) = slot {
                channel.close(&mut cx);
            }
        }
        for queue in std::mem::take(cx.exclusive_queues) {
            let _ = cx
                .vhost
                .delete_queue_instance_reporting(&queue, DefinitionWrites::UNAWAITED);
        }
        // The channels closed here count too.
        self.state.stats.flush(&mut self.counts);
    }
}

/// The resource alarms a connection watches.
#[derive(Debug, Clone, Copy)]
struct Alarms {
    /// Too much memory held for messages.
    memory: bool,
    /// The store cannot keep up (writes failing, or too much queued for it).
    disk: bool,
}

impl Alarms {
    fn any(self) -> bool {
        self.memory || self.disk
    }

    /// `connection.blocked`'s reason, in RabbitMQ's words.
    fn reason(self) -> &'static str {
        match (self.memory, self.disk) {
            (true, true) => "low on memory & disk",
            (false, true) => "low on disk",
            _ => "low on memory",
        }
    }
}

/// Closes channel `id` for `error` (a channel error): `channel.close` goes out and the channel
/// waits for `close-ok`.
fn close_channel(
    cx: &mut ConnContext<'_>,
    channels: &mut HashMap<u16, ChannelSlot>,
    id: u16,
    error: &BrokerError,
    (class_id, method_id): (u16, u16),
) {
    tracing::debug!(channel = id, %error, "channel error");
    if let Some(ChannelSlot::Open(channel)) = channels.get_mut(&id) {
        // Publishes handled before the error are confirmed before the close, as RabbitMQ
        // (which confirms after every method) does.
        channel.flush_confirms(cx.outbound);
        channel.close(cx);
    }
    cx.outbound.send_method(
        id,
        &Method::ChannelClose(ChannelClose {
            reply_code: error.reply_code(),
            reply_text: ShortStr::from(error.reply_text()),
            class_id,
            method_id,
        }),
    );
    channels.insert(id, ChannelSlot::Closing);
}
