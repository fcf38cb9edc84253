//! A virtual host: its exchanges and queues, and the operations on them.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::policy::{Policy, PolicyError};
use dwellmq_core::routing::{
    Binding, BindingSet, Destination, ExchangeGraph, RouteKeys, Routed, RoutingKind,
};
use dwellmq_core::{arguments, BrokerError, BrokerResult};
use parking_lot::RwLock;

use super::exchange::{DeclaredBy, DeclaredType, Exchange, ExchangeKind};
use super::persist::DefinitionWrites;
use super::policies::Policies;
use super::queue::{ConnectionId, Queue};
use super::runtime::Runtime;
use super::stats::QueueTotals;

/// The exchanges every vhost starts with, as RabbitMQ predeclares them.
const PREDECLARED: &[(&str, RoutingKind)] = &[
    ("", RoutingKind::Direct),
    ("amq.direct", RoutingKind::Direct),
    ("amq.fanout", RoutingKind::Fanout),
    ("amq.topic", RoutingKind::Topic),
    ("amq.headers", RoutingKind::Headers),
    ("amq.match", RoutingKind::Headers),
    ("amq.rabbitmq.trace", RoutingKind::Topic),
];

/// What `exchange.declare` asks for.
pub(crate) struct ExchangeSpec {
    pub(crate) name: ShortStr,
    pub(crate) kind: DeclaredType,
    pub(crate) passive: bool,
    pub(crate) durable: bool,
    pub(crate) auto_delete: bool,
    pub(crate) internal: bool,
    pub(crate) arguments: FieldTable,
    /// Who declares it (kept by a new exchange only).
    pub(crate) declared_by: DeclaredBy,
}

/// What `queue.declare` asks for.
pub(crate) struct QueueSpec {
    pub(crate) name: ShortStr,
    pub(crate) passive: bool,
    pub(crate) durable: bool,
    pub(crate) exclusive: bool,
    pub(crate) auto_delete: bool,
    pub(crate) arguments: FieldTable,
}

/// What a queue's deletion reports (its consumers were told and the exchanges it orphaned
/// removed by the deletion itself).
pub(crate) struct DeletedQueue {
    pub(crate) message_count: usize,
    /// Consumers it had (each told with `basic.cancel` where it asked for that).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) consumers: usize,
    /// Auto-delete exchanges that lost their last binding with the queue.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) removed_exchanges: Vec<ShortStr>,
}

/// Where a message goes, as [`VHost::route`] finds it: core's [`Routed`] over the broker's
/// handles. Reused between messages, so routing allocates nothing in steady state.
pub(crate) type Routing = Routed<Arc<Exchange>, Arc<Queue>>;

/// A vhost's exchanges and queues as core's walk reads them, under their read locks.
struct Graph<'v> {
    /// `None` for a publish to the default exchange, which routes by queue name only (so it
    /// takes one lock, not two).
    exchanges: Option<&'v HashMap<ShortStr, Arc<Exchange>>>,
    queues: &'v HashMap<ShortStr, Arc<Queue>>,
}

impl ExchangeGraph for Graph<'_> {
    type Exchange = Arc<Exchange>;
    type Queue = Arc<Queue>;

    fn exchange(&self, name: &str) -> Option<&Arc<Exchange>> {
        self.exchanges?.get(name)
    }

    fn queue(&self, name: &str) -> Option<&Arc<Queue>> {
        self.queues.get(name)
    }

    fn same_queue(&self, a: &Arc<Queue>, b: &Arc<Queue>) -> bool {
        Arc::ptr_eq(a, b)
    }

    fn name<'a>(&'a self, exchange: &'a Arc<Exchange>) -> &'a str {
        &exchange.name
    }

    fn is_delayed(&self, exchange: &Arc<Exchange>) -> bool {
        matches!(exchange.kind, ExchangeKind::Delayed(_))
    }

    fn alternate(&self, exchange: &Arc<Exchange>) -> Option<&Arc<Exchange>> {
        self.exchanges?.get(&exchange.alternate()?)
    }

    fn with_bindings(&self, exchange: &Arc<Exchange>, f: &mut dyn FnMut(&BindingSet)) {
        f(&exchange.bindings.read())
    }
}

/// A virtual host.
pub(crate) struct VHost {
    pub(crate) name: ShortStr,
    exchanges: RwLock<HashMap<ShortStr, Arc<Exchange>>>,
    queues: RwLock<HashMap<ShortStr, Arc<Queue>>>,
    runtime: Arc<Runtime>,
    /// This vhost, for its queues (dead-lettering, `x-expires`).
    me: Weak<VHost>,
    policies: RwLock<Policies>,
    /// Queues that keep dead-lettered messages not every target took (at-least-once
    /// dead-lettering), so that a bind retries those few, not every queue's.
    keeping_dead_letters: parking_lot::Mutex<Vec<Weak<Queue>>>,
}

/// RabbitMQ's refusal of any operation on the nameless default exchange.
fn default_exchange_refused() -> BrokerError {
    BrokerError::AccessRefused("operation not permitted on the default exchange".into())
}

/// The default exchange can be neither end of a binding (RabbitMQ checks this before looking
/// either end up).
fn check_not_default(binding: &Binding) -> BrokerResult<()> {
    let destination_is_default =
        matches!(&binding.destination, Destination::Exchange(x) if x.is_empty());
    if binding.source.is_empty() || destination_is_default {
        return Err(default_exchange_refused());
    }
    Ok(())
}

/// Removes every binding to `gone` (it was deleted) and, as RabbitMQ does, every auto-delete
/// exchange that so loses its last binding, then the bindings to those, and so on. Appends the
/// names of the exchanges removed to `removed`.
fn remove_bindings_to(
    exchanges: &mut HashMap<ShortStr, Arc<Exchange>>,
    gone: Destination,
    removed: &mut Vec<ShortStr>,
) {
    let mut pending = vec![gone];
    while let Some(gone) = pending.pop() {
        let mut orphaned = Vec::new();
        for exchange in exchanges.values() {
            let mut bindings = exchange.bindings.write();
            if bindings.remove_destination(&gone) > 0 && exchange.auto_delete && bindings.is_empty()
            {
                orphaned.push(exchange.name.clone());
            }
        }
        for name in orphaned {
            exchanges.remove(&name).inspect(|x| x.retire());
            pending.push(Destination::Exchange(name.clone()));
            removed.push(name);
        }
    }
}

