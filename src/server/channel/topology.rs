//! Declaring, binding and deleting exchanges and queues.

use std::sync::Arc;

use dwellmq_codec::methods::*;
use dwellmq_codec::{Method, ShortStr};
use dwellmq_core::routing::{Binding, Destination, RoutingKind};
use dwellmq_core::{BrokerError, BrokerResult};

use super::{Channel, ConnContext};
use crate::broker::consumer::notify_cancelled;
use crate::broker::exchange::DeclaredType;
use crate::broker::queue::Queue;
use crate::broker::reply_to::is_reply_name;
use crate::broker::vhost::{ExchangeSpec, QueueSpec};

impl Channel {
    pub(super) fn queue_name(&self, name: &ShortStr) -> BrokerResult<ShortStr> {
        if !name.is_empty() {
            return Ok(name.clone());
        }
        self.last_queue
            .clone()
            .ok_or_else(|| BrokerError::NotFound("no previously declared queue".into()))
    }

    /// The queue a method names ("" = the last declared), checked for exclusivity.
    pub(super) fn queue_for(
        &self,
        cx: &ConnContext<'_>,
        name: &ShortStr,
    ) -> BrokerResult<Arc<Queue>> {
        let queue = cx.vhost.queue(&self.queue_name(name)?)?;
        queue.check_exclusive(cx.id)?;
        Ok(queue)
    }

    pub(super) fn exchange_declare(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ExchangeDeclare,
    ) -> BrokerResult<()> {
        let kind = if m.passive {
            DeclaredType::Standard(RoutingKind::Direct)
        } else {
            DeclaredType::parse(&m.kind)?
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

    /// `exchange.delete`.
    pub(super) fn exchange_delete(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ExchangeDelete,
    ) -> BrokerResult<()> {
        let removed = cx.vhost.delete_exchange(&m.exchange, m.if_unused)?;
        cx.forget_exchanges(&removed);
        if !m.no_wait {
            self.reply(cx, Method::ExchangeDeleteOk);
        }
        Ok(())
    }

    /// `exchange.bind`.
    pub(super) fn exchange_bind(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ExchangeBind,
    ) -> BrokerResult<()> {
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

    /// `exchange.unbind`.
    pub(super) fn exchange_unbind(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ExchangeUnbind,
    ) -> BrokerResult<()> {
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

    pub(super) fn queue_declare(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueueDeclare,
    ) -> BrokerResult<()> {
        if is_reply_name(&m.queue) {
            // RabbitMQ answers any declare of a reply name as a passive one.
            if !cx.state.reply_consumers.exists(&m.queue) {
                return Err(BrokerError::NotFound(format!(
                    "no queue '{}' in vhost '{}'",
                    m.queue, cx.vhost.name
                )));
            }
            if !m.no_wait {
                self.reply(
                    cx,
                    Method::QueueDeclareOk(QueueDeclareOk {
                        queue: m.queue,
                        message_count: 0,
                        consumer_count: 1,
                    }),
                );
            }
            return Ok(());
        }
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

    /// `queue.bind`.
    pub(super) fn queue_bind(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueueBind,
    ) -> BrokerResult<()> {
        let queue = self.queue_for(cx, &m.queue)?;
        let routing_key = routing_key_shortcut(&m.queue, m.routing_key, &queue.name);
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

    /// `queue.unbind`.
    pub(super) fn queue_unbind(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueueUnbind,
    ) -> BrokerResult<()> {
        // A missing queue is not an error (RabbitMQ answers unbind-ok); another connection's
        // exclusive queue is.
        let name = self.queue_name(&m.queue)?;
        if let Ok(queue) = cx.vhost.queue(&name) {
            queue.check_exclusive(cx.id)?;
        }
        let routing_key = routing_key_shortcut(&m.queue, m.routing_key, &name);
        let removed = cx.vhost.unbind(&Binding {
            source: m.exchange,
            destination: Destination::Queue(name),
            routing_key,
            arguments: m.arguments,
        })?;
        cx.forget_exchanges(&removed);
        self.reply(cx, Method::QueueUnbindOk);
        Ok(())
    }

    /// `queue.purge`.
    pub(super) fn queue_purge(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueuePurge,
    ) -> BrokerResult<()> {
        let queue = self.queue_for(cx, &m.queue)?;
        let message_count = queue.purge() as u32;
        if !m.no_wait {
            self.reply(cx, Method::QueuePurgeOk(QueuePurgeOk { message_count }));
        }
        Ok(())
    }

    /// `queue.delete`.
    pub(super) fn queue_delete(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueueDelete,
    ) -> BrokerResult<()> {
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
}

/// RabbitMQ's shortcut: binding the "last declared" queue (name "") with key "" binds with
/// the queue's name as the key.
fn routing_key_shortcut(named: &ShortStr, routing_key: ShortStr, queue: &ShortStr) -> ShortStr {
    if named.is_empty() && routing_key.is_empty() {
        queue.clone()
    } else {
        routing_key
    }
}
