//! One AMQP channel: the methods a client sends on it, split by concern into
//! `topology` (declare/bind/delete), `content` (assembling publishes), `publish` (routing,
//! confirms, transactions), `consume` (consumers, prefetch, flow, get) and `settle` (acks).

mod confirms;
mod consume;
pub(crate) use confirms::send_settled;
mod content;
mod publish;
mod settle;
mod topology;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dwellmq_codec::{Method, ShortStr};
use dwellmq_core::{BrokerError, BrokerResult};

use content::PendingPublish;
use dwellmq_core::queue::ReturnCause;
use publish::PublishMode;
use settle::{Return, Settlement};

use super::delivery::{DeliveryChannel, Unacked};
use crate::broker::access::{AccessCache, Operation, ResourceKind};
use crate::broker::connections::ChannelSummary;
use crate::broker::queue::consumer::Consumer;
use crate::broker::queue::{ConnectionId, Queue};
use crate::broker::rates::ChannelCounters;
use crate::broker::stats::MessageCounts;
use crate::broker::vhost::{Routing, VHost};
use crate::broker::BrokerState;
use crate::server::commit_wait::CommitWait;
use crate::server::outbound::Outbound;

/// What a channel needs from its connection while handling a method.
pub(crate) struct ConnContext<'a> {
    pub(crate) id: ConnectionId,
    /// The authenticated user.
    pub(crate) user: &'a str,
    pub(crate) state: &'a Arc<BrokerState>,
    pub(crate) vhost: &'a Arc<VHost>,
    pub(crate) outbound: &'a Arc<Outbound>,
    /// Exclusive queues this connection declared (deleted when it closes).
    pub(crate) exclusive_queues: &'a mut Vec<Arc<Queue>>,
    /// The client asked for `basic.cancel` when a queue it consumes from goes away.
    pub(crate) consumer_cancel_notify: bool,
    /// What this connection published since the last flush to `BrokerState::stats`.
    pub(crate) counts: &'a mut MessageCounts,
    /// Where a reply that must wait for a store commit (`tx.commit-ok`) waits.
    pub(crate) commit_wait: &'a Arc<CommitWait>,
    /// When the frames being handled were read (broker clock, ms).
    pub(crate) received_ms: u64,
}

/// A channel's state, owned by its connection task.
pub(crate) struct Channel {
    pub(crate) delivery: Arc<DeliveryChannel>,
    consumers: HashMap<ShortStr, (Arc<Consumer>, Arc<Queue>)>,
    pending: Option<PendingPublish>,
    mode: PublishMode,
    /// `basic.qos` prefetch for consumers created from now on (global=false).
    consumer_prefetch: u32,
    /// The queue named by the last `queue.declare`, used when a method names queue "".
    last_queue: Option<ShortStr>,
    /// The direct reply-to consumer: (consumer tag, reply address).
    reply_consumer: Option<(ShortStr, ShortStr)>,
    routing: Routing,
    settle_scratch: Vec<Unacked>,
    /// Recent permission decisions for this connection's user and vhost.
    access: AccessCache,
    /// Message counters for the management API's rates.
    counters: ChannelCounters,
}

fn unexpected_frame(text: String) -> BrokerError {
    BrokerError::UnexpectedFrame(text)
}

impl Channel {
    pub(crate) fn new(delivery: Arc<DeliveryChannel>) -> Self {
        Channel {
            delivery,
            consumers: HashMap::new(),
            pending: None,
            mode: PublishMode::Plain,
            consumer_prefetch: 0,
            last_queue: None,
            reply_consumer: None,
            routing: Routing::default(),
            settle_scratch: Vec::new(),
            access: AccessCache::default(),
            counters: ChannelCounters::default(),
        }
    }

    /// What the management API shows of this channel.
    pub(crate) fn summary(&self) -> ChannelSummary {
        ChannelSummary {
            number: self.delivery.id,
            consumers: self.consumers.len(),
            prefetch_count: self.consumer_prefetch,
            global_prefetch_count: self.delivery.credit.global_prefetch.load(Ordering::Relaxed),
            unacked: self.delivery.unacked_count(),
            confirm: matches!(self.mode, PublishMode::Confirm { .. }),
            transactional: matches!(self.mode, PublishMode::Transactional { .. }),
            publish: self.counters.publish,
            confirm_count: self.counters.confirm,
            ack: self.counters.ack.get(),
            deliver_get: self.delivery.delivered_count(),
        }
    }

