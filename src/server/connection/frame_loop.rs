//! The loop of an open connection: it handles what the client sent, batch by batch, and
//! waits for the next thing that needs it, one [`Event`] at a time: bytes read, a heartbeat
//! due, an alarm that changed, a commit that ended, room in its output, a listing asking for
//! its channels, a close (a test's, an operator's, the broker's shutdown).

use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use dwellmq_core::BrokerError;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::state::{Alarms, Connection, Flow};
use super::{await_close_ok, send_connection_close, Fault, FaultOrExit};
use crate::broker::connections::{ChannelsRequest, ConnectionInfo, ForcedClose};
use crate::broker::queue::ConnectionId;
use crate::broker::BrokerState;
use crate::server::commit_wait::CommitWait;
use crate::server::handshake::Negotiated;
use crate::server::outbound::Outbound;
use crate::server::shutdown_requested;

/// How a connection ends: the client closed it, a fault to report, or the socket is gone.
type Outcome = Result<(), FaultOrExit>;

/// Serves the connection `negotiated` opened until it ends, then tears it down.
#[allow(clippy::too_many_arguments)]
pub(super) async fn run<R: AsyncRead + Unpin>(
    id: ConnectionId,
    state: &Arc<BrokerState>,
    mut negotiated: Negotiated,
    ends: (SocketAddr, SocketAddr),
    reader: &mut R,
    buf: &mut BytesMut,
    outbound: &Arc<Outbound>,
    shutdown: watch::Receiver<bool>,
) {
    let (info, channel_requests) = listing(id, state, &mut negotiated, ends);
    let listed = state.connections.register(info);
    let heartbeat = Heartbeat::new(negotiated.heartbeat_secs, outbound);
    let mut conn = Connection::new(id, state, outbound, negotiated);
    let signals = Signals {
        heartbeat,
        memory_alarm: state.memory.subscribe(),
        disk_alarm: state.disk.subscribe(),
        commit_wait: Arc::clone(&conn.commit_wait),
        channel_requests,
        forced_closes: listed.info.forced_closes(),
        operator_close: listed.info.close_requested(),
        shutdown,
    };
    let outcome = FrameLoop {
        // Frames the client pipelined behind `connection.open` may already be in `buf`: they
        // are handled now, not when (if ever) more bytes arrive.
        unprocessed: !buf.is_empty(),
        conn: &mut conn,
        signals,
        reader: &mut *reader,
        buf: &mut *buf,
        info: &listed.info,
    }
    .run()
    .await;
    if let Err(FaultOrExit::Fault(fault)) = &outcome {
        tracing::warn!(error = %fault.error, "closing connection");
        send_connection_close(outbound, fault);
        await_close_ok(reader, buf, conn.frame_max).await;
    }
    conn.teardown();
}

/// The connection as the management API lists it (the client's properties move there).
fn listing(
    id: ConnectionId,
    state: &BrokerState,
    negotiated: &mut Negotiated,
    (peer, local): (SocketAddr, SocketAddr),
) -> (ConnectionInfo, mpsc::Receiver<ChannelsRequest>) {
    ConnectionInfo::new(
        id,
        peer,
        local,
        negotiated.user.clone(),
        negotiated.vhost.name.to_string(),
        state.clock.now_ms(),
        std::mem::take(&mut negotiated.client_properties),
        (
            negotiated.heartbeat_secs,
            negotiated.frame_max,
            negotiated.channel_max,
        ),
    )
}

/// What can wake the loop besides its socket.
struct Signals {
    heartbeat: Heartbeat,
    memory_alarm: watch::Receiver<bool>,
    disk_alarm: watch::Receiver<bool>,
    commit_wait: Arc<CommitWait>,
    channel_requests: mpsc::Receiver<ChannelsRequest>,
    forced_closes: mpsc::UnboundedReceiver<ForcedClose>,
    operator_close: watch::Receiver<Option<String>>,
    shutdown: watch::Receiver<bool>,
}

