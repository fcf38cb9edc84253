//! What a declare writes of a durable definition, and what the restore kept that a declare
//! takes back: a kept queue's store id and messages, a kept exchange's held messages (once its
//! definition is committed), the kept bindings of either. A write that fails takes the
//! declare back, by the one delete cascade (`delete.rs`): a new object is deleted as if never
//! declared; one that took over a kept definition leaves memory only and stays kept.

use std::sync::Arc;

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::routing::{Binding, Destination};
use dwellmq_store::{BindingDef, DestinationKind, ExchangeDef, QueueDef};

use super::delete::Stored;
use super::VHost;
use crate::broker::exchange::Exchange;
use crate::broker::persist::kept::{Kept, KeptBinding};
use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::Queue;

impl VHost {
    /// Writes a created exchange's definition if it is durable (reported to `writes`). If the
    /// restore kept an exchange of this vhost and name, the declare takes it back: returns the
    /// kept bindings from and to it (the caller binds them again once the exchange is in the
    /// vhost), and once the definition is committed the exchange takes the messages the kept
    /// one holds on disk.
    pub(super) fn write_declared_exchange(
        &self,
        exchange: &Arc<Exchange>,
        writes: DefinitionWrites<'_>,
    ) -> Option<Vec<KeptBinding>> {
        let definitions = &self.runtime.definitions;
        definitions.writing()?;
        if !exchange.durable {
            return None;
        }
        let retaken = self.runtime.kept_exchanges.take(&self.name, &exchange.name);
        let bindings = retaken.as_ref().map(|kept| kept.bindings.clone());
        if let Some(kept) = &retaken {
            tracing::info!(
                vhost = %self.name, exchange = %exchange.name, held = kept.kept.held.0,
                "a declare takes back an exchange the restore kept"
            );
        }
        let def = ExchangeDef {
            vhost: self.name.to_string(),
            name: exchange.name.to_string(),
            kind: exchange.kind.type_name().into(),
            auto_delete: exchange.auto_delete,
            internal: exchange.internal,
            arguments: exchange.arguments.to_encoded(),
            declared_by: exchange.declared_by.stored_name(),
        };
        let (home, exchange) = (self.me.clone(), Arc::clone(exchange));
        definitions.exchange_declared(def, writes, move |committed| {
            let Some(vhost) = home.upgrade() else { return };
            match (committed, retaken) {
                (true, None) => {}
                // Only now: had the write failed, the exchange's deletion would have dropped
                // them with its own.
                (true, Some(kept)) => {
                    if vhost.is_current(&exchange) {
                        let now_ms = vhost.runtime.queues.clock.now_ms();
                        vhost
                            .held
                            .reattach_kept(&vhost, &exchange, kept.kept.held, now_ms);
                    }
                }
                (false, None) => vhost.undo_exchange_declare(&exchange),
                (false, Some(kept)) => {
                    vhost.undo_exchange_reattach(&exchange);
                    vhost
                        .runtime
                        .kept_exchanges
                        .put_back(&vhost.name, &exchange.name, kept);
                }
            }
        });
        bindings
    }

    /// Writes a created queue's definition if it is durable and not exclusive, with a fresh
    /// store id (its messages are stored under it), or with the id of a queue of this vhost and
    /// name that the restore kept, whose messages it takes back (returns the kept bindings to it
    /// then: the caller binds them again and ticks the queue once it is in the vhost). If the
    /// write fails, the declare is taken back.
    pub(super) fn write_declared_queue(
        &self,
        queue: &Arc<Queue>,
        writes: DefinitionWrites<'_>,
    ) -> Option<Vec<KeptBinding>> {
        let store = self.runtime.definitions.writing()?;
        if !queue.durable || queue.exclusive_owner.is_some() {
            return None;
        }
        let mut retaken = None;
        let id = *queue.store_id.get_or_init(|| {
            match self.runtime.kept_queues.take(&self.name, &queue.name) {
                Some(kept) => {
                    let id = kept.kept.id;
                    retaken = Some(kept);
                    id
                }
                None => store.allocate_queue_id(),
            }
        });
        if let Some(kept) = &retaken {
            // Under the queue map's write lock (the queue is not visible yet): loading only
            // arms ticks and notes kept dead letters; what expired dies at the tick the caller
            // runs once the queue is in the vhost.
            let loaded = store
                .snapshot()
                .and_then(|snapshot| queue.load_stored(self, &snapshot, id, kept.kept.next_seq));
            match loaded {
                Ok(count) => tracing::info!(
                    vhost = %self.name, queue = %queue.name, id, messages = count,
                    "a declare took back a queue the restore kept"
                ),
                Err(e) => tracing::error!(
                    vhost = %self.name, queue = %queue.name, id, error = %e,
                    "reading a kept queue's messages failed"
                ),
            }
        }
        let bindings = retaken.as_ref().map(|kept| kept.bindings.clone());
        let def = QueueDef {
            vhost: self.name.to_string(),
            name: queue.name.to_string(),
            id,
            auto_delete: queue.auto_delete,
            arguments: queue.arguments.to_encoded(),
        };
        let (home, undone) = (self.me.clone(), Arc::clone(queue));
        self.runtime
            .definitions
            .queue_declared(def, writes, move || {
                let Some(vhost) = home.upgrade() else { return };
                match retaken {
                    // Its stored definition and messages stay as the restore kept them.
                    Some(retaken) => {
                        vhost.undo_queue_reattach(&undone);
                        vhost
                            .runtime
                            .kept_queues
                            .put_back(&vhost.name, &undone.name, retaken);
                    }
                    None => vhost.undo_queue_declare(&undone),
                }
            });
        bindings
    }

