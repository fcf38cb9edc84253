//! Declaring, binding and deleting exchanges and queues.

use std::sync::Arc;

use dwellmq_codec::methods::*;
use dwellmq_codec::{Method, ShortStr};
use dwellmq_core::routing::{Binding, Destination, RoutingKind};
use dwellmq_core::{BrokerError, BrokerResult};

use super::{Channel, ConnContext};
use crate::broker::access::{Operation, ResourceKind};
use crate::broker::exchange::DeclaredType;
use crate::broker::persist::DefinitionWrites;
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
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<()> {
        let kind = if m.passive {
            DeclaredType::Standard(RoutingKind::Direct)
        } else {
            DeclaredType::parse(&m.kind)?
        };
        // As rabbit_channel: configure on the exchange (the default exchange is refused by
        // the declare itself, with its own text); when it is new and names an alternate
        // exchange, read on it and write on the alternate. A passive declare needs nothing.
        if !m.passive && !m.exchange.is_empty() {
            self.permit(
                cx,
                Operation::Configure,
                ResourceKind::Exchange,
                &m.exchange,
            )?;
            let alternate = m
                .arguments
                .get("alternate-exchange")
                .and_then(|v| v.as_str());
            if let Some(alternate) = alternate {
                if cx.vhost.exchange(&m.exchange).is_err() {
                    let alternate = ShortStr::from(alternate);
                    self.permit(cx, Operation::Read, ResourceKind::Exchange, &m.exchange)?;
                    self.permit(cx, Operation::Write, ResourceKind::Exchange, &alternate)?;
                }
            }
        }
        let spec = ExchangeSpec {
            name: m.exchange,
            kind,
            passive: m.passive,
            durable: m.durable,
            auto_delete: m.auto_delete,
            internal: m.internal,
            arguments: m.arguments,
        };
        cx.vhost.declare_exchange_reporting(spec, writes)?;
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
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<()> {
        if !m.exchange.is_empty() && !m.exchange.starts_with("amq.") {
            self.permit(
                cx,
                Operation::Configure,
                ResourceKind::Exchange,
                &m.exchange,
            )?;
        }
        cx.vhost
            .delete_exchange_reporting(&m.exchange, m.if_unused, writes)?;
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
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<()> {
        self.permit_binding(cx, ResourceKind::Exchange, &m.destination, &m.source)?;
        let binding = Binding {
            source: m.source,
            destination: Destination::Exchange(m.destination),
            routing_key: m.routing_key,
            arguments: m.arguments,
        };
        cx.vhost.bind_reporting(binding, writes)?;
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
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<()> {
        self.permit_binding(cx, ResourceKind::Exchange, &m.destination, &m.source)?;
        let binding = Binding {
            source: m.source,
            destination: Destination::Exchange(m.destination),
            routing_key: m.routing_key,
            arguments: m.arguments,
        };
        cx.vhost.unbind_reporting(&binding, writes)?;
        if !m.no_wait {
            self.reply(cx, Method::ExchangeUnbindOk);
        }
        Ok(())
    }

    pub(super) fn queue_declare(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueueDeclare,
        writes: DefinitionWrites<'_>,
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
        let spec = QueueSpec {
            name: m.queue,
            passive: m.passive,
            durable: m.durable,
            exclusive,
            auto_delete: m.auto_delete,
            arguments: m.arguments,
        };
        let queue = if spec.passive {
            // A passive declare needs no permission, as in RabbitMQ.
            cx.vhost.declare_queue_reporting(spec, cx.id, writes)?
        } else {
            self.declare_permitted_queue(cx, spec, writes)?
        };
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
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<()> {
        let name = self.queue_name(&m.queue)?;
        self.permit_binding(cx, ResourceKind::Queue, &name, &m.exchange)?;
        let queue = self.queue_for(cx, &name)?;
        let routing_key = routing_key_shortcut(&m.queue, m.routing_key, &queue.name);
        let binding = Binding {
            source: m.exchange,
            destination: Destination::Queue(queue.name.clone()),
            routing_key,
            arguments: m.arguments,
        };
        cx.vhost.bind_reporting(binding, writes)?;
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
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<()> {
        // A missing queue is not an error (RabbitMQ answers unbind-ok); another connection's
        // exclusive queue is.
        let name = self.queue_name(&m.queue)?;
        self.permit_binding(cx, ResourceKind::Queue, &name, &m.exchange)?;
        if let Ok(queue) = cx.vhost.queue(&name) {
            queue.check_exclusive(cx.id)?;
        }
        let routing_key = routing_key_shortcut(&m.queue, m.routing_key, &name);
        let binding = Binding {
            source: m.exchange,
            destination: Destination::Queue(name),
            routing_key,
            arguments: m.arguments,
        };
        cx.vhost.unbind_reporting(&binding, writes)?;
        self.reply(cx, Method::QueueUnbindOk);
        Ok(())
    }

    /// `queue.purge`.
    pub(super) fn queue_purge(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueuePurge,
    ) -> BrokerResult<()> {
        let name = self.queue_name(&m.queue)?;
        self.permit(cx, Operation::Read, ResourceKind::Queue, &name)?;
        let queue = self.queue_for(cx, &name)?;
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
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<()> {
        let name = self.queue_name(&m.queue)?;
        self.permit(cx, Operation::Configure, ResourceKind::Queue, &name)?;
        let deleted =
            cx.vhost
                .delete_queue_reporting(&name, m.if_unused, m.if_empty, Some(cx.id), writes)?;
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

impl Channel {
    /// A non-passive `queue.declare`, checked as rabbit_channel checks it: configure on the
    /// queue's name (a server-named queue's name is drawn first, and checked too); when the
    /// queue is new and names a dead-letter exchange, read on the queue and write on that
    /// exchange.
    fn declare_permitted_queue(
        &mut self,
        cx: &ConnContext<'_>,
        mut spec: QueueSpec,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<Arc<Queue>> {
        let generated = spec.name.is_empty();
        if generated {
            spec.name = cx.vhost.generate_queue_name()?;
        } else if spec.name.starts_with("amq.") {
            // The reserved-name refusal comes first, as in RabbitMQ.
            return cx.vhost.declare_queue_reporting(spec, cx.id, writes);
        }
        self.permit(cx, Operation::Configure, ResourceKind::Queue, &spec.name)?;
        let dead_letter_exchange = spec
            .arguments
            .get("x-dead-letter-exchange")
            .and_then(|v| v.as_str());
        if let Some(exchange) = dead_letter_exchange {
            if cx.vhost.queue(&spec.name).is_err() {
                let exchange = ShortStr::from(exchange);
                self.permit(cx, Operation::Read, ResourceKind::Queue, &spec.name)?;
                self.permit(cx, Operation::Write, ResourceKind::Exchange, &exchange)?;
            }
        }
        if generated {
            cx.vhost
                .declare_generated_queue_reporting(spec, cx.id, writes)
        } else {
            cx.vhost.declare_queue_reporting(spec, cx.id, writes)
        }
    }

    /// A binding or unbinding, as rabbit_channel's `binding_action`: write on the destination
    /// (queue or exchange), read on the source exchange.
    fn permit_binding(
        &mut self,
        cx: &ConnContext<'_>,
        destination_kind: ResourceKind,
        destination: &ShortStr,
        source: &ShortStr,
    ) -> BrokerResult<()> {
        self.permit(cx, Operation::Write, destination_kind, destination)?;
        self.permit(cx, Operation::Read, ResourceKind::Exchange, source)
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