    /// Adds what this channel counted to the exchanges' counters (once per batch of frames).
    pub(crate) fn flush_counters(&mut self) {
        self.counters.flush();
    }

    pub(super) fn id(&self) -> u16 {
        self.delivery.id
    }

    /// Checks that the user may do `operation` on the named queue or exchange (RabbitMQ's
    /// `check_*_permitted`); refused: 403, closing the channel.
    pub(super) fn permit(
        &mut self,
        cx: &ConnContext<'_>,
        operation: Operation,
        kind: ResourceKind,
        name: &ShortStr,
    ) -> BrokerResult<()> {
        let who = crate::broker::access::Principal {
            access: &cx.state.access,
            user: cx.user,
            vhost: &cx.vhost.name,
        };
        self.access.check(&who, operation, kind, name)
    }

    pub(super) fn reply(&self, cx: &ConnContext<'_>, method: Method) {
        cx.outbound.send_method(self.id(), &method);
    }

    /// Handles a method frame for this (open) channel.
    pub(crate) fn on_method(
        &mut self,
        cx: &mut ConnContext<'_>,
        method: Method,
    ) -> BrokerResult<()> {
        if self.pending.is_some() {
            return Err(unexpected_frame(
                "expected content header for class 60, got non content header frame instead".into(),
            ));
        }
        match method {
            Method::ChannelFlow(m) => self.channel_flow(cx, m),
            Method::ChannelFlowOk(_) => Ok(()),
            Method::ExchangeDeclare(_)
            | Method::ExchangeDelete(_)
            | Method::ExchangeBind(_)
            | Method::ExchangeUnbind(_)
            | Method::QueueDeclare(_)
            | Method::QueueBind(_)
            | Method::QueueUnbind(_)
            | Method::QueueDelete(_) => self.on_topology(cx, method),
            Method::QueuePurge(m) => self.queue_purge(cx, m),
            Method::BasicQos(m) => self.basic_qos(cx, m),
            Method::BasicConsume(m) => self.basic_consume(cx, m),
            Method::BasicCancel(m) => self.basic_cancel(cx, m),
            Method::BasicPublish(m) => self.basic_publish(cx, m),
            Method::BasicGet(m) => self.basic_get(cx, m),
            Method::BasicAck(m) => self.settle_or_buffer(
                cx.vhost,
                Settlement::Ack {
                    tag: m.delivery_tag,
                    multiple: m.multiple,
                },
            ),
            Method::BasicReject(m) => self.settle_or_buffer(
                cx.vhost,
                Settlement::Reject {
                    tag: m.delivery_tag,
                    multiple: false,
                    requeue: m.requeue,
                    failed: true,
                },
            ),
            Method::BasicNack(m) => self.settle_or_buffer(
                cx.vhost,
                Settlement::Reject {
                    tag: m.delivery_tag,
                    multiple: m.multiple,
                    requeue: m.requeue,
                    failed: false,
                },
            ),
            Method::BasicRecover(m) => self.recover(cx, m.requeue, true),
            // The deprecated asynchronous form has no reply.
            Method::BasicRecoverAsync(m) => self.recover(cx, m.requeue, false),
            Method::ConfirmSelect(m) => self.confirm_select(cx, m),
            Method::TxSelect => self.tx_select(cx),
            Method::TxCommit => self.tx_commit(cx),
            Method::TxRollback => self.tx_rollback(cx),
            other => Err(BrokerError::CommandInvalid(format!(
                "unexpected method {} on a channel",
                other.name()
            ))),
        }
    }

    /// Tears the channel down: consumers go, unacked messages return to their queues.
    pub(crate) fn close(&mut self, cx: &mut ConnContext<'_>) {
        self.pending = None;
        if let PublishMode::Confirm { confirms, .. } = &self.mode {
            confirms.close();
        }
        self.counters.flush();
        cx.counts.channel_closed(self.counters.publish > 0);
        let mut unacked = std::mem::take(&mut self.settle_scratch);
        self.delivery.close(&mut unacked);
        self.return_to_queues(
            cx.vhost,
            &mut unacked,
            Return::Requeue(ReturnCause::ConsumerGone),
        );
        self.settle_scratch = unacked;
        let tags: Vec<ShortStr> = self.consumers.keys().cloned().collect();
        for tag in tags {
            self.cancel_consumer(cx, &tag);
        }
        if let Some((_, address)) = self.reply_consumer.take() {
            cx.state.reply_consumers.unregister(&address);
        }
    }
}
