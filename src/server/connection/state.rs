//! What one open connection owns (its channels, exclusive queues, counters) and what it does
//! with a batch of frames read, a commit that ended, an alarm, and at its end.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use dwellmq_codec::methods::ConnectionBlocked;
use dwellmq_codec::{decode_frame, Method, ShortStr};
use dwellmq_core::BrokerError;

use super::dispatch::close_channel;
use super::Fault;
use crate::broker::connections::{ChannelSummary, ConnectionInfo};
use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::{ConnectionId, Queue};
use crate::broker::stats::MessageCounts;
use crate::broker::vhost::VHost;
use crate::broker::BrokerState;
use crate::server::channel::{Channel, ConnContext};
use crate::server::commit_wait::CommitWait;
use crate::server::handshake::{ClientCapabilities, Negotiated};
use crate::server::outbound::Outbound;

pub(super) enum ChannelSlot {
    Open(Box<Channel>),
    /// We sent `channel.close` and wait for `close-ok`; other frames are dropped.
    Closing,
}

/// The per-connection state the frame loop works on.
pub(super) struct Connection {
    id: ConnectionId,
    user: String,
    pub(super) state: Arc<BrokerState>,
    vhost: Arc<VHost>,
    pub(super) outbound: Arc<Outbound>,
    pub(super) frame_max: u32,
    pub(super) channel_max: u16,
    capabilities: ClientCapabilities,
    pub(super) channels: HashMap<u16, ChannelSlot>,
    exclusive_queues: Vec<Arc<Queue>>,
    /// Only connections that publish are blocked by the memory alarm, as in RabbitMQ.
    pub(super) has_published: bool,
    sent_blocked: bool,
    pub(super) counts: MessageCounts,
    /// `process` left complete frames in the buffer (the output was over its bound, or a
    /// reply waits for a commit).
    pub(super) stopped_early: bool,
    /// A reply waiting for a store commit (`tx.commit-ok`, a declare-ok): nothing more is
    /// read meanwhile.
    pub(super) commit_wait: Arc<CommitWait>,
    /// When the bytes in the buffer were read (broker clock, ms): a delayed message is due
    /// its `x-delay` after it reached the broker, not after the broker got to it in a long
    /// read (or after a pause).
    pub(super) received_ms: u64,
}

/// What the frame loop should do next.
pub(super) enum Flow {
    Continue,
    /// The client closed the connection and we answered `close-ok`.
    Closed,
}

impl Connection {
    /// The connection `negotiated` opened (its client properties are the listing's).
    pub(super) fn new(
        id: ConnectionId,
        state: &Arc<BrokerState>,
        outbound: &Arc<Outbound>,
        negotiated: Negotiated,
    ) -> Connection {
        Connection {
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
        }
    }

    /// The open channels, by number, as the management API lists them.
    pub(super) fn channel_summaries(&self) -> Vec<ChannelSummary> {
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

    pub(super) fn context(&mut self) -> (ConnContext<'_>, &mut HashMap<u16, ChannelSlot>) {
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
    pub(super) fn handle_input(
        &mut self,
        buf: &mut BytesMut,
        info: &ConnectionInfo,
    ) -> Result<Flow, Fault> {
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

    /// Sends the reply whose commit ended (`tx.commit-ok`, a declare-ok), or closes its
    /// channel (506) if the commit failed. Returns whether a reply waited and is done.
    pub(super) fn finish_commit_wait(&mut self) -> bool {
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
    pub(super) fn update_blocked(&mut self, blocked: bool, alarms: Alarms) {
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

    pub(super) fn on_writable(&mut self) {
        for slot in self.channels.values() {
            if let ChannelSlot::Open(channel) = slot {
                channel.on_writable(&self.vhost);
            }
        }
    }

    /// Closes every channel (requeueing unacked messages) and deletes exclusive queues.
    pub(super) fn teardown(&mut self) {
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
pub(super) struct Alarms {
    /// Too much memory held for messages.
    pub(super) memory: bool,
    /// The store cannot keep up (writes failing, or too much queued for it).
    pub(super) disk: bool,
}

impl Alarms {
    pub(super) fn any(self) -> bool {
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
