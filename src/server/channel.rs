//! One AMQP channel: method handling, content assembly, publisher confirms and transactions.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use dwellmq_codec::methods::*;
use dwellmq_codec::{reply_code, ContentHeader, FieldTable, FieldValue, Method, ShortStr};
use dwellmq_core::routing::{Binding, Destination};
use dwellmq_core::{arguments, BrokerError, BrokerResult, Message};

use crate::broker::delivery::{Consumer, DeliveryChannel, Unacked};
use crate::broker::exchange::ExchangeKind;
use crate::broker::names::server_generated_name;
use crate::broker::queue::{ConnectionId, Queue};
use crate::broker::vhost::{ExchangeSpec, QueueSpec, VHost};
use crate::broker::BrokerState;
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
}

impl ConnContext<'_> {
    /// Drops what the broker keeps for exchanges that no longer exist (held delayed messages).
    pub(crate) fn forget_exchanges(&self, names: &[ShortStr]) {
        for name in names {
            self.state.delayed.purge_exchange(&self.vhost.name, name);
        }
    }
}

/// A `basic.publish` waiting for its content header and body.
struct PendingPublish {
    method: BasicPublish,
    header: Option<ContentHeader>,
    body: BodyParts,
}

/// Body frames as they arrive: one frame is kept as the read buffer's slice (no copy);
/// only a body split over several frames is joined.
enum BodyParts {
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl BodyParts {
    fn len(&self) -> usize {
        match self {
            BodyParts::Empty => 0,
            BodyParts::One(b) => b.len(),
            BodyParts::Many(b) => b.len(),
        }
    }

    fn push(&mut self, chunk: Bytes) {
        *self = match std::mem::replace(self, BodyParts::Empty) {
            BodyParts::Empty => BodyParts::One(chunk),
            BodyParts::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + chunk.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&chunk);
                BodyParts::Many(joined)
            }
            BodyParts::Many(mut joined) => {
                joined.extend_from_slice(&chunk);
                BodyParts::Many(joined)
            }
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            BodyParts::Empty => Bytes::new(),
            BodyParts::One(b) => b,
            BodyParts::Many(b) => b.freeze(),
        }
    }
}

/// A complete message as published, before routing.
struct Publication {
    exchange: ShortStr,
    routing_key: ShortStr,
    mandatory: bool,
    message: Arc<Message>,
    /// Milliseconds a delayed exchange holds the message (0 = route now).
    delay_ms: u64,
}

/// An ack-family operation buffered by a transaction.
enum Settlement {
    Ack {
        tag: u64,
        multiple: bool,
    },
    Reject {
        tag: u64,
        multiple: bool,
        requeue: bool,
    },
}

