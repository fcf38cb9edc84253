//! What the broker writes to its durable store (`dwellmq-store`, on `--data-dir`): durable
//! exchanges, queues, bindings and policies as they are declared and deleted, and persistent
//! messages on durable queues (`Effect::Persist`/`Forget`, submitted by `queue.rs` under the
//! queue's lock, so a queue's persists and forgets reach the writer in order).
//!
//! Every write is a submission to the store's group-commit writer thread: nothing here waits
//! for a disk, so connection tasks never block on an fsync. A declare-ok (bind-ok, delete-ok...)
//! waits for the commit of the definitions its method wrote (passed down to the writes as
//! [`DefinitionWrites`]), and a persistent message's publisher confirm for its commit, both
//! through a [`PublishTicket`].

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use dwellmq_codec::{FieldTable, FieldValue};
use dwellmq_core::policy::{Policy, PolicyValue};
use dwellmq_core::routing::{Binding, Destination};
use dwellmq_store::{
    BindingDef, DestinationKind, ExchangeDef, Op, PolicyDef, QueueDef, Store, VhostDef,
};

use super::exchange::Exchange;
use super::queue::Queue;
use super::runtime::Runtime;
use super::vhost::VHost;

pub(crate) use super::tickets::{
    submit_counted, AwaitedWrites, DefinitionWrites, PublishTicket, SettledBy,
};

pub(crate) mod kept;
pub(crate) mod kept_exchanges;
pub(crate) mod recover;

/// How the broker opens its store.
pub(crate) struct StoreSettings {
    /// Fault switches (tests only).
    pub(crate) faults: Option<Arc<dwellmq_store::faults::Faults>>,
    /// Runs on the writer thread after each batch's completions (confirms go out from there).
    pub(crate) after_batch: fn(),
    /// Told when the writer's alarms change (the broker's disk alarm).
    pub(crate) alarm: dwellmq_store::AlarmHook,
    /// The backlog alarm's high mark; it clears at half.
    pub(crate) backlog_bytes: u64,
    /// redb's page cache.
    pub(crate) cache_bytes: u64,
}

/// Opens the store in `dir` (created if absent): refused if another broker holds it, or if
/// the database file is damaged or not a dwellmq store (the error names the file).
pub(crate) fn open(
    dir: &std::path::Path,
    settings: StoreSettings,
) -> Result<Store, dwellmq_store::StoreError> {
    let mut options = match settings.faults {
        Some(faults) => dwellmq_store::faults::options(faults),
        None => dwellmq_store::StoreOptions::default(),
    };
    options.after_batch = Some(Arc::new(settings.after_batch));
    options.on_alarm = Some(settings.alarm);
    options.backlog_high = settings.backlog_bytes;
    options.backlog_low = settings.backlog_bytes / 2;
    options.cache_bytes = usize::try_from(settings.cache_bytes).unwrap_or(usize::MAX);
    Store::open_with(dir, options)
}

/// The store, unless the broker is in memory or is restoring what the store holds (then
/// nothing is written back).
fn store(runtime: &Runtime) -> Option<&Arc<Store>> {
    if runtime.restoring.load(Ordering::Acquire) {
        return None;
    }
    runtime.queues.store.as_ref()
}

/// Submits definition changes; a failure is logged and reported to the method that made
/// them, if it waits.
fn write(store: &Store, ops: Vec<Op>, writes: DefinitionWrites<'_>) {
    write_or_undo(store, ops, writes, || {});
}

/// As [`write`]; if the commit fails, `undo` takes the change back in memory first (before
/// the method's reply reports the failure), as if it never happened: nothing lives on in
/// memory that the next restart would not have, and a redeclare writes it again.
fn write_or_undo(
    store: &Store,
    ops: Vec<Op>,
    writes: DefinitionWrites<'_>,
    undo: impl FnOnce() + Send + 'static,
) {
    submit_counted(store, ops, writes.ticket(), move |outcome| {
        if let Err(e) = outcome {
            tracing::error!(error = %e, "writing a durable definition failed; it is taken back");
            undo();
        }
    });
}

/// A vhost was added at runtime (configured ones are not written: the config brings them).
/// If writing it fails, `undo` deletes it again.
pub(crate) fn vhost_added(
    runtime: &Runtime,
    name: &str,
    writes: DefinitionWrites<'_>,
    undo: impl FnOnce() + Send + 'static,
) {
    let Some(store) = store(runtime) else { return };
    write_or_undo(
        store,
        vec![Op::PutVhost(VhostDef {
            name: name.into(),
            metadata: Vec::new(),
        })],
        writes,
        undo,
    );
}

/// A vhost was deleted: the store drops every definition and message under it.
pub(crate) fn vhost_deleted(runtime: &Runtime, name: &str, writes: DefinitionWrites<'_>) {
    let Some(store) = store(runtime) else { return };
    write(store, vec![Op::DeleteVhost { name: name.into() }], writes);
}

