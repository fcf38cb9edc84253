//! `queue.bind`, `exchange.bind` and their unbinds; a binding added retries the dead letters
//! that source queues keep because no queue took them.

use std::sync::{Arc, Weak};

use dwellmq_codec::ShortStr;
use dwellmq_core::routing::{Binding, Destination, RoutingKind};
use dwellmq_core::BrokerResult;

use super::delete::Stored;
use super::{check_not_default, VHost};
use crate::broker::exchange::Exchange;
use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::Queue;

impl VHost {
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
            self.write_bound(&source, &binding, durable_destination, new, writes);
        };
        match &destination {
            Destination::Queue(name) => {
                let queues = self.queues.read();
                let queue = queues.get(name).ok_or_else(|| self.no_queue(name))?;
                // A test may stop the bind here, found and not yet added (see `TestHooks`).
                self.runtime.queues.hooks.binds.pass();
                add(queue.store_id.get().is_some());
            }
            Destination::Exchange(name) => {
                let exchanges = self.exchanges.read();
                let exchange = exchanges.get(name).ok_or_else(|| self.no_exchange(name))?;
                self.runtime.queues.hooks.binds.pass();
                add(exchange.durable);
            }
        }
        self.retry_kept_dead_letters();
        Ok(())
    }

    /// A binding was added: written when both ends are durable (RabbitMQ's rule). If writing a
    /// `new` one fails, it is removed from `source` again (one that was there before stays: it
    /// was written before).
    fn write_bound(
        &self,
        source: &Arc<Exchange>,
        binding: &Binding,
        durable_destination: bool,
        new: bool,
        writes: DefinitionWrites<'_>,
    ) {
        if !(source.durable && durable_destination) {
            return;
        }
        let (undo_source, undo_binding) = (Arc::clone(source), binding.clone());
        self.runtime
            .definitions
            .bound(&self.name, binding, writes, move || {
                if new {
                    tracing::warn!(
                        source = %undo_binding.source,
                        destination = ?undo_binding.destination,
                        "the binding could not be written: it is taken back"
                    );
                    undo_source.bindings.write().remove(&undo_binding);
                }
            });
    }

    /// A binding was added: dead-lettered messages that their source queues keep because no
    /// queue took them (at-least-once dead-lettering) may route now, so they do not wait for
    /// their timer.
    fn retry_kept_dead_letters(&self) {
        if self.runtime.definitions.is_restoring() {
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
            queue.retry_dead_letters(self, true);
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
        self.runtime
            .definitions
            .unbound(&self.name, binding, writes);
        if !(now_empty && source.auto_delete) {
            return Ok(Vec::new());
        }
        // Only this instance: a concurrent redeclare may already own the name.
        self.remove_exchange(&source, false, Stored::Deleted(writes))
    }
}
