//! The one delete cascade: how a queue or an exchange leaves its vhost with everything that
//! goes with it. Every deletion takes this way: `queue.delete` and `exchange.delete` (AMQP and
//! HTTP), auto-delete (a queue's last consumer, an exchange's last binding), exclusive queues
//! of a closing connection, `x-expires` (`effects::expiry`), a vhost's deletion, and the
//! take-back of a declare whose write failed (`stored.rs`).
//!
//! A queue: it leaves the map and is marked deleted (it takes no message after this, so the
//! store's removal of it comes after every message it stored), its definition and the bindings
//! to it leave the store, the bindings to it leave their sources, auto-delete exchanges that so
//! lose their last binding go (and, in turn, those that lose theirs to them), in the store too,
//! its consumers are told (`basic.cancel`), and what the removed delayed exchanges held goes.
//! An exchange: the same from "leaves the map", its incarnation retired (nothing it held is
//! released any more). Nothing here needs a caller to remember a step.

use std::collections::HashMap;
use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::routing::Destination;
use dwellmq_core::{BrokerError, BrokerResult};

use super::{default_exchange_refused, VHost};
use crate::broker::exchange::Exchange;
use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::consumer::notify_cancelled;
use crate::broker::queue::{ConnectionId, Queue};
use crate::broker::stats::QueueTotals;

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

impl DeletedQueue {
    /// Nothing was deleted (a missing queue; RabbitMQ's deletes succeed then).
    fn none() -> Self {
        DeletedQueue {
            message_count: 0,
            consumers: 0,
            removed_exchanges: Vec::new(),
        }
    }
}

/// What a deletion does in the store.
#[derive(Clone, Copy)]
pub(super) enum Stored<'a> {
    /// The definition goes (with the bindings to it), its writes reported to the method.
    Deleted(DefinitionWrites<'a>),
    /// Taking back a declare that took over a kept definition: that stays stored as the
    /// restore kept it, bindings included; the auto-delete exchanges the cascade removes go.
    Kept,
}

impl Stored<'_> {
    fn writes(&self) -> DefinitionWrites<'_> {
        match self {
            Stored::Deleted(writes) => *writes,
            Stored::Kept => DefinitionWrites::UNAWAITED,
        }
    }
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