/// A durable exchange was created in `vhost` (`home`): if writing it fails, it is deleted
/// again, as if never declared. If the restore kept an exchange of that vhost and name on disk,
/// the declare takes it back: returns the kept bindings from and to it (the caller binds them
/// again once the exchange is in its vhost), and once its definition is committed it takes
/// the messages the kept exchange holds on disk. If that write fails, the exchange leaves
/// memory only, and what is stored stays kept.
pub(crate) fn exchange_declared(
    runtime: &Runtime,
    vhost: &str,
    home: &Weak<VHost>,
    exchange: &Arc<Exchange>,
    writes: DefinitionWrites<'_>,
) -> Option<Vec<(BindingDef, String)>> {
    let store = store(runtime)?;
    if !exchange.durable {
        return None;
    }
    let retaken = runtime.kept_exchanges.take(vhost, &exchange.name);
    let bindings = retaken.as_ref().map(|kept| kept.bindings.clone());
    if let Some(kept) = &retaken {
        tracing::info!(
            vhost, exchange = %exchange.name, held = kept.held.0,
            "a declare takes back an exchange the restore kept"
        );
    }
    let (home, exchange) = (Weak::clone(home), Arc::clone(exchange));
    let ops = vec![Op::PutExchange(ExchangeDef {
        vhost: vhost.into(),
        name: exchange.name.to_string(),
        kind: exchange.kind.type_name().into(),
        auto_delete: exchange.auto_delete,
        internal: exchange.internal,
        arguments: exchange.arguments.to_encoded(),
    })];
    submit_counted(store, ops, writes.ticket(), move |outcome| {
        let Some(vhost) = home.upgrade() else { return };
        match (outcome, retaken) {
            (Ok(_), None) => {}
            (Ok(_), Some(kept)) => {
                // Only now: had the write failed, the exchange's deletion would have dropped
                // them with its own.
                if vhost.is_current(&exchange) {
                    let now_ms = vhost.runtime().queues.clock.now_ms();
                    vhost
                        .held()
                        .reattach_kept(&vhost, &exchange, kept.held, now_ms);
                }
            }
            (Err(e), None) => {
                tracing::error!(error = %e, "writing a durable definition failed; it is taken back");
                vhost.undo_exchange_declare(&exchange);
            }
            (Err(e), Some(kept)) => {
                tracing::error!(error = %e, "writing a durable definition failed; it is taken back");
                vhost.undo_exchange_reattach(&exchange);
                vhost
                    .runtime()
                    .kept_exchanges
                    .put_back(&vhost.name, &exchange.name, kept);
            }
        }
    });
    bindings
}

/// Exchanges were deleted (with the bindings whose source they were).
pub(crate) fn exchanges_deleted(
    runtime: &Runtime,
    vhost: &str,
    names: &[impl AsRef<str>],
    writes: DefinitionWrites<'_>,
) {
    let Some(store) = store(runtime) else { return };
    if names.is_empty() {
        return;
    }
    let ops = names
        .iter()
        .map(|name| Op::DeleteExchange {
            vhost: vhost.into(),
            name: name.as_ref().into(),
        })
        .collect();
    write(store, ops, writes);
}

/// A queue was created in `vhost`: a durable, non-exclusive one is written with a fresh id
/// (its messages are stored under that id), or with the id of a queue of its vhost and name
/// that the restore kept on disk, whose messages it takes back (returns the kept bindings to
/// it then: the caller binds them again and ticks the queue once it is in its vhost). If
/// writing it fails, it is deleted again, with whatever was stored under a fresh id
/// meanwhile; a kept queue's messages and bindings stay kept.
pub(crate) fn queue_declared(
    runtime: &Runtime,
    vhost: &VHost,
    queue: &Arc<Queue>,
    writes: DefinitionWrites<'_>,
) -> Option<Vec<(BindingDef, String)>> {
    let store = store(runtime)?;
    if !queue.durable || queue.exclusive_owner.is_some() {
        return None;
    }
    let mut reattached = None;
    let id =
        *queue.store_id.get_or_init(
            || match runtime.kept_queues.take(&queue.vhost, &queue.name) {
                Some(kept) => {
                    let id = kept.queue.id;
                    reattached = Some(kept);
                    id
                }
                None => store.allocate_queue_id(),
            },
        );
    if let Some(kept) = &reattached {
        match recover::load_kept_messages(vhost, &runtime.queues.memory, store, queue, kept.queue) {
            Ok(count) => tracing::info!(
                vhost = %queue.vhost, queue = %queue.name, id, messages = count,
                "a declare took back a queue the restore kept"
            ),
            Err(e) => tracing::error!(
                vhost = %queue.vhost, queue = %queue.name, id, error = %e,
                "reading a kept queue's messages failed"
            ),
        }
    }
    let bindings = reattached.as_ref().map(|kept| kept.bindings.clone());
    let (undo_in, undo_queue) = (Weak::clone(vhost.me()), Arc::clone(queue));
    let ops = vec![Op::PutQueue(queue_def(queue, id))];
    write_or_undo(store, ops, writes, move || {
        let Some(vhost) = undo_in.upgrade() else {
            return;
        };
        match reattached {
            // Its stored definition and messages stay as the restore kept them.
            Some(retaken) => {
                vhost.undo_queue_reattach(&undo_queue);
                vhost
                    .runtime()
                    .kept_queues
                    .put_back(&undo_queue.vhost, &undo_queue.name, retaken);
            }
            None => vhost.undo_queue_declare(&undo_queue),
        }
    });
    bindings
}

