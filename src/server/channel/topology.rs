//! Declaring, binding and deleting exchanges and queues.
//!
//! Every topology method takes the same shape, written once in [`Channel::on_topology`]: the
//! method checks its permissions (RabbitMQ's rules, its own), asks the vhost for the change,
//! its durable definitions' writes reported to the `DefinitionWrites` it is given, and returns
//! its `-ok` (none under `no-wait`); with a store, that reply waits for their commit, as
//! RabbitMQ's waits for its metadata store.

use std::sync::Arc;

use dwellmq_codec::methods::*;
use dwellmq_codec::{Method, ShortStr};
use dwellmq_core::routing::{Binding, Destination, RoutingKind};
use dwellmq_core::{BrokerError, BrokerResult};

use super::{Channel, ConnContext};
use crate::broker::access::{Operation, ResourceKind};
use crate::broker::exchange::{DeclaredBy, DeclaredType};
use crate::broker::persist::{DefinitionWrites, PublishTicket};
use crate::broker::queue::Queue;
use crate::broker::reply_to::is_reply_name;
use crate::broker::vhost::{ExchangeSpec, QueueSpec};

/// What a topology method answers: its `-ok`, or nothing when the client asked for no reply.
type Answer = BrokerResult<Option<Method>>;

/// The `-ok`, unless the method has `no-wait` set.
fn unless_no_wait(no_wait: bool, ok: Method) -> Option<Method> {
    (!no_wait).then_some(ok)
}

impl Channel {
    /// Handles a topology method (declare, bind, unbind, delete of an exchange or a queue)
    /// and sends its answer: at once, or once the definitions it wrote are committed.
    pub(super) fn on_topology(
        &mut self,
        cx: &mut ConnContext<'_>,
        method: Method,
    ) -> BrokerResult<()> {
        let ids = (method.class_id(), method.method_id());
        self.answer_after_writes(cx, ids, |ch, cx, writes| match method {
            Method::ExchangeDeclare(m) => ch.exchange_declare(cx, m, writes),
            Method::ExchangeDelete(m) => ch.exchange_delete(cx, m, writes),
            Method::ExchangeBind(m) => ch.exchange_bind(cx, m, writes),
            Method::ExchangeUnbind(m) => ch.exchange_unbind(cx, m, writes),
            Method::QueueDeclare(m) => ch.queue_declare(cx, m, writes),
            Method::QueueBind(m) => ch.queue_bind(cx, m, writes),
            Method::QueueUnbind(m) => ch.queue_unbind(cx, m, writes),
            Method::QueueDelete(m) => ch.queue_delete(cx, m, writes),
            // `on_method` sends only the methods above here.
            other => Err(BrokerError::CommandInvalid(format!(
                "unexpected method {} on a channel",
                other.name()
            ))),
        })
    }

    /// Runs `handle` with what its definition writes report to, then sends its answer: with
    /// a store and a write made, the answer waits for the commit (a failed one closes the
    /// channel instead, 506, naming the method `ids`); otherwise it goes out at once.
    fn answer_after_writes(
        &mut self,
        cx: &mut ConnContext<'_>,
        ids: (u16, u16),
        handle: impl FnOnce(&mut Self, &mut ConnContext<'_>, DefinitionWrites<'_>) -> Answer,
    ) -> BrokerResult<()> {
        if cx.state.store().is_none() {
            if let Some(ok) = handle(self, cx, DefinitionWrites::UNAWAITED)? {
                self.reply(cx, ok);
            }
            return Ok(());
        }
        let token = cx.commit_wait.token();
        let wait = Arc::clone(cx.commit_wait);
        let ticket = PublishTicket::new(move |committed, _| wait.finish(token, committed));
        let answer = handle(self, cx, DefinitionWrites::reported_to(&ticket));
        let result = answer.map(|answer| match answer {
            Some(ok) if ticket.is_used() => cx.commit_wait.start(
                token,
                self.id(),
                ok,
                ids,
                "the store could not write the definition",
            ),
            Some(ok) => self.reply(cx, ok),
            None => {}
        });
        // The method's own count, let go after the wait is registered: the commit may be
        // reported from now on (with nobody waiting when no reply went out).
        ticket.complete(true);
        result
    }

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

    fn exchange_declare(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ExchangeDeclare,
        writes: DefinitionWrites<'_>,
    ) -> Answer {
        let kind = if m.passive {
            DeclaredType::Standard(RoutingKind::Direct)
        } else {
            DeclaredType::parse(&m.kind)?
        };
        // A passive declare needs nothing; the default exchange is refused by the declare
        // itself, with its own text.
        if !m.passive && !m.exchange.is_empty() {
            self.permit_exchange_declare(cx, &m)?;
        }
        let spec = ExchangeSpec {
            name: m.exchange,
            kind,
            passive: m.passive,
            durable: m.durable,
            auto_delete: m.auto_delete,
            internal: m.internal,
            arguments: m.arguments,
            declared_by: DeclaredBy::user(cx.user),
        };
        cx.vhost.declare_exchange_reporting(spec, writes)?;
        Ok(unless_no_wait(m.no_wait, Method::ExchangeDeclareOk))
    }

    fn exchange_delete(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ExchangeDelete,
        writes: DefinitionWrites<'_>,
    ) -> Answer {
        // The default and `amq.*` exchanges are refused by the delete itself.
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
        Ok(unless_no_wait(m.no_wait, Method::ExchangeDeleteOk))
    }

    fn exchange_bind(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ExchangeBind,
        writes: DefinitionWrites<'_>,
    ) -> Answer {
        let binding = Binding {
            source: m.source,
            destination: Destination::Exchange(m.destination),
            routing_key: m.routing_key,
            arguments: m.arguments,
        };
        self.permit_binding(cx, &binding)?;
        cx.vhost.bind_reporting(binding, writes)?;
        Ok(unless_no_wait(m.no_wait, Method::ExchangeBindOk))
    }