impl VHost {
    /// `queue.delete` by name (AMQP and HTTP): `if_unused` and `if_empty` as the method asks,
    /// `connection` checks exclusivity. Deleting a missing queue succeeds.
    pub(crate) fn delete_queue_reporting(
        &self,
        name: &str,
        if_unused: bool,
        if_empty: bool,
        connection: Option<ConnectionId>,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<DeletedQueue> {
        let Some(queue) = self.queues.read().get(name).cloned() else {
            return Ok(DeletedQueue::none());
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
        if if_empty && queue.message_count(self) > 0 {
            return Err(BrokerError::PreconditionFailed(format!(
                "queue '{}' in vhost '{}' not empty",
                name, self.name
            )));
        }
        Ok(self
            .remove_queue(&queue, Stored::Deleted(writes))
            .unwrap_or_else(DeletedQueue::none))
    }

    /// Deletes exactly this queue (auto-delete, exclusive cleanup, `x-expires`): if its name
    /// now belongs to another queue, that one is left alone.
    pub(crate) fn delete_queue_instance_reporting(
        &self,
        queue: &Arc<Queue>,
        writes: DefinitionWrites<'_>,
    ) -> BrokerResult<DeletedQueue> {
        Ok(self
            .remove_queue(queue, Stored::Deleted(writes))
            .unwrap_or_else(DeletedQueue::none))
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
        let Some(exchange) = self.exchanges.read().get(name).cloned() else {
            return Ok(Vec::new());
        };
        self.remove_exchange(&exchange, if_unused, Stored::Deleted(writes))
    }

    /// The cascade for a queue (see the module's text); `None` if `queue` is not this vhost's
    /// queue of its name any more (deleted, or replaced by a namesake).
    pub(super) fn remove_queue(
        &self,
        queue: &Arc<Queue>,
        stored: Stored<'_>,
    ) -> Option<DeletedQueue> {
        {
            let mut queues = self.queues.write();
            if !queues
                .get(&queue.name)
                .is_some_and(|current| Arc::ptr_eq(current, queue))
            {
                return None;
            }
            queues.remove(&queue.name);
        }
        QueueTotals::bump(&self.runtime.queues.queue_totals.deleted);
        let (message_count, consumers) = queue.mark_deleted();
        if let (Stored::Deleted(writes), Some(&id)) = (stored, queue.store_id.get()) {
            self.write_queue_deleted(queue, id, writes);
        }
        let mut orphaned = Vec::new();
        remove_bindings_to(
            &mut self.exchanges.write(),
            Destination::Queue(queue.name.clone()),
            &mut orphaned,
        );
        // A durable auto-delete exchange that lost its last binding here must not come back
        // after a restart.
        let definitions = &self.runtime.definitions;
        definitions.exchanges_deleted(&self.name, &orphaned, stored.writes());
        notify_cancelled(&consumers);
        self.forget_held(&orphaned);
        Some(DeletedQueue {
            message_count,
            consumers: consumers.len(),
            removed_exchanges: orphaned,
        })
    }

    /// The stored queue goes with its messages and the bindings to it (written before the
    /// vhost drops those, so that a queue declared again under its name does not get them
    /// back after a restart).
    fn write_queue_deleted(&self, queue: &Queue, id: u64, writes: DefinitionWrites<'_>) {
        let destination = Destination::Queue(queue.name.clone());
        let mut bindings = Vec::new();
        for exchange in self.exchanges() {
            for binding in exchange.bindings.read().iter() {
                if binding.destination == destination {
                    bindings.push(binding.clone());
                }
            }
        }
        let definitions = &self.runtime.definitions;
        definitions.queue_deleted(&self.name, &queue.name, id, &bindings, writes);
    }

    /// The cascade for an exchange (see the module's text), `PRECONDITION_FAILED` if
    /// `if_unused` and it is the source of a binding. Returns the exchanges removed: this one
    /// (none if it is not this vhost's exchange of its name any more), then the auto-delete
    /// ones it orphaned.
    pub(super) fn remove_exchange(
        &self,
        exchange: &Arc<Exchange>,
        if_unused: bool,
        stored: Stored<'_>,
    ) -> BrokerResult<Vec<ShortStr>> {
        let mut exchanges = self.exchanges.write();
        if !exchanges
            .get(exchange.name.as_str())
            .is_some_and(|current| Arc::ptr_eq(current, exchange))
        {
            return Ok(Vec::new());
        }
        if if_unused && !exchange.bindings.read().is_empty() {
            return Err(BrokerError::PreconditionFailed(format!(
                "exchange '{}' in vhost '{}' in use",
                exchange.name, self.name
            )));
        }
        exchanges.remove(exchange.name.as_str());
        exchange.retire();
        let mut removed = vec![exchange.name.clone()];
        remove_bindings_to(
            &mut exchanges,
            Destination::Exchange(exchange.name.clone()),
            &mut removed,
        );
        // Written under the table's lock: the store sees deletions in the order memory does.
        let written = match stored {
            Stored::Deleted(_) => &removed[..],
            Stored::Kept => &removed[1..],
        };
        let definitions = &self.runtime.definitions;
        definitions.exchanges_deleted(&self.name, written, stored.writes());
        drop(exchanges);
        self.forget_held(&removed);
        Ok(removed)
    }

    /// The messages held by the removed delayed exchanges go with them.
    fn forget_held(&self, removed: &[ShortStr]) {
        for name in removed {
            self.held.forget_exchange(&self.name, name);
        }
    }

    /// The vhost itself is being deleted (it is out of the broker's map): every queue goes
    /// with its messages, every exchange with what it held (the predeclared ones are retired
    /// only: the store drops the whole vhost after this). Writes report to `writes`.
    pub(crate) fn tear_down(&self, writes: DefinitionWrites<'_>) {
        for queue in self.queues() {
            self.remove_queue(&queue, Stored::Deleted(writes));
        }
        for exchange in self.exchanges() {
            if exchange.name.is_empty() || exchange.name.starts_with("amq.") {
                exchange.retire();
                self.held.forget_exchange(&self.name, &exchange.name);
            } else {
                let _ = self.remove_exchange(&exchange, false, Stored::Deleted(writes));
            }
        }
    }
}