/// How the channel treats publishes.
enum PublishMode {
    Plain,
    /// Publisher confirms: `next_tag` numbers publishes; `acked_to` is confirmed but not yet
    /// sent (sent as one `multiple` ack per read batch).
    Confirm {
        next_tag: u64,
        acked_to: u64,
        sent_to: u64,
    },
    /// `tx.select`: publishes and settlements wait for `tx.commit`.
    Transactional {
        publishes: Vec<Publication>,
        settlements: Vec<Settlement>,
    },
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
    route_scratch: Vec<Destination>,
    queue_scratch: Vec<Arc<Queue>>,
    settle_scratch: Vec<Unacked>,
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
            route_scratch: Vec::new(),
            queue_scratch: Vec::new(),
            settle_scratch: Vec::new(),
        }
    }

    fn id(&self) -> u16 {
        self.delivery.id
    }

    fn reply(&self, cx: &ConnContext<'_>, method: Method) {
        cx.outbound.send_method(self.id(), &method);
    }

    /// Handles a content header frame.
    pub(crate) fn on_header(
        &mut self,
        cx: &mut ConnContext<'_>,
        header: ContentHeader,
    ) -> BrokerResult<()> {
        let Some(pending) = self.pending.as_mut() else {
            return Err(unexpected_frame(
                "expected method frame, got non method frame instead".into(),
            ));
        };
        if pending.header.is_some() {
            return Err(unexpected_frame(
                "expected content body, got non content body frame instead".into(),
            ));
        }
        if header.class_id != dwellmq_codec::constants::BASIC_CLASS_ID {
            return Err(unexpected_frame(format!(
                "expected content header for class 60, got one for class {} instead",
                header.class_id
            )));
        }
        let max = cx.state.config.limits.max_message_size;
        if header.body_size > max {
            self.pending = None;
            return Err(BrokerError::PreconditionFailed(format!(
                "message size {} is larger than configured max size {}",
                header.body_size, max
            )));
        }
        let done = header.body_size == 0;
        pending.header = Some(header);
        if done {
            self.finish_publish(cx)?;
        }
        Ok(())
    }

    /// Handles a content body frame.
    pub(crate) fn on_body(&mut self, cx: &mut ConnContext<'_>, chunk: Bytes) -> BrokerResult<()> {
        let Some(pending) = self.pending.as_mut() else {
            return Err(unexpected_frame(
                "expected method frame, got non method frame instead".into(),
            ));
        };
        let Some(header) = &pending.header else {
            return Err(unexpected_frame(
                "expected content header for class 60, got non content header frame instead".into(),
            ));
        };
        let expected = header.body_size;
        pending.body.push(chunk);
        let received = pending.body.len() as u64;
        if received > expected {
            return Err(BrokerError::FrameError(
                "content body frame exceeds remaining content size".into(),
            ));
        }
        if received == expected {
            self.finish_publish(cx)?;
        }
        Ok(())
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
            Method::ChannelFlow(m) => {
                self.delivery.flow_active.store(m.active, Ordering::Relaxed);
                self.reply(
                    cx,
                    Method::ChannelFlowOk(ChannelFlowOk { active: m.active }),
                );
                if m.active {
                    self.drain_consumed_queues();
                }
                Ok(())
            }
            Method::ChannelFlowOk(_) => Ok(()),
            Method::ExchangeDeclare(m) => self.exchange_declare(cx, m),
            Method::ExchangeDelete(m) => {
                let removed = cx.vhost.delete_exchange(&m.exchange, m.if_unused)?;
                cx.forget_exchanges(&removed);
                if !m.no_wait {
                    self.reply(cx, Method::ExchangeDeleteOk);
                }
                Ok(())
            }
            Method::ExchangeBind(m) => {
                cx.vhost.bind(Binding {
                    source: m.source,
                    destination: Destination::Exchange(m.destination),
                    routing_key: m.routing_key,
                    arguments: m.arguments,
                })?;
                if !m.no_wait {
                    self.reply(cx, Method::ExchangeBindOk);
                }
                Ok(())
            }
            Method::ExchangeUnbind(m) => {
                let removed = cx.vhost.unbind(&Binding {
                    source: m.source,
                    destination: Destination::Exchange(m.destination),
                    routing_key: m.routing_key,
                    arguments: m.arguments,
                })?;
                cx.forget_exchanges(&removed);
                if !m.no_wait {
                    self.reply(cx, Method::ExchangeUnbindOk);
                }
                Ok(())
            }
            Method::QueueDeclare(m) => self.queue_declare(cx, m),
            Method::QueueBind(m) => {
                let queue = self.queue_for(cx, &m.queue)?;
                let routing_key = routing_key_shortcut(&m.queue, m.routing_key, &queue);
                cx.vhost.bind(Binding {
                    source: m.exchange,
                    destination: Destination::Queue(queue.name.clone()),
                    routing_key,
                    arguments: m.arguments,
                })?;
                if !m.no_wait {
                    self.reply(cx, Method::QueueBindOk);
                }
                Ok(())
            }
            Method::QueueUnbind(m) => {
                let queue = self.queue_for(cx, &m.queue)?;
                let routing_key = routing_key_shortcut(&m.queue, m.routing_key, &queue);
                let removed = cx.vhost.unbind(&Binding {
                    source: m.exchange,
                    destination: Destination::Queue(queue.name.clone()),
                    routing_key,
                    arguments: m.arguments,
                })?;
                cx.forget_exchanges(&removed);
                self.reply(cx, Method::QueueUnbindOk);
                Ok(())
            }
            Method::QueuePurge(m) => {
                let queue = self.queue_for(cx, &m.queue)?;
                let message_count = queue.purge() as u32;
                if !m.no_wait {
                    self.reply(cx, Method::QueuePurgeOk(QueuePurgeOk { message_count }));
                }
                Ok(())
            }
            Method::QueueDelete(m) => {
                let name = self.queue_name(&m.queue)?;
                let deleted = cx
                    .vhost
                    .delete_queue(&name, m.if_unused, m.if_empty, Some(cx.id))?;
                notify_cancelled(&deleted.consumers);
                cx.forget_exchanges(&deleted.removed_exchanges);
                cx.exclusive_queues.retain(|q| q.name != name);
                if !m.no_wait {
                    self.reply(
                        cx,
                        Method::QueueDeleteOk(QueueDeleteOk {
                            message_count: deleted.message_count as u32,
                        }),
                    );
                }
                Ok(())
            }
            Method::BasicQos(m) => self.basic_qos(cx, m),
            Method::BasicConsume(m) => self.basic_consume(cx, m),
            Method::BasicCancel(m) => {
                self.cancel_consumer(cx, &m.consumer_tag);
                if !m.no_wait {
                    self.reply(
                        cx,
                        Method::BasicCancelOk(BasicCancelOk {
                            consumer_tag: m.consumer_tag,
                        }),
                    );
                }
                Ok(())
            }
            Method::BasicPublish(m) => {
                if m.immediate {
                    return Err(BrokerError::NotImplemented("immediate=true".into()));
                }
                self.pending = Some(PendingPublish {
                    method: m,
                    header: None,
                    body: BodyParts::Empty,
                });
                Ok(())
            }
            Method::BasicGet(m) => {
                let queue = self.queue_for(cx, &m.queue)?;
                if !queue.get(&self.delivery, m.no_ack) {
                    self.reply(cx, Method::BasicGetEmpty);
                }
                Ok(())
            }
            Method::BasicAck(m) => self.settle_or_buffer(Settlement::Ack {
                tag: m.delivery_tag,
                multiple: m.multiple,
            }),
            Method::BasicReject(m) => self.settle_or_buffer(Settlement::Reject {
                tag: m.delivery_tag,
                multiple: false,
                requeue: m.requeue,
            }),
            Method::BasicNack(m) => self.settle_or_buffer(Settlement::Reject {
                tag: m.delivery_tag,
                multiple: m.multiple,
                requeue: m.requeue,
            }),
            Method::BasicRecover(m) => self.recover(cx, m.requeue, true),
            // The deprecated asynchronous form has no reply.
            Method::BasicRecoverAsync(m) => self.recover(cx, m.requeue, false),
            Method::ConfirmSelect(m) => {
                match self.mode {
                    PublishMode::Transactional { .. } => {
                        return Err(BrokerError::PreconditionFailed(
                            "cannot switch from tx to confirm mode".into(),
                        ))
                    }
                    PublishMode::Plain => {
                        self.mode = PublishMode::Confirm {
                            next_tag: 1,
                            acked_to: 0,
                            sent_to: 0,
                        }
                    }
                    PublishMode::Confirm { .. } => {}
                }
                if !m.no_wait {
                    self.reply(cx, Method::ConfirmSelectOk);
                }
                Ok(())
            }
            Method::TxSelect => {
                match self.mode {
                    PublishMode::Confirm { .. } => {
                        return Err(BrokerError::PreconditionFailed(
                            "cannot switch from confirm to tx mode".into(),
                        ))
                    }
                    PublishMode::Plain => {
                        self.mode = PublishMode::Transactional {
                            publishes: Vec::new(),
                            settlements: Vec::new(),
                        }
                    }
                    PublishMode::Transactional { .. } => {}
                }
                self.reply(cx, Method::TxSelectOk);
                Ok(())
            }
            Method::TxCommit => {
                let PublishMode::Transactional {
                    publishes,
                    settlements,
                } = &mut self.mode
                else {
                    return Err(BrokerError::PreconditionFailed(
                        "channel is not transactional".into(),
                    ));
                };
                let publishes = std::mem::take(publishes);
                let settlements = std::mem::take(settlements);
                for settlement in settlements {
                    self.settle(settlement)?;
                }
                for publication in publishes {
                    self.route_and_enqueue(cx, publication);
                }
                self.reply(cx, Method::TxCommitOk);
                Ok(())
            }
            Method::TxRollback => {
                let PublishMode::Transactional {
                    publishes,
                    settlements,
                } = &mut self.mode
                else {
                    return Err(BrokerError::PreconditionFailed(
                        "channel is not transactional".into(),
                    ));
                };
                publishes.clear();
                settlements.clear();
                self.reply(cx, Method::TxRollbackOk);
                Ok(())
            }
            other => Err(BrokerError::CommandInvalid(format!(
                "unexpected method {} on a channel",
                other.name()
            ))),
        }
    }

    fn queue_name(&self, name: &ShortStr) -> BrokerResult<ShortStr> {
        if !name.is_empty() {
            return Ok(name.clone());
        }
        self.last_queue
            .clone()
            .ok_or_else(|| BrokerError::NotFound("no previously declared queue".into()))
    }

    /// The queue a method names ("" = the last declared), checked for exclusivity.
    fn queue_for(&self, cx: &ConnContext<'_>, name: &ShortStr) -> BrokerResult<Arc<Queue>> {
        let queue = cx.vhost.queue(&self.queue_name(name)?)?;
        queue.check_exclusive(cx.id)?;
        Ok(queue)
    }

    fn exchange_declare(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ExchangeDeclare,
    ) -> BrokerResult<()> {
        let kind = if m.passive {
            ExchangeKind::Standard(dwellmq_core::routing::RoutingKind::Direct)
        } else {
            exchange_kind(&m.kind, &m.arguments)?
        };
        cx.vhost.declare_exchange(ExchangeSpec {
            name: m.exchange,
            kind,
            passive: m.passive,
            durable: m.durable,
            auto_delete: m.auto_delete,
            internal: m.internal,
            arguments: m.arguments,
        })?;
        if !m.no_wait {
            self.reply(cx, Method::ExchangeDeclareOk);
        }
        Ok(())
    }

    fn queue_declare(&mut self, cx: &mut ConnContext<'_>, m: QueueDeclare) -> BrokerResult<()> {
        let exclusive = m.exclusive;
        let queue = cx.vhost.declare_queue(
            QueueSpec {
                name: m.queue,
                passive: m.passive,
                durable: m.durable,
                exclusive,
                auto_delete: m.auto_delete,
                arguments: m.arguments,
            },
            cx.id,
        )?;
        if exclusive && !cx.exclusive_queues.iter().any(|q| Arc::ptr_eq(q, &queue)) {
            cx.exclusive_queues.push(Arc::clone(&queue));
        }
        self.last_queue = Some(queue.name.clone());
        if !m.no_wait {
            self.reply(
                cx,
                Method::QueueDeclareOk(QueueDeclareOk {
                    queue: queue.name.clone(),
                    message_count: queue.message_count() as u32,
                    consumer_count: queue.consumer_count() as u32,
                }),
            );
        }
        Ok(())
    }

    fn basic_qos(&mut self, cx: &mut ConnContext<'_>, m: BasicQos) -> BrokerResult<()> {
        if m.prefetch_size != 0 {
            return Err(BrokerError::NotImplemented(format!(
                "prefetch_size!=0 ({})",
                m.prefetch_size
            )));
        }
        if m.global {
            self.delivery
                .global_prefetch
                .store(u32::from(m.prefetch_count), Ordering::Relaxed);
        } else {
            self.consumer_prefetch = u32::from(m.prefetch_count);
        }
        self.reply(cx, Method::BasicQosOk);
        self.drain_consumed_queues();
        Ok(())
    }

    fn basic_consume(&mut self, cx: &mut ConnContext<'_>, m: BasicConsume) -> BrokerResult<()> {
        // A consumer the server cancelled (its queue was deleted) no longer holds its tag.
        self.consumers.retain(|_, (_, queue)| !queue.is_deleted());
        let tag = if m.consumer_tag.is_empty() {
            ShortStr::from(server_generated_name("amq.ctag-"))
        } else {
            m.consumer_tag
        };
        if self.consumers.contains_key(&tag) {
            return Err(BrokerError::NotAllowed(format!(
                "attempt to reuse consumer tag '{tag}'"
            )));
        }
        let queue = self.queue_for(cx, &m.queue)?;
        let priority =
            arguments::parse_consumer_priority(&queue.name, &cx.vhost.name, &m.arguments)?;
        let consumer = Arc::new(Consumer {
            tag: tag.clone(),
            channel: Arc::clone(&self.delivery),
            no_ack: m.no_ack,
            exclusive: m.exclusive,
            priority,
            prefetch: self.consumer_prefetch,
            unacked: Default::default(),
            cancel_notify: cx.consumer_cancel_notify,
        });
        let consume_ok = (!m.no_wait).then(|| {
            Method::BasicConsumeOk(BasicConsumeOk {
                consumer_tag: tag.clone(),
            })
        });
        let outbound = Arc::clone(cx.outbound);
        let channel_id = self.id();
        // consume-ok must reach the client before the first delivery, so it is queued from
        // inside the queue's lock, after the checks and before delivery starts.
        queue.add_consumer(Arc::clone(&consumer), || {
            if let Some(ok) = &consume_ok {
                outbound.send_method(channel_id, ok);
            }
        })?;
        self.consumers.insert(tag, (consumer, queue));
        Ok(())
    }

    /// Removes a consumer (client cancel or channel close); deletes an auto-delete queue that
    /// lost its last consumer.
    fn cancel_consumer(&mut self, cx: &mut ConnContext<'_>, tag: &ShortStr) {
        let Some((_, queue)) = self.consumers.remove(tag) else {
            return;
        };
        let removed = queue.remove_consumer(&self.delivery, tag);
        if removed.should_auto_delete {
            cx.exclusive_queues.retain(|q| !Arc::ptr_eq(q, &queue));
            if let Ok(deleted) = cx.vhost.delete_queue_instance(&queue) {
                notify_cancelled(&deleted.consumers);
                cx.forget_exchanges(&deleted.removed_exchanges);
            }
        }
    }

    fn drain_consumed_queues(&self) {
        for (_, queue) in self.consumers.values() {
            queue.drain();
        }
    }

    /// Delivers again to every queue this channel consumes from (the socket drained).
    pub(crate) fn on_writable(&self) {
        self.drain_consumed_queues();
    }

    fn settle_or_buffer(&mut self, settlement: Settlement) -> BrokerResult<()> {
        if let PublishMode::Transactional { settlements, .. } = &mut self.mode {
            settlements.push(settlement);
            return Ok(());
        }
        self.settle(settlement)
    }

    fn settle(&mut self, settlement: Settlement) -> BrokerResult<()> {
        let (tag, multiple, requeue) = match settlement {
            Settlement::Ack { tag, multiple } => (tag, multiple, None),
            Settlement::Reject {
                tag,
                multiple,
                requeue,
            } => (tag, multiple, Some(requeue)),
        };
        let mut settled = std::mem::take(&mut self.settle_scratch);
        if self.delivery.settle(tag, multiple, &mut settled).is_none() {
            self.settle_scratch = settled;
            return Err(BrokerError::PreconditionFailed(format!(
                "unknown delivery tag {tag}"
            )));
        }
        let requeue = requeue == Some(true);
        self.return_to_queues(&mut settled, requeue);
        self.settle_scratch = settled;
        if self.delivery.global_prefetch.load(Ordering::Relaxed) != 0 {
            self.drain_consumed_queues();
        }
        Ok(())
    }

    /// Hands settled messages back to their queues, grouped by queue: requeued, or done.
    fn return_to_queues(&self, settled: &mut Vec<Unacked>, requeue: bool) {
        for unacked in settled.iter() {
            if let Some(consumer) = &unacked.consumer {
                consumer.unacked.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let mut rest = &settled[..];
        while let Some(first) = rest.first() {
            let run = rest
                .iter()
                .take_while(|u| Arc::ptr_eq(&u.queue, &first.queue))
                .count();
            let queue = Arc::clone(&first.queue);
            if requeue {
                queue.requeue(rest[..run].iter().map(|u| u.entry.clone()));
            } else {
                queue.settled(run);
            }
            rest = &rest[run..];
        }
        settled.clear();
    }

    /// `basic.recover`: every unacked message goes back to its queue, marked redelivered.
    fn recover(&mut self, cx: &ConnContext<'_>, requeue: bool, reply: bool) -> BrokerResult<()> {
        if !requeue {
            return Err(BrokerError::NotImplemented("requeue=false".into()));
        }
        // recover-ok goes first: the requeued messages may be redelivered to this very channel
        // at once, and clients drop deliveries that precede recover-ok.
        if reply {
            self.reply(cx, Method::BasicRecoverOk);
        }
        self.requeue_all_unacked();
        Ok(())
    }

    fn requeue_all_unacked(&mut self) {
        let mut all = std::mem::take(&mut self.settle_scratch);
        self.delivery.take_all(&mut all);
        self.return_to_queues(&mut all, true);
        self.settle_scratch = all;
    }

    /// The publish's content is complete: validate, then route (or buffer for a transaction).
    fn finish_publish(&mut self, cx: &mut ConnContext<'_>) -> BrokerResult<()> {
        let Some(pending) = self.pending.take() else {
            return Ok(());
        };
        let header = pending.header.unwrap_or_default();
        let exchange = cx.vhost.exchange(&pending.method.exchange)?;
        if exchange.internal {
            return Err(BrokerError::AccessRefused(format!(
                "cannot publish to internal exchange '{}' in vhost '{}'",
                exchange.name, cx.vhost.name
            )));
        }
        let mut properties = header.properties;
        if let Some(user_id) = &properties.user_id {
            if user_id.as_str() != cx.user {
                return Err(BrokerError::PreconditionFailed(format!(
                    "user_id property set to '{user_id}' but authenticated user was '{}'",
                    cx.user
                )));
            }
        }
        if let Some(expiration) = &properties.expiration {
            arguments::parse_expiration(expiration)?;
        }
        let mut delay_ms = 0;
        if let ExchangeKind::Delayed(_) = exchange.kind {
            let delay = arguments::parse_x_delay(properties.headers.as_ref())?;
            if delay > 0 {
                delay_ms = delay as u64;
                // Delivered with the negated delay, as the plugin does, so that a second
                // delayed exchange on the way does not delay the message again.
                if let Some(headers) = properties.headers.as_mut() {
                    headers.insert("x-delay", FieldValue::I64(-delay));
                }
            }
        }
        let body = pending.body.into_bytes();
        let charge = cx.state.memory.charge(body.len());
        let message = Message::new(
            pending.method.exchange.clone(),
            pending.method.routing_key.clone(),
            properties,
            body,
            Some(Box::new(charge)),
        );
        let publication = Publication {
            exchange: pending.method.exchange,
            routing_key: pending.method.routing_key,
            mandatory: pending.method.mandatory,
            message,
            delay_ms,
        };
        if let PublishMode::Transactional { publishes, .. } = &mut self.mode {
            publishes.push(publication);
            return Ok(());
        }
        self.route_and_enqueue(cx, publication);
        Ok(())
    }

    fn route_and_enqueue(&mut self, cx: &mut ConnContext<'_>, publication: Publication) {
        let confirm_tag = match &mut self.mode {
            PublishMode::Confirm { next_tag, .. } => {
                let tag = *next_tag;
                *next_tag += 1;
                Some(tag)
            }
            _ => None,
        };
        // The exchange was checked when the content completed; a concurrent delete makes the
        // message unroutable, as in RabbitMQ.
        let exchange = cx.vhost.exchange(&publication.exchange).ok();
        if let Some(exchange) = &exchange {
            let headers = publication.message.properties.headers.as_ref();
            cx.vhost.route(
                exchange,
                &publication.routing_key,
                headers,
                &mut self.route_scratch,
                &mut self.queue_scratch,
            );
        }
        if self.queue_scratch.is_empty() && publication.mandatory {
            self.return_unroutable(cx, &publication);
        } else if let (Some(exchange), true) = (&exchange, publication.delay_ms > 0) {
            // Routability was checked now (so `mandatory` is honest); the queues are chosen
            // again at release, from the bindings as they are then.
            self.queue_scratch.clear();
            let due_ms = cx.state.clock.now_ms().saturating_add(publication.delay_ms);
            cx.state
                .hold_delayed(cx.vhost, exchange, Arc::clone(&publication.message), due_ms);
        }
        for queue in self.queue_scratch.drain(..) {
            queue.publish(Arc::clone(&publication.message));
        }
        if let (Some(tag), PublishMode::Confirm { acked_to, .. }) = (confirm_tag, &mut self.mode) {
            *acked_to = tag;
        }
    }

    /// `basic.return` with `NO_ROUTE` for a mandatory message no queue would take.
    fn return_unroutable(&self, cx: &ConnContext<'_>, publication: &Publication) {
        self.reply(
            cx,
            Method::BasicReturn(BasicReturn {
                reply_code: reply_code::NO_ROUTE,
                reply_text: ShortStr::from_static("NO_ROUTE"),
                exchange: publication.exchange.clone(),
                routing_key: publication.routing_key.clone(),
            }),
        );
        cx.outbound
            .with(|sink| sink.content(self.id(), &publication.message, self.delivery.frame_max));
    }

    /// Sends the confirms gathered since the last call as one `basic.ack` with `multiple`.
    pub(crate) fn flush_confirms(&mut self, outbound: &Outbound) {
        if let PublishMode::Confirm {
            acked_to, sent_to, ..
        } = &mut self.mode
        {
            if *acked_to > *sent_to {
                let multiple = *acked_to - *sent_to > 1;
                outbound.send_method(
                    self.delivery.id,
                    &Method::BasicAck(BasicAck {
                        delivery_tag: *acked_to,
                        multiple,
                    }),
                );
                *sent_to = *acked_to;
            }
        }
    }

    /// Tears the channel down: consumers go, unacked messages return to their queues.
    pub(crate) fn close(&mut self, cx: &mut ConnContext<'_>) {
        self.pending = None;
        let mut unacked = std::mem::take(&mut self.settle_scratch);
        self.delivery.close(&mut unacked);
        self.return_to_queues(&mut unacked, true);
        self.settle_scratch = unacked;
        let tags: Vec<ShortStr> = self.consumers.keys().cloned().collect();
        for tag in tags {
            self.cancel_consumer(cx, &tag);
        }
    }
}

/// RabbitMQ's shortcut: binding the "last declared" queue (name "") with key "" binds with
/// the queue's name as the key.
fn routing_key_shortcut(named: &ShortStr, routing_key: ShortStr, queue: &Queue) -> ShortStr {
    if named.is_empty() && routing_key.is_empty() {
        queue.name.clone()
    } else {
        routing_key
    }
}

/// Parses an `exchange.declare` type (and, for delayed exchanges, `x-delayed-type`).
fn exchange_kind(kind: &str, args: &FieldTable) -> BrokerResult<ExchangeKind> {
    if kind == "x-delayed-message" {
        return Ok(ExchangeKind::Delayed(arguments::parse_delayed_type(args)?));
    }
    dwellmq_core::routing::RoutingKind::from_name(kind)
        .map(ExchangeKind::Standard)
        .ok_or_else(|| BrokerError::CommandInvalid(format!("unknown exchange type '{kind}'")))
}

/// Tells consumers of a deleted queue that they are gone (`basic.cancel` from the server).
pub(crate) fn notify_cancelled(consumers: &[Arc<Consumer>]) {
    for consumer in consumers {
        if consumer.cancel_notify {
            consumer.channel.outbound.send_method(
                consumer.channel.id,
                &Method::BasicCancel(BasicCancel {
                    consumer_tag: consumer.tag.clone(),
                    no_wait: true,
                }),
            );
        }
    }
}