    /// Binds again the kept bindings of a definition a declare took back (from `registry`),
    /// as a restore would: those whose other end exists.
    pub(super) fn rebind_kept<T>(&self, bindings: Vec<KeptBinding>, registry: &Kept<T>) {
        for (binding, reported) in bindings {
            match self.bind_stored(&binding) {
                Ok(()) => registry.binding_reattached(reported),
                Err(why) => tracing::info!(%reported, %why, "a kept binding stays kept"),
            }
        }
    }

    /// Binds `b`, a stored binding, again (its write rewrites the stored record); says why
    /// not if an end is missing or its arguments do not read.
    pub(crate) fn bind_stored(&self, b: &BindingDef) -> Result<(), String> {
        let destination = match b.destination_kind {
            DestinationKind::Queue => {
                self.queue(&b.destination).map_err(|e| e.to_string())?;
                Destination::Queue(ShortStr::from(b.destination.as_str()))
            }
            DestinationKind::Exchange => {
                self.exchange(&b.destination).map_err(|e| e.to_string())?;
                Destination::Exchange(ShortStr::from(b.destination.as_str()))
            }
        };
        self.exchange(&b.source).map_err(|e| e.to_string())?;
        let arguments = FieldTable::from_encoded(&b.arguments).ok_or("malformed arguments")?;
        let binding = Binding {
            source: ShortStr::from(b.source.as_str()),
            destination,
            routing_key: ShortStr::from(b.routing_key.as_str()),
            arguments,
        };
        self.bind_reporting(binding, DefinitionWrites::UNAWAITED)
            .map_err(|e| e.to_string())
    }

    /// Takes back a declare whose definition could not be written: this exchange (not a
    /// namesake declared since) is deleted, as if the declare never happened.
    fn undo_exchange_declare(&self, exchange: &Arc<Exchange>) {
        if !self.is_current(exchange) {
            return;
        }
        tracing::warn!(
            vhost = %self.name,
            exchange = %exchange.name,
            "the exchange's definition could not be written: the declare is taken back"
        );
        let _ = self.remove_exchange(
            exchange,
            false,
            Stored::Deleted(DefinitionWrites::UNAWAITED),
        );
    }

    /// Takes back a declare that took over a kept exchange whose definition could not be
    /// written: gone from memory with what it held since, while its stored definition,
    /// bindings and held messages stay as the restore kept them.
    fn undo_exchange_reattach(&self, exchange: &Arc<Exchange>) {
        tracing::warn!(
            vhost = %self.name,
            exchange = %exchange.name,
            "the exchange's definition could not be written: the declare is taken back, what is stored stays kept"
        );
        let _ = self.remove_exchange(exchange, false, Stored::Kept);
    }

    /// Takes back a declare whose definition could not be written: this queue (not a namesake
    /// declared since) is deleted, with what was stored under its id meanwhile.
    fn undo_queue_declare(&self, queue: &Arc<Queue>) {
        tracing::warn!(
            vhost = %self.name,
            queue = %queue.name,
            "the queue's definition could not be written: the declare is taken back"
        );
        self.remove_queue(queue, Stored::Deleted(DefinitionWrites::UNAWAITED));
    }

    /// Takes back a declare that took over a kept queue whose definition could not be written:
    /// gone from memory, while its stored definition, bindings and messages stay as the
    /// restore kept them.
    fn undo_queue_reattach(&self, queue: &Arc<Queue>) {
        tracing::warn!(
            vhost = %self.name,
            queue = %queue.name,
            "the queue's definition could not be written: the declare is taken back, what is stored stays kept"
        );
        self.remove_queue(queue, Stored::Kept);
    }
}