/// What woke the loop.
enum Event {
    /// A read into the buffer: bytes, or 0 or an error when the client is gone.
    Read(std::io::Result<usize>),
    HeartbeatDue,
    AlarmChanged,
    CommitEnded,
    /// The output went back under its bound.
    Writable,
    /// The management API asks for the channels.
    ChannelsAsked(ChannelsRequest),
    /// A test closes the connection or a channel.
    ForcedClose(ForcedClose),
    /// An operator closes the connection.
    OperatorClose,
    Shutdown,
}

/// Whether the loop reads and handles frames now.
#[derive(Clone, Copy)]
struct Gate {
    /// A resource alarm blocks this publishing connection.
    blocked: bool,
    /// The output is over its bound, or a reply waits for a commit.
    paused: bool,
}

impl Gate {
    fn open(self) -> bool {
        !self.blocked && !self.paused
    }
}

/// Heartbeat monitoring: a heartbeat sent every half interval, and a client heard from
/// nothing for two intervals dropped.
struct Heartbeat {
    /// The negotiated interval; zero for none.
    interval: Duration,
    ticker: Interval,
    /// When the client last showed it is alive.
    last_alive: Instant,
    /// How much output the client had read at the last tick.
    last_written: u64,
}

impl Heartbeat {
    fn new(heartbeat_secs: u16, outbound: &Outbound) -> Heartbeat {
        let interval = Duration::from_secs(u64::from(heartbeat_secs));
        let mut ticker = tokio::time::interval(if interval.is_zero() {
            Duration::from_secs(3600)
        } else {
            interval / 2
        });
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Heartbeat {
            interval,
            ticker,
            last_alive: Instant::now(),
            last_written: outbound.written_total(),
        }
    }

    fn is_on(&self) -> bool {
        !self.interval.is_zero()
    }

    fn alive_now(&mut self) {
        self.last_alive = Instant::now();
    }

    /// At a tick: whether the client has been silent too long. While paused on its output,
    /// a client that reads it is alive even though its heartbeats wait unread; one that reads
    /// nothing for two intervals is not.
    fn client_silent(&mut self, paused: bool, written: u64) -> bool {
        if paused && written != self.last_written {
            self.alive_now();
        }
        self.last_written = written;
        self.last_alive.elapsed() > self.interval * 2
    }
}

struct FrameLoop<'a, R> {
    conn: &'a mut Connection,
    signals: Signals,
    reader: &'a mut R,
    buf: &'a mut BytesMut,
    info: &'a ConnectionInfo,
    /// Complete frames may wait in `buf` (left by a batch that stopped early, or by a reply
    /// that waited for its commit).
    unprocessed: bool,
}

