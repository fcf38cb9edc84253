//! Consumers, prefetch, flow and `basic.get`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use dwellmq_codec::methods::*;
use dwellmq_codec::{Method, ShortStr};
use dwellmq_core::{arguments, BrokerError, BrokerResult};

use super::{Channel, ConnContext};
use crate::broker::access::{Operation, ResourceKind};
use dwellmq_core::queue::ConsumerCredit;

use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::consumer::{next_consumer_id, Consumer, DeliverySink};
use crate::broker::reply_to::REPLY_QUEUE;
use crate::broker::vhost::VHost;

impl Channel {
    /// `channel.flow`. As RabbitMQ: a client may not pause the broker's deliveries (that is
    /// what prefetch is for), so `active=false` closes the connection with 540; `active=true`
    /// is acknowledged and changes nothing.
    pub(super) fn channel_flow(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ChannelFlow,
    ) -> BrokerResult<()> {
        if !m.active {
            return Err(BrokerError::NotImplemented("active=false".into()));
        }
        self.reply(cx, Method::ChannelFlowOk(ChannelFlowOk { active: true }));
        Ok(())
    }

    pub(super) fn basic_qos(&mut self, cx: &mut ConnContext<'_>, m: BasicQos) -> BrokerResult<()> {
        if m.prefetch_size != 0 {
            return Err(BrokerError::NotImplemented(format!(
                "prefetch_size!=0 ({})",
                m.prefetch_size
            )));
        }
        if m.global {
            self.delivery
                .credit
                .global_prefetch
                .store(u32::from(m.prefetch_count), Ordering::Relaxed);
        } else {
            self.consumer_prefetch = u32::from(m.prefetch_count);
        }
        self.reply(cx, Method::BasicQosOk);
        self.drain_consumed_queues(cx.vhost);
        Ok(())
    }

    pub(super) fn basic_consume(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: BasicConsume,
    ) -> BrokerResult<()> {
        // A consumer the server cancelled (its queue was deleted) no longer holds its tag.
        self.consumers.retain(|_, (_, queue)| !queue.is_deleted());
        let tag = if m.consumer_tag.is_empty() {
            ShortStr::from(cx.state.runtime.names.generate("amq.ctag-")?)
        } else {
            m.consumer_tag
        };
        let reply_tag_taken = self
            .reply_consumer
            .as_ref()
            .is_some_and(|(reply_tag, _)| *reply_tag == tag);
        if self.consumers.contains_key(&tag) || reply_tag_taken {
            return Err(BrokerError::NotAllowed(format!(
                "attempt to reuse consumer tag '{tag}'"
            )));
        }
        if m.queue == REPLY_QUEUE {
            return self.consume_replies(cx, tag, m.no_ack, m.no_wait);
        }
        let name = self.queue_name(&m.queue)?;
        self.permit(cx, Operation::Read, ResourceKind::Queue, &name)?;
        let queue = self.queue_for(cx, &name)?;
        let priority =
            arguments::parse_consumer_priority(&queue.name, &cx.vhost.name, &m.arguments)?;
        let sink: Arc<dyn DeliverySink> = Arc::clone(&self.delivery) as _;
        let consumer = Arc::new(Consumer {
            id: next_consumer_id(),
            tag: tag.clone(),
            connection: cx.id,
            channel: self.delivery.id,
            exclusive: m.exclusive,
            priority,
            credit: Arc::new(ConsumerCredit::new(
                Arc::clone(&self.delivery.credit),
                self.consumer_prefetch,
                m.no_ack,
            )),
            sink,
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
        queue.add_consumer(
            &**cx.vhost,
            Arc::clone(&consumer),
            priority,
            m.exclusive,
            || {
                if let Some(ok) = &consume_ok {
                    outbound.send_method(channel_id, ok);
                }
            },
        )?;
        self.consumers.insert(tag, (consumer, queue));
        Ok(())
    }

    /// `basic.consume` on `amq.rabbitmq.reply-to`: makes this channel's requests answerable.
    fn consume_replies(
        &mut self,
        cx: &mut ConnContext<'_>,
        tag: ShortStr,
        no_ack: bool,
        no_wait: bool,
    ) -> BrokerResult<()> {
        if !no_ack {
            return Err(BrokerError::PreconditionFailed(
                "reply consumer cannot acknowledge".into(),
            ));
        }
        if self.reply_consumer.is_some() {
            return Err(BrokerError::PreconditionFailed(
                "reply consumer already set".into(),
            ));
        }
        let address = cx
            .state
            .reply_consumers
            .register(Arc::clone(&self.delivery) as _, tag.clone())?;
        self.reply_consumer = Some((tag.clone(), address));
        if !no_wait {
            self.reply(
                cx,
                Method::BasicConsumeOk(BasicConsumeOk { consumer_tag: tag }),
            );
        }
        Ok(())
    }

    /// The reply address requests from this channel carry (`reply_to` rewritten by
    /// `broker::publish::accept`), if the channel has a reply consumer.
    pub(super) fn reply_address(&self) -> Option<&ShortStr> {
        self.reply_consumer.as_ref().map(|(_, address)| address)
    }

    /// `basic.cancel` from the client.
    pub(super) fn basic_cancel(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: BasicCancel,
    ) -> BrokerResult<()> {
        match &self.reply_consumer {
            Some((tag, address)) if *tag == m.consumer_tag => {
                cx.state.reply_consumers.unregister(address);
                self.reply_consumer = None;
            }
            _ => self.cancel_consumer(cx, &m.consumer_tag),
        }
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

    /// Removes a consumer (client cancel or channel close); deletes an auto-delete queue that
    /// lost its last consumer.
    pub(super) fn cancel_consumer(&mut self, cx: &mut ConnContext<'_>, tag: &ShortStr) {
        let Some((consumer, queue)) = self.consumers.remove(tag) else {
            return;
        };
        let removed = queue.remove_consumer(&**cx.vhost, consumer.id);
        if removed.should_auto_delete {
            cx.exclusive_queues.retain(|q| !Arc::ptr_eq(q, &queue));
            // Nobody waits for this deletion's write (cancel-ok does not, as in RabbitMQ).
            let _ = cx
                .vhost
                .delete_queue_instance_reporting(&queue, DefinitionWrites::UNAWAITED);
        }
    }

    /// `basic.get`.
    pub(super) fn basic_get(&mut self, cx: &mut ConnContext<'_>, m: BasicGet) -> BrokerResult<()> {
        let name = self.queue_name(&m.queue)?;
        self.permit(cx, Operation::Read, ResourceKind::Queue, &name)?;
        let queue = self.queue_for(cx, &name)?;
        match queue.get(&**cx.vhost, m.no_ack) {
            Some((entry, remaining)) => {
                let remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
                self.delivery
                    .deliver_get(&queue, entry, m.no_ack, remaining);
            }
            None => self.reply(cx, Method::BasicGetEmpty),
        }
        Ok(())
    }

    /// Delivers what the queues this channel consumes from (in `vhost`) can deliver now.
    pub(super) fn drain_consumed_queues(&self, vhost: &VHost) {
        for (_, queue) in self.consumers.values() {
            queue.drain(vhost);
        }
    }

    /// Delivers again to every queue this channel consumes from (the socket drained).
    pub(crate) fn on_writable(&self, vhost: &VHost) {
        self.drain_consumed_queues(vhost);
    }
}
