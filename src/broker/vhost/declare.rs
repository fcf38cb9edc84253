//! `exchange.declare` and `queue.declare`: what is created, what a redeclare must match, and
//! (through `stored.rs`) the write of a durable definition and the take-back of a kept one.

use std::sync::Arc;

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::{arguments, BrokerError, BrokerResult};

use super::{bool_text, default_exchange_refused, VHost};
use crate::broker::exchange::{DeclaredBy, DeclaredType, Exchange, ExchangeKind};
use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::{ConnectionId, Queue};
use crate::broker::stats::QueueTotals;

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

impl VHost {
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
        let kept_bindings = self.write_declared_exchange(&exchange, writes);
        drop(exchanges);
        // As a restore would: its kept bindings whose other end exists are back.
        if let Some(bindings) = kept_bindings {
            self.rebind_kept(bindings, &self.runtime.kept_exchanges);
        }
        Ok(exchange)
    }

    /// A declare of an exchange the restore kept on disk takes it back only as what it was:
    /// the same type, durable. Anything else would replace its stored definition, and the
    /// next restart would find its held messages without their exchange.
    fn check_kept_exchange_equivalence(&self, d: &ExchangeSpec) -> BrokerResult<()> {
        let kept_kind = self
            .runtime
            .kept_exchanges
            .read(&self.name, &d.name, |x| x.kind.clone());
        let Some(kind) = kept_kind else {
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
            QueueTotals::bump(&self.runtime.queues.queue_totals.declared);
            existing.redeclared(self);
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
            Arc::clone(&self.runtime.queues),
            policy.as_ref(),
        ));
        // Its store id is set and its definition submitted before anyone can see it: a message
        // published to it at once is stored under that id, after the definition (and after
        // the messages of a kept queue it takes back).
        let kept_bindings = self.write_declared_queue(&queue, writes);
        queues.insert(name, Arc::clone(&queue));
        drop(queues);
        QueueTotals::bump(&self.runtime.queues.queue_totals.declared);
        QueueTotals::bump(&self.runtime.queues.queue_totals.created);
        queue.start(self);
        if let Some(bindings) = kept_bindings {
            // As a restore would: its kept bindings whose source exists are back, a paging
            // queue's first page is read, what expired meanwhile dies, deadlines are armed.
            self.rebind_kept(bindings, &self.runtime.kept_queues);
            queue.read_first_page(self);
            queue.tick(self);
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
}