    fn exchange_unbind(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: ExchangeUnbind,
        writes: DefinitionWrites<'_>,
    ) -> Answer {
        let binding = Binding {
            source: m.source,
            destination: Destination::Exchange(m.destination),
            routing_key: m.routing_key,
            arguments: m.arguments,
        };
        self.permit_binding(cx, &binding)?;
        cx.vhost.unbind_reporting(&binding, writes)?;
        Ok(unless_no_wait(m.no_wait, Method::ExchangeUnbindOk))
    }

    fn queue_declare(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueueDeclare,
        writes: DefinitionWrites<'_>,
    ) -> Answer {
        if is_reply_name(&m.queue) {
            return self.reply_queue_declare(cx, m);
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
        let ok = QueueDeclareOk {
            queue: queue.name.clone(),
            message_count: queue.message_count(&**cx.vhost) as u32,
            consumer_count: queue.consumer_count() as u32,
        };
        Ok(unless_no_wait(m.no_wait, Method::QueueDeclareOk(ok)))
    }

    /// RabbitMQ answers any declare of a direct reply-to name as a passive one.
    fn reply_queue_declare(&mut self, cx: &ConnContext<'_>, m: QueueDeclare) -> Answer {
        if !cx.state.reply_consumers.exists(&m.queue) {
            return Err(BrokerError::NotFound(format!(
                "no queue '{}' in vhost '{}'",
                m.queue, cx.vhost.name
            )));
        }
        let ok = QueueDeclareOk {
            queue: m.queue,
            message_count: 0,
            consumer_count: 1,
        };
        Ok(unless_no_wait(m.no_wait, Method::QueueDeclareOk(ok)))
    }

    fn queue_bind(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueueBind,
        writes: DefinitionWrites<'_>,
    ) -> Answer {
        let name = self.queue_name(&m.queue)?;
        let binding = Binding {
            source: m.exchange,
            routing_key: routing_key_shortcut(&m.queue, m.routing_key, &name),
            destination: Destination::Queue(name),
            arguments: m.arguments,
        };
        self.permit_binding(cx, &binding)?;
        if let Destination::Queue(name) = &binding.destination {
            self.queue_for(cx, name)?;
        }
        cx.vhost.bind_reporting(binding, writes)?;
        Ok(unless_no_wait(m.no_wait, Method::QueueBindOk))
    }

    /// `queue.unbind` (which has no `no-wait`).
    fn queue_unbind(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueueUnbind,
        writes: DefinitionWrites<'_>,
    ) -> Answer {
        let name = self.queue_name(&m.queue)?;
        let binding = Binding {
            source: m.exchange,
            routing_key: routing_key_shortcut(&m.queue, m.routing_key, &name),
            destination: Destination::Queue(name.clone()),
            arguments: m.arguments,
        };
        self.permit_binding(cx, &binding)?;
        // A missing queue is not an error (RabbitMQ answers unbind-ok); another connection's
        // exclusive queue is.
        if let Ok(queue) = cx.vhost.queue(&name) {
            queue.check_exclusive(cx.id)?;
        }
        cx.vhost.unbind_reporting(&binding, writes)?;
        Ok(Some(Method::QueueUnbindOk))
    }

    /// `queue.purge` (which writes no definition).
    pub(super) fn queue_purge(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueuePurge,
    ) -> BrokerResult<()> {
        let name = self.queue_name(&m.queue)?;
        self.permit(cx, Operation::Read, ResourceKind::Queue, &name)?;
        let queue = self.queue_for(cx, &name)?;
        let message_count = queue.purge(&**cx.vhost) as u32;
        if !m.no_wait {
            self.reply(cx, Method::QueuePurgeOk(QueuePurgeOk { message_count }));
        }
        Ok(())
    }

    fn queue_delete(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: QueueDelete,
        writes: DefinitionWrites<'_>,
    ) -> Answer {
        let name = self.queue_name(&m.queue)?;
        self.permit(cx, Operation::Configure, ResourceKind::Queue, &name)?;
        let deleted =
            cx.vhost
                .delete_queue_reporting(&name, m.if_unused, m.if_empty, Some(cx.id), writes)?;
        cx.exclusive_queues.retain(|q| q.name != name);
        let ok = QueueDeleteOk {
            message_count: deleted.message_count as u32,
        };
        Ok(unless_no_wait(m.no_wait, Method::QueueDeleteOk(ok)))
    }
}

/// The permission checks of topology methods, as rabbit_channel makes them.
impl Channel {
    /// A non-passive `exchange.declare`: configure on the exchange; when it is new and
    /// names an alternate exchange, read on it and write on the alternate.
    fn permit_exchange_declare(
        &mut self,
        cx: &ConnContext<'_>,
        m: &ExchangeDeclare,
    ) -> BrokerResult<()> {
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
        Ok(())
    }

    /// A non-passive `queue.declare`: configure on the queue's name (a server-named queue's
    /// name is drawn first, and checked too); when the queue is new and names a dead-letter
    /// exchange, read on the queue and write on that exchange.
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
    fn permit_binding(&mut self, cx: &ConnContext<'_>, binding: &Binding) -> BrokerResult<()> {
        let (kind, destination) = match &binding.destination {
            Destination::Queue(name) => (ResourceKind::Queue, name),
            Destination::Exchange(name) => (ResourceKind::Exchange, name),
        };
        self.permit(cx, Operation::Write, kind, destination)?;
        self.permit(cx, Operation::Read, ResourceKind::Exchange, &binding.source)
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