fn bool_text(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

impl VHost {
    /// A vhost whose queues share `runtime`.
    pub(crate) fn shared(name: ShortStr, runtime: Arc<Runtime>) -> Arc<Self> {
        Arc::new_cyclic(|me| Self::build(name, runtime, me.clone()))
    }

    /// A vhost on a runtime of its own (unit tests); its queues cannot dead-letter.
    #[cfg(test)]
    pub(crate) fn new(name: ShortStr) -> Self {
        Self::build(name, Runtime::standalone(), Weak::new())
    }

    fn build(name: ShortStr, runtime: Arc<Runtime>, me: Weak<VHost>) -> Self {
        let exchanges = PREDECLARED
            .iter()
            .map(|&(name, kind)| {
                let name = ShortStr::from(name);
                // RabbitMQ's trace exchange is internal: clients may bind to it, not publish.
                let internal = name.as_str() == "amq.rabbitmq.trace";
                let exchange = Exchange::new(
                    name.clone(),
                    ExchangeKind::Standard(kind),
                    true,
                    false,
                    internal,
                    FieldTable::new(),
                    DeclaredBy::Broker,
                );
                (name, Arc::new(exchange))
            })
            .collect();
        VHost {
            name,
            exchanges: RwLock::new(exchanges),
            queues: RwLock::new(HashMap::new()),
            runtime,
            me,
            policies: RwLock::new(Policies::default()),
            keeping_dead_letters: parking_lot::Mutex::new(Vec::new()),
        }
    }

    fn no_exchange(&self, name: &str) -> BrokerError {
        BrokerError::NotFound(format!("no exchange '{}' in vhost '{}'", name, self.name))
    }

    fn no_queue(&self, name: &str) -> BrokerError {
        BrokerError::NotFound(format!("no queue '{}' in vhost '{}'", name, self.name))
    }

    /// The exchange called `name`, or `NOT_FOUND`.
    pub(crate) fn exchange(&self, name: &str) -> BrokerResult<Arc<Exchange>> {
        self.exchanges
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| self.no_exchange(name))
    }

    /// What this vhost's queues share (clock, scheduler, store, test hooks).
    pub(crate) fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Whether `exchange` is still declared here (not deleted, nor replaced by a new exchange of
    /// the same name).
    pub(crate) fn is_current(&self, exchange: &Arc<Exchange>) -> bool {
        self.exchanges
            .read()
            .get(exchange.name.as_str())
            .is_some_and(|current| Arc::ptr_eq(current, exchange))
    }

    /// The queue called `name`, or `NOT_FOUND`.
    pub(crate) fn queue(&self, name: &str) -> BrokerResult<Arc<Queue>> {
        self.queues
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| self.no_queue(name))
    }

    /// Every queue (for inspection and connection cleanup).
    pub(crate) fn queues(&self) -> Vec<Arc<Queue>> {
        self.queues.read().values().cloned().collect()
    }

    /// Every exchange.
    pub(crate) fn exchanges(&self) -> Vec<Arc<Exchange>> {
        self.exchanges.read().values().cloned().collect()
    }

    /// `exchange.declare`; a created durable exchange's write reports to `writes`.
    pub(crate) fn declare_exchange_reporting(
        &self,
        d: ExchangeSpec,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<Arc<Exchange>> {
        if d.passive {
            if d.name.is_empty() {
                return Err(default_exchange_refused());
            }
            return self.exchange(&d.name);
        }
        if d.name.is_empty() {
            return Err(default_exchange_refused());
        }
        let mut exchanges = self.exchanges.write();
        if let Some(existing) = exchanges.get(&d.name) {
            // As rabbit_channel: an existing exchange, `amq.*` ones included, is only compared;
            // the name and the alternate exchange are checked for a new one.
            self.check_exchange_equivalence(existing, &d)?;
            return Ok(Arc::clone(existing));
        }
        if d.name.starts_with("amq.") {
            return Err(BrokerError::AccessRefused(format!(
                "exchange name '{}' contains reserved prefix 'amq.*'",
                d.name
            )));
        }
        arguments::parse_alternate_exchange(&d.name, &self.name, &d.arguments)?;
        self.check_kept_exchange_equivalence(&d)?;
        // As the delayed-message plugin: `x-delayed-type` is validated when the exchange is
        // created, and never compared on a redeclare.
        let kind = match d.kind {
            DeclaredType::Standard(kind) => ExchangeKind::Standard(kind),
            DeclaredType::Delayed => {
                ExchangeKind::Delayed(arguments::parse_delayed_type(&d.arguments)?)
            }
        };
        let exchange = Arc::new(Exchange::new(
            d.name.clone(),
            kind,
            d.durable,
            d.auto_delete,
            d.internal,
            d.arguments,
            d.declared_by,
        ));
        *exchange.policy_alternate_exchange.write() = self
            .policies
            .read()
            .for_exchange(&exchange.name)
            .and_then(|d| d.alternate_exchange);
        exchanges.insert(d.name, Arc::clone(&exchange));
        let kept_bindings = super::persist::exchange_declared(
            &self.runtime,
            &self.name,
            &self.me,
            &exchange,
            writes,
        );
        drop(exchanges);
        // As a restore would: its kept bindings whose other end exists are back.
        for (binding, reported) in kept_bindings.into_iter().flatten() {
            match super::persist::recover::restore_binding_in(self, &binding) {
                Ok(()) => self.runtime.kept_exchanges.binding_reattached(reported),
                Err(why) => tracing::info!(%reported, %why, "a kept binding stays kept"),
            }
        }
        Ok(exchange)
    }

    /// A declare of an exchange the restore kept on disk takes it back only as what it was:
    /// the same type, durable. Anything else would replace its stored definition, and the
    /// next restart would find its held messages without their exchange.
    fn check_kept_exchange_equivalence(&self, d: &ExchangeSpec) -> BrokerResult<()> {
        let Some(kind) = self.runtime.kept_exchanges.kind_of(&self.name, &d.name) else {
            return Ok(());
        };
        let mismatch = |field: &str, received: &str, current: &str| {
            Err(BrokerError::PreconditionFailed(format!(
                "inequivalent arg '{field}' for exchange '{}' in vhost '{}': received '{received}' but current is '{current}'",
                d.name, self.name
            )))
        };
        if d.kind.type_name() != kind {
            return mismatch("type", d.kind.type_name(), &kind);
        }
        if !d.durable {
            return mismatch("durable", "false", "true");
        }
        Ok(())
    }

    /// Takes back a declare that took over a kept exchange whose definition could not be
    /// written: gone from memory with what it held since, while its stored definition,
    /// bindings and held messages stay as the restore kept them.
    pub(crate) fn undo_exchange_reattach(&self, exchange: &Arc<Exchange>) {
        tracing::warn!(
            vhost = %self.name,
            exchange = %exchange.name,
            "the exchange's definition could not be written: the declare is taken back, what is stored stays kept"
        );
        let mut exchanges = self.exchanges.write();
        if !exchanges
            .get(exchange.name.as_str())
            .is_some_and(|current| Arc::ptr_eq(current, exchange))
        {
            return;
        }
        exchanges.remove(exchange.name.as_str());
        exchange.retire();
        let mut removed = vec![exchange.name.clone()];
        remove_bindings_to(
            &mut exchanges,
            Destination::Exchange(exchange.name.clone()),
            &mut removed,
        );
        // Auto-delete exchanges it orphaned go as a deletion would take them; its own
        // definition and bindings stay stored.
        super::persist::exchanges_deleted(
            &self.runtime,
            &self.name,
            &removed[1..],
            DefinitionWrites::UNAWAITED,
        );
        drop(exchanges);
        // What it held since the declare goes; the kept messages were never its own.
        self.forget_held(&removed);
    }

    fn check_exchange_equivalence(&self, x: &Exchange, d: &ExchangeSpec) -> BrokerResult<()> {
        let mismatch = |field: &str, received: &str, current: &str| {
            Err(BrokerError::PreconditionFailed(format!(
                "inequivalent arg '{field}' for exchange '{}' in vhost '{}': received '{received}' but current is '{current}'",
                x.name, self.name
            )))
        };
        if x.kind.type_name() != d.kind.type_name() {
            return mismatch("type", d.kind.type_as_atom(), x.kind.type_as_atom());
        }
        if x.durable != d.durable {
            return mismatch("durable", bool_text(d.durable), bool_text(x.durable));
        }
        if x.auto_delete != d.auto_delete {
            return mismatch(
                "auto_delete",
                bool_text(d.auto_delete),
                bool_text(x.auto_delete),
            );
        }
        if x.internal != d.internal {
            return mismatch("internal", bool_text(d.internal), bool_text(x.internal));
        }
        arguments::check_exchange_equivalence(&x.name, &self.name, &x.arguments, &d.arguments)?;
        Ok(())
    }

    /// `exchange.delete`. Deleting a missing exchange succeeds, as in RabbitMQ 3.x.
    /// Returns the exchanges removed (this one, and auto-delete ones it was the last binding of).
    pub(crate) fn delete_exchange_reporting(
        &self,
        name: &str,
        if_unused: bool,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<Vec<ShortStr>> {
        if name.is_empty() {
            return Err(default_exchange_refused());
        }
        if name.starts_with("amq.") {
            return Err(BrokerError::AccessRefused(format!(
                "deletion of system exchange '{}' in vhost '{}' not allowed",
                name, self.name
            )));
        }
        let mut exchanges = self.exchanges.write();
        let Some(exchange) = exchanges.get(name).cloned() else {
            return Ok(Vec::new());
        };
        if if_unused && !exchange.bindings.read().is_empty() {
            return Err(BrokerError::PreconditionFailed(format!(
                "exchange '{}' in vhost '{}' in use",
                name, self.name
            )));
        }
        exchanges.remove(name);
        exchange.retire();
        let mut removed = vec![exchange.name.clone()];
        remove_bindings_to(
            &mut exchanges,
            Destination::Exchange(exchange.name.clone()),
            &mut removed,
        );
        super::persist::exchanges_deleted(&self.runtime, &self.name, &removed, writes);
        drop(exchanges);
        self.forget_held(&removed);
        Ok(removed)
    }

    /// Takes back a declare whose definition could not be written: this exchange (not a
    /// namesake declared since) is deleted, as if the declare never happened.
    pub(crate) fn undo_exchange_declare(&self, exchange: &Arc<Exchange>) {
        if !self.is_current(exchange) {
            return;
        }
        tracing::warn!(
            vhost = %self.name,
            exchange = %exchange.name,
            "the exchange's definition could not be written: the declare is taken back"
        );
        let _ = self.delete_exchange_reporting(&exchange.name, false, DefinitionWrites::UNAWAITED);
    }

    /// Takes back a declare whose definition could not be written: this queue (not a namesake
    /// declared since) is deleted, with what was stored under its id meanwhile.
    pub(crate) fn undo_queue_declare(&self, queue: &Arc<Queue>) {
        tracing::warn!(
            vhost = %self.name,
            queue = %queue.name,
            "the queue's definition could not be written: the declare is taken back"
        );
        let _ = self.delete_queue_instance_reporting(queue, DefinitionWrites::UNAWAITED);
    }

    /// Takes back a declare that took over a kept queue whose definition could not be written:
    /// gone from memory, while its stored definition, bindings and messages stay as the
    /// restore kept them.
    pub(crate) fn undo_queue_reattach(&self, queue: &Arc<Queue>) {
        tracing::warn!(
            vhost = %self.name,
            queue = %queue.name,
            "the queue's definition could not be written: the declare is taken back, what is stored stays kept"
        );
        {
            let mut queues = self.queues.write();
            if !queues
                .get(&queue.name)
                .is_some_and(|current| Arc::ptr_eq(current, queue))
            {
                return;
            }
            queues.remove(&queue.name);
        }
        let (_, consumers) = queue.mark_deleted();
        let mut orphaned = Vec::new();
        remove_bindings_to(
            &mut self.exchanges.write(),
            Destination::Queue(queue.name.clone()),
            &mut orphaned,
        );
        super::queue::consumer::notify_cancelled(&consumers);
        self.forget_held(&orphaned);
    }

    /// What a deletion leaves to do, done here so that no caller has to remember it: the
    /// messages held by the removed delayed exchanges go with them.
    fn forget_held(&self, removed: &[ShortStr]) {
        for name in removed {
            self.runtime.delayed.forget_exchange(&self.name, name);
        }
    }

    /// `queue.declare`; returns the queue. A created durable queue's write reports to
    /// `writes`.
    pub(crate) fn declare_queue_reporting(
        &self,
        d: QueueSpec,
        connection: ConnectionId,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<Arc<Queue>> {
        if d.passive {
            let queue = self.queue(&d.name)?;
            queue.check_exclusive(connection)?;
            return Ok(queue);
        }
        let name = if d.name.is_empty() {
            self.generate_queue_name()?
        } else if d.name.starts_with("amq.") {
            return Err(BrokerError::AccessRefused(format!(
                "queue name '{}' contains reserved prefix 'amq.*'",
                d.name
            )));
        } else {
            d.name.clone()
        };
        self.declare_named_queue(name, d, connection, writes)
    }

    /// `queue.declare` whose write nobody waits for: a transient queue the broker declares for
    /// itself (the HTTP API's aliveness test), and unit tests.
    pub(crate) fn declare_queue(
        &self,
        d: QueueSpec,
        connection: ConnectionId,
    ) -> BrokerResult<Arc<Queue>> {
        self.declare_queue_reporting(d, connection, DefinitionWrites::UNAWAITED)
    }

    /// A name for a server-named queue (`amq.gen-…`).
    pub(crate) fn generate_queue_name(&self) -> BrokerResult<ShortStr> {
        Ok(ShortStr::from(self.runtime.names.generate("amq.gen-")?))
    }

    /// Declares a server-named queue whose name `generate_queue_name` drew (a channel draws
    /// it first, to check permissions on it).
    pub(crate) fn declare_generated_queue_reporting(
        &self,
        d: QueueSpec,
        connection: ConnectionId,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<Arc<Queue>> {
        self.declare_named_queue(d.name.clone(), d, connection, writes)
    }

    fn declare_named_queue(
        &self,
        name: ShortStr,
        d: QueueSpec,
        connection: ConnectionId,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<Arc<Queue>> {
        let mut queues = self.queues.write();
        if let Some(existing) = queues.get(&name) {
            existing.check_exclusive(connection)?;
            self.check_queue_equivalence(
                existing,
                d.durable,
                d.exclusive,
                d.auto_delete,
                &d.arguments,
            )?;
            let existing = Arc::clone(existing);
            drop(queues);
            QueueTotals::bump(&self.runtime.queue_totals.declared);
            existing.redeclared();
            return Ok(existing);
        }
        let config = arguments::parse_queue_arguments(
            &name,
            &self.name,
            &d.arguments,
            d.durable,
            d.exclusive,
            d.auto_delete,
        )?;
        let policy = self.policies.read().for_queue(&name, config.queue_type);
        let queue = Arc::new(Queue::new(
            name.clone(),
            self.name.clone(),
            d.durable,
            d.exclusive.then_some(connection),
            d.auto_delete,
            d.arguments,
            config,
            Arc::clone(&self.runtime),
            policy.as_ref(),
        ));
        // Its store id is set and its definition submitted before anyone can see it: a message
        // published to it at once is stored under that id, after the definition (and after
        // the messages of a kept queue it takes back).
        let kept_bindings = super::persist::queue_declared(&self.runtime, &self.me, &queue, writes);
        queues.insert(name, Arc::clone(&queue));
        drop(queues);
        QueueTotals::bump(&self.runtime.queue_totals.declared);
        QueueTotals::bump(&self.runtime.queue_totals.created);
        queue.start(self.me.clone());
        if let Some(bindings) = kept_bindings {
            // As a restore would: its kept bindings whose source exists are back, a paging
            // queue's first page is read, what expired meanwhile dies, deadlines are armed.
            for (binding, reported) in bindings {
                match super::persist::recover::restore_binding_in(self, &binding) {
                    Ok(()) => self.runtime.kept_queues.binding_reattached(reported),
                    Err(why) => tracing::info!(%reported, %why, "a kept binding stays kept"),
                }
            }
            queue.read_first_page();
            queue.tick();
        }
        Ok(queue)
    }

    fn check_queue_equivalence(
        &self,
        q: &Queue,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        args: &FieldTable,
    ) -> BrokerResult<()> {
        let mismatch = |field: &str, received: bool, current: bool| {
            Err(BrokerError::PreconditionFailed(format!(
                "inequivalent arg '{field}' for queue '{}' in vhost '{}': received '{}' but current is '{}'",
                q.name,
                self.name,
                bool_text(received),
                bool_text(current)
            )))
        };
        if q.durable != durable {
            return mismatch("durable", durable, q.durable);
        }
        if q.exclusive_owner.is_some() != exclusive {
            return Err(BrokerError::ResourceLocked(format!(
                "cannot obtain exclusive access to locked queue '{}' in vhost '{}'. It could be \
                 originally declared on another connection or the exclusive property value does \
                 not match that of the original declaration.",
                q.name, self.name
            )));
        }
        if q.auto_delete != auto_delete {
            return mismatch("auto_delete", auto_delete, q.auto_delete);
        }
        arguments::check_queue_equivalence(&q.name, &self.name, &q.arguments, args)
    }

    /// `queue.delete` (and auto-delete, exclusive cleanup, `x-expires`).
    pub(crate) fn delete_queue_reporting(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: Option<ConnectionId>,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<DeletedQueue> {
        let Some(queue) = self.queues.read().get(name).cloned() else {
            return Ok(DeletedQueue {
                message_count: 0,
                consumers: 0,
                removed_exchanges: Vec::new(),
            });
        };
        if let Some(connection) = connection {
            queue.check_exclusive(connection)?;
        }
        if if_unused && queue.consumer_count() > 0 {
            return Err(BrokerError::PreconditionFailed(format!(
                "queue '{}' in vhost '{}' in use",
                name, self.name
            )));
        }
        if if_empty && queue.message_count() > 0 {
            return Err(BrokerError::PreconditionFailed(format!(
                "queue '{}' in vhost '{}' not empty",
                name, self.name
            )));
        }
        if self.queues.write().remove(name).is_some() {
            QueueTotals::bump(&self.runtime.queue_totals.deleted);
        }
        // Marked deleted first: it takes no message after this, so the store's removal of the
        // queue comes after every message it stored.
        let (message_count, consumers) = queue.mark_deleted();
        super::persist::queue_deleted(&self.runtime, self, &queue, writes);
        let mut orphaned = Vec::new();
        remove_bindings_to(
            &mut self.exchanges.write(),
            Destination::Queue(queue.name.clone()),
            &mut orphaned,
        );
        // A durable auto-delete exchange that lost its last binding here must not come back
        // after a restart.
        super::persist::exchanges_deleted(&self.runtime, &self.name, &orphaned, writes);
        // Its consumers hear of it (`basic.cancel` where they asked for it), and what the
        // orphaned auto-delete exchanges held goes with them.
        super::queue::consumer::notify_cancelled(&consumers);
        self.forget_held(&orphaned);
        Ok(DeletedQueue {
            message_count,
            consumers: consumers.len(),
            removed_exchanges: orphaned,
        })
    }

    /// Deletes exactly this queue (exclusive and auto-delete cleanup): if its name now belongs
    /// to another queue, that one is left alone.
    pub(crate) fn delete_queue_instance_reporting(
        &self,
        queue: &Arc<Queue>,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<DeletedQueue> {
        let current = self.queues.read().get(&queue.name).cloned();
        match current {
            Some(current) if Arc::ptr_eq(&current, queue) => {
                self.delete_queue_reporting(&queue.name, false, false, None, writes)
            }
            _ => Ok(DeletedQueue {
                message_count: 0,
                consumers: 0,
                removed_exchanges: Vec::new(),
            }),
        }
    }

    /// Adds or replaces a policy and applies what changed to every queue and exchange; its
    /// write reports to `writes`.
    pub(crate) fn set_policy(
        self: &Arc<Self>,
        policy: Policy,
        writes: DefinitionWrites<'_>,
    ) -> Result<(), PolicyError> {
        let mut policies = self.policies.write();
        let replaced = policies.set(policy.clone())?;
        // Submitted under the lock: the store sees a policy's changes in the order memory does.
        super::persist::policy_set(
            &self.runtime,
            &self.name,
            &self.me,
            &policy,
            replaced,
            writes,
        );
        drop(policies);
        self.apply_policies();
        Ok(())
    }

    /// Takes back a policy whose write failed: the one it replaced (or none) is in effect
    /// again, unless the policy was changed since.
    pub(crate) fn undo_policy_set(&self, policy: &Policy, replaced: Option<Policy>) {
        let mut policies = self.policies.write();
        if policies.get(&policy.name) != Some(policy) {
            return;
        }
        tracing::warn!(
            vhost = %self.name,
            policy = %policy.name,
            "the policy could not be written: it is taken back"
        );
        match replaced {
            // Valid: it was in effect.
            Some(replaced) => {
                let _ = policies.set(replaced);
            }
            None => {
                policies.clear(&policy.name);
            }
        }
        drop(policies);
        self.apply_policies();
    }

    /// Removes a policy (false if there was none of that name) and applies what changed; its
    /// removal reports to `writes` (and is retried by the store until it is written).
    pub(crate) fn clear_policy(self: &Arc<Self>, name: &str, writes: DefinitionWrites<'_>) -> bool {
        let mut policies = self.policies.write();
        let removed = policies.clear(name);
        if removed {
            super::persist::policy_cleared(&self.runtime, &self.name, name, writes);
            drop(policies);
            self.apply_policies();
        }
        removed
    }

    /// Every policy, by name.
    pub(crate) fn policies(&self) -> Vec<Policy> {
        self.policies.read().list()
    }

    /// Gives every queue and exchange the policy that now applies to it.
    fn apply_policies(&self) {
        let queues = self.queues();
        let exchanges = self.exchanges();
        let policies = self.policies.read();
        let for_queues: Vec<_> = queues
            .iter()
            .map(|q| policies.for_queue(&q.name, q.config.queue_type))
            .collect();
        for exchange in &exchanges {
            *exchange.policy_alternate_exchange.write() = policies
                .for_exchange(&exchange.name)
                .and_then(|d| d.alternate_exchange);
        }
        drop(policies);
        for (queue, policy) in queues.iter().zip(&for_queues) {
            queue.apply_policy(policy.as_ref());
        }
    }

    /// `queue.bind` / `exchange.bind`.
    pub(crate) fn bind_reporting(
        &self,
        binding: Binding,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<()> {
        check_not_default(&binding)?;
        let source = self.exchange(&binding.source)?;
        if source.kind.routing() == RoutingKind::Headers {
            dwellmq_core::routing::validate_headers_binding_args(&binding.arguments)?;
        }
        // The destination is found and the binding added under the read lock of the table the
        // destination lives in: its deletion (which takes that table's write lock, then removes
        // the bindings to it) either comes first and the bind fails with 404, or comes after
        // and takes this binding away with the others. Checked and then added without the
        // lock, a deletion in between left a binding to a queue that no longer existed, which
        // routed into the next queue of that name.
        let destination = binding.destination.clone();
        let add = |durable_destination: bool| {
            // Added before its write is submitted: a failed commit's undo must find it.
            let new = source.bindings.write().add(binding.clone());
            super::persist::bound(
                &self.runtime,
                &self.name,
                &source,
                &binding,
                durable_destination,
                new,
                writes,
            );
        };
        match &destination {
            Destination::Queue(name) => {
                let queues = self.queues.read();
                let queue = queues.get(name).ok_or_else(|| self.no_queue(name))?;
                // A test may stop the bind here, found and not yet added (see `TestHooks`).
                self.runtime.hooks.binds.pass();
                add(queue.store_id.get().is_some());
            }
            Destination::Exchange(name) => {
                let exchanges = self.exchanges.read();
                let exchange = exchanges.get(name).ok_or_else(|| self.no_exchange(name))?;
                self.runtime.hooks.binds.pass();
                add(exchange.durable);
            }
        }
        self.retry_kept_dead_letters();
        Ok(())
    }

    /// A binding was added: dead-lettered messages that their source queues keep because no
    /// queue took them (at-least-once dead-lettering) may route now, so they do not wait for
    /// their timer.
    fn retry_kept_dead_letters(&self) {
        if self
            .runtime
            .restoring
            .load(std::sync::atomic::Ordering::Acquire)
        {
            // The restore ticks every queue once all bindings are back.
            return;
        }
        // Collected first: a retry may note its queue again.
        let keeping: Vec<Arc<Queue>> = {
            let mut list = self.keeping_dead_letters.lock();
            list.retain(|q| q.upgrade().is_some_and(|q| q.keeps_dead_letters()));
            list.iter().filter_map(Weak::upgrade).collect()
        };
        for queue in keeping {
            queue.retry_dead_letters(true);
        }
    }

    /// `queue` keeps dead-lettered messages now: a bind retries them.
    pub(crate) fn note_keeping_dead_letters(&self, queue: &Arc<Queue>) {
        let mut list = self.keeping_dead_letters.lock();
        let queue = Arc::downgrade(queue);
        if !list.iter().any(|q| q.ptr_eq(&queue)) {
            list.push(queue);
        }
    }

    /// `queue.unbind` / `exchange.unbind`. As in RabbitMQ, a missing binding, source or
    /// destination is not an error: the binding is gone either way.
    /// Returns the exchanges removed: an auto-delete source that lost its last binding, and
    /// auto-delete exchanges whose last binding was to it.
    pub(crate) fn unbind_reporting(
        &self,
        binding: &Binding,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<Vec<ShortStr>> {
        check_not_default(binding)?;
        let Ok(source) = self.exchange(&binding.source) else {
            return Ok(Vec::new());
        };
        let now_empty = {
            let mut bindings = source.bindings.write();
            bindings.remove(binding) && bindings.is_empty()
        };
        super::persist::unbound(&self.runtime, &self.name, binding, writes);
        let mut removed = Vec::new();
        if now_empty && source.auto_delete {
            let mut exchanges = self.exchanges.write();
            // Only this instance: a concurrent redeclare may already own the name.
            if exchanges
                .get(&source.name)
                .is_some_and(|current| Arc::ptr_eq(current, &source))
            {
                exchanges.remove(&source.name);
                source.retire();
                removed.push(source.name.clone());
                let gone = Destination::Exchange(source.name.clone());
                remove_bindings_to(&mut exchanges, gone, &mut removed);
            }
        }
        super::persist::exchanges_deleted(&self.runtime, &self.name, &removed, writes);
        self.forget_held(&removed);
        Ok(removed)
    }

    /// The source exchange of a binding, once both ends exist and may be bound.
    /// Routes a message published to `exchange` with `routing_key` (and the `CC`/`BCC` keys in
    /// `extra_keys`), following exchange-to-exchange bindings and alternate exchanges, into
    /// `routing`.
    ///
    /// With `hold_delayed` (a publish with a positive `x-delay`), a delayed exchange the message
    /// reaches, directly or through a binding, holds it: it goes to `routing.delayed`, and what
    /// lies behind it is consulted only to tell whether it would route now
    /// (`routing.routable_later`, for `mandatory`). At release the holder routes again from the
    /// delayed exchange without `hold_delayed`.
    pub(crate) fn route(
        &self,
        exchange: &Arc<Exchange>,
        routing_key: &str,
        extra_keys: &[ShortStr],
        headers: Option<&FieldTable>,
        hold_delayed: bool,
        routing: &mut Routing,
    ) {
        // Queues first, then exchanges, the order routing has always taken them in.
        let queues = self.queues.read();
        let exchanges = (!exchange.is_default()).then(|| self.exchanges.read());
        let graph = Graph {
            exchanges: exchanges.as_deref(),
            queues: &queues,
        };
        let keys = RouteKeys {
            routing_key,
            extra_keys,
            headers,
        };
        dwellmq_core::routing::route(&graph, exchange, keys, hold_delayed, routing);
    }
}

/// Unit tests' short forms of the definition-writing operations: nobody waits for their writes.
#[cfg(test)]
impl VHost {
    pub(crate) fn declare_exchange(&self, d: ExchangeSpec) -> BrokerResult<Arc<Exchange>> {
        self.declare_exchange_reporting(d, DefinitionWrites::UNAWAITED)
    }

    pub(crate) fn delete_exchange(
        &self,
        name: &str,
        if_unused: bool,
    ) -> BrokerResult<Vec<ShortStr>> {
        self.delete_exchange_reporting(name, if_unused, DefinitionWrites::UNAWAITED)
    }

    pub(crate) fn delete_queue(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: Option<ConnectionId>,
    ) -> BrokerResult<DeletedQueue> {
        let writes = DefinitionWrites::UNAWAITED;
        self.delete_queue_reporting(name, if_unused, if_empty, connection, writes)
    }

    pub(crate) fn delete_queue_instance(&self, queue: &Arc<Queue>) -> BrokerResult<DeletedQueue> {
        self.delete_queue_instance_reporting(queue, DefinitionWrites::UNAWAITED)
    }

    pub(crate) fn bind(&self, binding: Binding) -> BrokerResult<()> {
        self.bind_reporting(binding, DefinitionWrites::UNAWAITED)
    }

    pub(crate) fn unbind(&self, binding: &Binding) -> BrokerResult<Vec<ShortStr>> {
        self.unbind_reporting(binding, DefinitionWrites::UNAWAITED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONN: ConnectionId = 1;
    const OTHER_CONN: ConnectionId = 2;

    fn vhost() -> VHost {
        VHost::new("/".into())
    }

    fn exchange_spec(name: &str, kind: RoutingKind) -> ExchangeSpec {
        ExchangeSpec {
            name: name.into(),
            kind: DeclaredType::Standard(kind),
            passive: false,
            durable: false,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
            declared_by: DeclaredBy::user("guest"),
        }
    }

    fn queue_spec(name: &str) -> QueueSpec {
        QueueSpec {
            name: name.into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: FieldTable::new(),
        }
    }

    fn declare_exchange(v: &VHost, name: &str, kind: RoutingKind) -> Arc<Exchange> {
        v.declare_exchange(exchange_spec(name, kind))
            .expect("exchange declared")
    }

    fn declare_queue(v: &VHost, name: &str) -> Arc<Queue> {
        v.declare_queue(queue_spec(name), CONN)
            .expect("queue declared")
    }

    fn to_queue(source: &str, queue: &str, key: &str) -> Binding {
        Binding::new(source, Destination::Queue(queue.into()), key)
    }

    fn to_exchange(source: &str, exchange: &str, key: &str) -> Binding {
        Binding::new(source, Destination::Exchange(exchange.into()), key)
    }

    /// The names of the queues a message published to `exchange` with `key` reaches, in order.
    fn route(v: &VHost, exchange: &str, key: &str) -> Vec<String> {
        let exchange = v.exchange(exchange).expect("exchange exists");
        let mut routing = Routing::default();
        v.route(&exchange, key, &[], None, false, &mut routing);
        routing.queues.iter().map(|q| q.name.to_string()).collect()
    }

    /// The reply code and text of a refusal.
    fn refusal<T>(result: BrokerResult<T>) -> (u16, String) {
        match result {
            Ok(_) => panic!("expected a refusal"),
            Err(error) => (error.reply_code(), error.reply_text()),
        }
    }

    fn exchange_names(v: &VHost) -> Vec<String> {
        let mut names: Vec<String> = v.exchanges().iter().map(|x| x.name.to_string()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_new_vhost_has_rabbitmqs_predeclared_exchanges_and_no_queues() {
        let v = vhost();
        let names: Vec<&str> = PREDECLARED.iter().map(|&(name, _)| name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(exchange_names(&v), sorted);
        assert!(v.queues().is_empty());
        // Only the trace exchange is internal.
        for name in names {
            let exchange = v.exchange(name).unwrap();
            assert_eq!(exchange.internal, name == "amq.rabbitmq.trace", "{name}");
            assert!(exchange.durable, "{name}");
        }
    }

    #[test]
    fn declaring_an_exchange_twice_returns_the_same_one_and_a_different_type_is_406() {
        let v = vhost();
        let first = declare_exchange(&v, "orders", RoutingKind::Topic);
        let again = declare_exchange(&v, "orders", RoutingKind::Topic);
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(
            refusal(v.declare_exchange(exchange_spec("orders", RoutingKind::Direct))),
            (
                406,
                "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'orders' in vhost \
                 '/': received 'direct' but current is 'topic'"
                    .into()
            )
        );
        let mut durable = exchange_spec("orders", RoutingKind::Topic);
        durable.durable = true;
        assert_eq!(refusal(v.declare_exchange(durable)).0, 406);
    }

    #[test]
    fn exchange_declare_refuses_reserved_and_default_names_and_passive_needs_the_exchange() {
        let v = vhost();
        assert_eq!(
            refusal(v.declare_exchange(exchange_spec("amq.mine", RoutingKind::Direct))),
            (
                403,
                "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'".into()
            )
        );
        assert_eq!(
            refusal(v.declare_exchange(exchange_spec("", RoutingKind::Direct))),
            (
                403,
                "ACCESS_REFUSED - operation not permitted on the default exchange".into()
            )
        );
        let mut passive = exchange_spec("missing", RoutingKind::Direct);
        passive.passive = true;
        assert_eq!(
            refusal(v.declare_exchange(passive)),
            (404, "NOT_FOUND - no exchange 'missing' in vhost '/'".into())
        );
        // A passive declare of a predeclared exchange is fine, whatever its name.
        let mut passive = exchange_spec("amq.topic", RoutingKind::Direct);
        passive.passive = true;
        assert!(v.declare_exchange(passive).is_ok());
    }

    #[test]
    fn queue_declare_names_server_named_queues_and_refuses_the_amq_prefix() {
        let v = vhost();
        let a = declare_queue(&v, "");
        let b = declare_queue(&v, "");
        assert!(a.name.starts_with("amq.gen-"), "{}", a.name);
        assert_ne!(a.name, b.name);
        assert_eq!(
            refusal(v.declare_queue(queue_spec("amq.q"), CONN)),
            (
                403,
                "ACCESS_REFUSED - queue name 'amq.q' contains reserved prefix 'amq.*'".into()
            )
        );
        let mut passive = queue_spec("missing");
        passive.passive = true;
        assert_eq!(
            refusal(v.declare_queue(passive, CONN)),
            (404, "NOT_FOUND - no queue 'missing' in vhost '/'".into())
        );
    }

    #[test]
    fn redeclaring_a_queue_checks_equivalence_and_exclusivity() {
        let v = vhost();
        let first = declare_queue(&v, "jobs");
        assert!(Arc::ptr_eq(&first, &declare_queue(&v, "jobs")));
        let mut durable = queue_spec("jobs");
        durable.durable = true;
        assert_eq!(
            refusal(v.declare_queue(durable, CONN)),
            (
                406,
                "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'jobs' in vhost \
                 '/': received 'true' but current is 'false'"
                    .into()
            )
        );
        let mut exclusive = queue_spec("mine");
        exclusive.exclusive = true;
        v.declare_queue(exclusive, CONN).unwrap();
        let mut passive = queue_spec("mine");
        passive.passive = true;
        assert_eq!(refusal(v.declare_queue(passive, OTHER_CONN)).0, 405);
        let mut passive = queue_spec("mine");
        passive.passive = true;
        assert!(v.declare_queue(passive, CONN).is_ok());
    }

    #[test]
    fn the_default_exchange_routes_by_queue_name_and_cannot_be_bound() {
        let v = vhost();
        declare_queue(&v, "jobs");
        assert_eq!(route(&v, "", "jobs"), ["jobs"]);
        assert!(route(&v, "", "other").is_empty());
        assert_eq!(
            refusal(v.bind(to_queue("", "jobs", "x"))),
            (
                403,
                "ACCESS_REFUSED - operation not permitted on the default exchange".into()
            )
        );
    }

    #[test]
    fn bind_needs_both_ends() {
        let v = vhost();
        declare_queue(&v, "jobs");
        assert_eq!(
            refusal(v.bind(to_queue("missing", "jobs", "k"))),
            (404, "NOT_FOUND - no exchange 'missing' in vhost '/'".into())
        );
        assert_eq!(
            refusal(v.bind(to_queue("amq.direct", "nowhere", "k"))),
            (404, "NOT_FOUND - no queue 'nowhere' in vhost '/'".into())
        );
        assert_eq!(
            refusal(v.bind(to_exchange("amq.direct", "nowhere", "k"))),
            (404, "NOT_FOUND - no exchange 'nowhere' in vhost '/'".into())
        );
    }

    #[test]
    fn bound_queues_receive_by_key_once_each_and_unbind_stops_it() {
        let v = vhost();
        declare_exchange(&v, "logs", RoutingKind::Topic);
        declare_queue(&v, "errors");
        declare_queue(&v, "all");
        v.bind(to_queue("logs", "errors", "*.error")).unwrap();
        v.bind(to_queue("logs", "all", "#")).unwrap();
        // Two bindings matching the same key still reach the queue once.
        v.bind(to_queue("logs", "all", "app.*")).unwrap();
        let mut reached = route(&v, "logs", "app.error");
        reached.sort();
        assert_eq!(reached, ["all", "errors"]);
        assert_eq!(route(&v, "logs", "app.info"), ["all"]);

        assert!(v
            .unbind(&to_queue("logs", "errors", "*.error"))
            .unwrap()
            .is_empty());
        assert_eq!(route(&v, "logs", "app.error"), ["all"]);
        // Unbinding what is not bound is fine, as in RabbitMQ.
        assert!(v
            .unbind(&to_queue("logs", "errors", "*.error"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn exchange_to_exchange_bindings_and_alternate_exchanges_route_onwards() {
        let v = vhost();
        declare_exchange(&v, "front", RoutingKind::Direct);
        declare_exchange(&v, "back", RoutingKind::Fanout);
        declare_queue(&v, "behind");
        v.bind(to_exchange("front", "back", "k")).unwrap();
        v.bind(to_queue("back", "behind", "")).unwrap();
        // A cycle back to the start is followed once, not forever.
        v.bind(to_exchange("back", "front", "")).unwrap();
        assert_eq!(route(&v, "front", "k"), ["behind"]);
        assert!(route(&v, "front", "other").is_empty());

        let mut with_ae = exchange_spec("with-ae", RoutingKind::Direct);
        with_ae.arguments.insert(
            "alternate-exchange",
            dwellmq_codec::FieldValue::from("back"),
        );
        v.declare_exchange(with_ae).unwrap();
        declare_queue(&v, "direct-target");
        v.bind(to_queue("with-ae", "direct-target", "hit")).unwrap();
        assert_eq!(route(&v, "with-ae", "hit"), ["direct-target"]);
        // Unroutable on its own: the alternate exchange takes it.
        assert_eq!(route(&v, "with-ae", "miss"), ["behind"]);
    }

    #[test]
    fn an_auto_delete_exchange_goes_with_its_last_binding() {
        let v = vhost();
        let mut spec = exchange_spec("temp", RoutingKind::Direct);
        spec.auto_delete = true;
        v.declare_exchange(spec).unwrap();
        declare_queue(&v, "a");
        declare_queue(&v, "b");
        v.bind(to_queue("temp", "a", "k")).unwrap();
        v.bind(to_queue("temp", "b", "k")).unwrap();
        assert!(v.unbind(&to_queue("temp", "a", "k")).unwrap().is_empty());
        assert!(v.exchange("temp").is_ok());
        // Deleting the queue of the last binding removes the exchange too.
        let deleted = v.delete_queue("b", false, false, None).unwrap();
        assert_eq!(deleted.removed_exchanges, [ShortStr::from("temp")]);
        assert_eq!(refusal(v.exchange("temp")).0, 404);
    }

    #[test]
    fn deleting_a_queue_removes_it_and_its_bindings() {
        let v = vhost();
        declare_exchange(&v, "x", RoutingKind::Fanout);
        let queue = declare_queue(&v, "q");
        v.bind(to_queue("x", "q", "")).unwrap();
        let deleted = v.delete_queue("q", false, false, Some(CONN)).unwrap();
        assert_eq!(deleted.message_count, 0);
        assert_eq!(deleted.consumers, 0);
        assert!(queue.is_deleted());
        assert_eq!(refusal(v.queue("q")).0, 404);
        // A new queue of the same name is not bound by the old queue's bindings.
        declare_queue(&v, "q");
        assert!(route(&v, "x", "").is_empty());
        // Deleting a missing queue succeeds, as in RabbitMQ.
        assert_eq!(
            v.delete_queue("never", false, false, Some(CONN))
                .unwrap()
                .message_count,
            0
        );
    }

    #[test]
    fn another_connections_exclusive_queue_cannot_be_deleted() {
        let v = vhost();
        let mut exclusive = queue_spec("mine");
        exclusive.exclusive = true;
        v.declare_queue(exclusive, CONN).unwrap();
        assert_eq!(
            refusal(v.delete_queue("mine", false, false, Some(OTHER_CONN))).0,
            405
        );
        assert!(v.queue("mine").is_ok());
        assert!(v.delete_queue("mine", false, false, Some(CONN)).is_ok());
    }

    #[test]
    fn deleting_a_queue_instance_leaves_a_newer_queue_of_the_same_name_alone() {
        let v = vhost();
        let old = declare_queue(&v, "q");
        v.delete_queue("q", false, false, None).unwrap();
        let new = declare_queue(&v, "q");
        v.delete_queue_instance(&old).unwrap();
        assert!(Arc::ptr_eq(&v.queue("q").unwrap(), &new));
        v.delete_queue_instance(&new).unwrap();
        assert_eq!(refusal(v.queue("q")).0, 404);
    }

    #[test]
    fn deleting_an_exchange_removes_bindings_to_it_and_orphaned_auto_delete_sources() {
        let v = vhost();
        let mut source = exchange_spec("source", RoutingKind::Fanout);
        source.auto_delete = true;
        v.declare_exchange(source).unwrap();
        let target = declare_exchange(&v, "target", RoutingKind::Fanout);
        v.bind(to_exchange("source", "target", "")).unwrap();
        assert!(v.is_current(&target));
        // if_unused counts the bindings from the exchange (as RabbitMQ does), not those to it.
        declare_queue(&v, "q");
        v.bind(to_queue("target", "q", "")).unwrap();
        assert_eq!(
            refusal(v.delete_exchange("target", true)),
            (
                406,
                "PRECONDITION_FAILED - exchange 'target' in vhost '/' in use".into()
            )
        );
        let removed = v.delete_exchange("target", false).unwrap();
        assert_eq!(
            removed,
            [ShortStr::from("target"), ShortStr::from("source")]
        );
        assert!(!v.is_current(&target));
        assert_eq!(refusal(v.exchange("source")).0, 404);
        // Deleting a missing exchange succeeds; system exchanges cannot be deleted.
        assert!(v.delete_exchange("target", false).unwrap().is_empty());
        assert_eq!(
            refusal(v.delete_exchange("amq.direct", false)),
            (
                403,
                "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not \
                 allowed"
                    .into()
            )
        );
        assert_eq!(refusal(v.delete_exchange("", false)).0, 403);
    }

    #[test]
    fn a_redeclared_exchange_replaces_the_old_one_for_is_current() {
        let v = vhost();
        let old = declare_exchange(&v, "x", RoutingKind::Direct);
        v.delete_exchange("x", false).unwrap();
        let new = declare_exchange(&v, "x", RoutingKind::Direct);
        assert!(!v.is_current(&old));
        assert!(v.is_current(&new));
    }
}