fn queue_def(queue: &Queue, id: u64) -> QueueDef {
    QueueDef {
        vhost: queue.vhost.to_string(),
        name: queue.name.to_string(),
        id,
        auto_delete: queue.auto_delete,
        arguments: queue.arguments.to_encoded(),
    }
}

/// A stored queue is being deleted: it goes with its messages and the bindings leading to
/// it (called before the vhost drops those, so that a queue declared again under the same
/// name does not get them back after a restart).
pub(crate) fn queue_deleted(
    runtime: &Runtime,
    vhost: &VHost,
    queue: &Queue,
    writes: DefinitionWrites<'_>,
) {
    let Some(store) = store(runtime) else { return };
    let Some(&id) = queue.store_id.get() else {
        return;
    };
    let destination = Destination::Queue(queue.name.clone());
    let mut ops = Vec::new();
    for exchange in vhost.exchanges() {
        for binding in exchange.bindings.read().iter() {
            if binding.destination == destination {
                ops.push(Op::DeleteBinding(binding_def(&vhost.name, binding)));
            }
        }
    }
    ops.push(Op::DeleteQueue {
        vhost: vhost.name.to_string(),
        name: queue.name.to_string(),
        id,
    });
    write(store, ops, writes);
}

fn binding_def(vhost: &str, binding: &Binding) -> BindingDef {
    let (destination_kind, destination) = match &binding.destination {
        Destination::Queue(name) => (DestinationKind::Queue, name.to_string()),
        Destination::Exchange(name) => (DestinationKind::Exchange, name.to_string()),
    };
    BindingDef {
        vhost: vhost.into(),
        source: binding.source.to_string(),
        destination_kind,
        destination,
        routing_key: binding.routing_key.to_string(),
        arguments: binding.arguments.to_encoded(),
    }
}

/// A binding was added: written when both ends are durable (RabbitMQ's rule). If writing a
/// `new` one fails, it is removed from `source` again (one that was there before stays: it
/// was written before).
pub(crate) fn bound(
    runtime: &Runtime,
    vhost: &str,
    source: &Arc<Exchange>,
    binding: &Binding,
    durable_destination: bool,
    new: bool,
    writes: DefinitionWrites<'_>,
) {
    let Some(store) = store(runtime) else { return };
    if !(source.durable && durable_destination) {
        return;
    }
    let (undo_source, undo_binding) = (Arc::clone(source), binding.clone());
    let ops = vec![Op::PutBinding(binding_def(vhost, binding))];
    write_or_undo(store, ops, writes, move || {
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

/// A binding was removed (removing one that was never stored is harmless).
pub(crate) fn unbound(
    runtime: &Runtime,
    vhost: &str,
    binding: &Binding,
    writes: DefinitionWrites<'_>,
) {
    let Some(store) = store(runtime) else { return };
    let ops = vec![Op::DeleteBinding(binding_def(vhost, binding))];
    write(store, ops, writes);
}

/// A policy was set in `vhost` (`home`), replacing `replaced` if there was one of its name:
/// if writing it fails, the replaced one (or none) is in effect again.
pub(crate) fn policy_set(
    runtime: &Runtime,
    vhost: &str,
    home: &Weak<VHost>,
    policy: &Policy,
    replaced: Option<Policy>,
    writes: DefinitionWrites<'_>,
) {
    let Some(store) = store(runtime) else { return };
    let mut definition = FieldTable::new();
    for (key, value) in policy.definition.entries() {
        let value = match value {
            PolicyValue::Integer(n) => FieldValue::I64(n),
            PolicyValue::Text(t) => FieldValue::LongStr(t.into_bytes().into()),
        };
        definition.insert(key, value);
    }
    let (undo_in, undo_policy) = (Weak::clone(home), policy.clone());
    write_or_undo(
        store,
        vec![Op::PutPolicy(PolicyDef {
            vhost: vhost.into(),
            name: policy.name.clone(),
            pattern: policy.pattern.clone(),
            apply_to: policy.apply_to.name().into(),
            priority: policy.priority,
            definition: definition.to_encoded(),
        })],
        writes,
        move || {
            if let Some(vhost) = undo_in.upgrade() {
                vhost.undo_policy_set(&undo_policy, replaced);
            }
        },
    );
}

/// A policy was removed.
pub(crate) fn policy_cleared(
    runtime: &Runtime,
    vhost: &str,
    name: &str,
    writes: DefinitionWrites<'_>,
) {
    let Some(store) = store(runtime) else { return };
    write(
        store,
        vec![Op::DeletePolicy {
            vhost: vhost.into(),
            name: name.into(),
        }],
        writes,
    );
}