impl<R: AsyncRead + Unpin> FrameLoop<'_, R> {
    async fn run(mut self) -> Outcome {
        loop {
            let gate = self.gate();
            let step = if self.unprocessed && gate.open() {
                self.handle_input()
            } else {
                let event = self.next_event(gate).await;
                self.on_event(event, gate)
            };
            if let ControlFlow::Break(outcome) = step {
                return outcome;
            }
        }
    }

    /// Blocks or unblocks the connection as the alarms say, and tells whether it reads.
    fn gate(&mut self) -> Gate {
        let alarms = Alarms {
            memory: *self.signals.memory_alarm.borrow(),
            disk: *self.signals.disk_alarm.borrow(),
        };
        let blocked = alarms.any() && self.conn.has_published;
        self.conn.update_blocked(blocked, alarms);
        // The connection's own output is over its bound: nothing more is read (every request
        // read could add a reply) until the client has read enough of it.
        // A reply waits for a commit: nothing more is handled until it went out.
        let commit_pending = self.conn.commit_wait.is_pending();
        let paused = self.conn.outbound.read_paused() || commit_pending;
        if blocked || commit_pending {
            // Nothing is read while blocked, so the client's heartbeats cannot be seen:
            // heartbeat monitoring pauses (as in RabbitMQ) instead of killing the connection.
            self.signals.heartbeat.alive_now();
        }
        Gate { blocked, paused }
    }

    async fn next_event(&mut self, gate: Gate) -> Event {
        let signals = &mut self.signals;
        let heartbeat_on = signals.heartbeat.is_on();
        tokio::select! {
            read = self.reader.read_buf(self.buf), if gate.open() => Event::Read(read),
            _ = signals.heartbeat.ticker.tick(), if heartbeat_on => Event::HeartbeatDue,
            _ = signals.memory_alarm.changed() => Event::AlarmChanged,
            _ = signals.disk_alarm.changed() => Event::AlarmChanged,
            _ = signals.commit_wait.ended() => Event::CommitEnded,
            _ = self.conn.outbound.writable() => Event::Writable,
            Some(reply) = signals.channel_requests.recv() => Event::ChannelsAsked(reply),
            Some(close) = signals.forced_closes.recv() => Event::ForcedClose(close),
            Ok(()) = signals.operator_close.changed() => Event::OperatorClose,
            _ = shutdown_requested(&mut signals.shutdown) => Event::Shutdown,
        }
    }

    fn on_event(&mut self, event: Event, gate: Gate) -> ControlFlow<Outcome> {
        match event {
            Event::Read(Ok(0) | Err(_)) => ControlFlow::Break(Err(FaultOrExit::Exit)),
            Event::Read(Ok(read)) => self.on_read(read),
            Event::HeartbeatDue => self.on_heartbeat_due(gate),
            Event::AlarmChanged => ControlFlow::Continue(()),
            Event::CommitEnded => {
                if self.conn.finish_commit_wait() {
                    // What the client pipelined behind the waiting method is handled now.
                    self.unprocessed = !self.buf.is_empty();
                }
                ControlFlow::Continue(())
            }
            Event::Writable => {
                self.conn.on_writable();
                ControlFlow::Continue(())
            }
            Event::ChannelsAsked(reply) => {
                let _ = reply.send(self.conn.channel_summaries());
                ControlFlow::Continue(())
            }
            Event::ForcedClose(close) => match self.conn.force_close(close) {
                Some(fault) => ControlFlow::Break(Err(FaultOrExit::Fault(fault))),
                None => ControlFlow::Continue(()),
            },
            Event::OperatorClose => {
                let reason = self.signals.operator_close.borrow().clone();
                forced(reason.unwrap_or_default())
            }
            Event::Shutdown => {
                forced("broker forced connection closure with reason 'shutdown'".into())
            }
        }
    }

    fn on_read(&mut self, read: usize) -> ControlFlow<Outcome> {
        self.info.recv_oct.fetch_add(read as u64, Ordering::Relaxed);
        self.signals.heartbeat.alive_now();
        self.conn.received_ms = self.conn.state.clock.now_ms();
        self.handle_input()?;
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(64 * 1024);
        }
        ControlFlow::Continue(())
    }

    /// Handles the complete frames in the buffer.
    fn handle_input(&mut self) -> ControlFlow<Outcome> {
        match self.conn.handle_input(self.buf, self.info) {
            Ok(Flow::Continue) => {
                self.unprocessed = self.conn.stopped_early;
                ControlFlow::Continue(())
            }
            Ok(Flow::Closed) => ControlFlow::Break(Ok(())),
            Err(fault) => ControlFlow::Break(Err(FaultOrExit::Fault(fault))),
        }
    }

    /// Sends a heartbeat, or drops a client heard from nothing for two intervals.
    fn on_heartbeat_due(&mut self, gate: Gate) -> ControlFlow<Outcome> {
        let heartbeat = &mut self.signals.heartbeat;
        if heartbeat.client_silent(gate.paused, self.conn.outbound.written_total()) {
            tracing::warn!(timeout = ?heartbeat.interval, "missed heartbeats from client, closing");
            return ControlFlow::Break(Err(FaultOrExit::Exit));
        }
        self.conn.outbound.with(|sink| sink.heartbeat());
        ControlFlow::Continue(())
    }
}

/// The connection is closed with `CONNECTION_FORCED` and `reason`.
fn forced(reason: String) -> ControlFlow<Outcome> {
    let fault = Fault::new(BrokerError::ConnectionForced(reason), 0, 0);
    ControlFlow::Break(Err(FaultOrExit::Fault(fault)))
}
