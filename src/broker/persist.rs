//! What the broker writes of its definitions to the durable store (`dwellmq-store`, on
//! `--data-dir`): vhosts, durable exchanges, queues, bindings and policies as they are
//! declared and deleted. This module knows the store's records, not the broker's objects: the
//! vhost hands it names and definitions, and says how a failed write is taken back. (A queue
//! writes its own messages; `tickets` says who waits for a write.)
//!
//! Every write is a submission to the store's group-commit writer thread: nothing here waits
//! for a disk, so connection tasks never block on an fsync. A declare-ok (bind-ok, delete-ok...)
//! waits for the commit of the definitions its method wrote (passed down to the writes as
//! [`DefinitionWrites`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dwellmq_codec::{FieldTable, FieldValue};
use dwellmq_core::policy::{Policy, PolicyValue};
use dwellmq_core::routing::{Binding, Destination};
use dwellmq_store::{
    BindingDef, DestinationKind, ExchangeDef, Op, PolicyDef, QueueDef, Store, VhostDef,
};

pub(crate) use super::tickets::{
    submit_counted, AwaitedWrites, DefinitionWrites, PublishTicket, SettledBy,
};

pub(crate) mod kept;

/// Messages that fell due while the broker was down (or while their exchange was kept on
/// disk) are released at most this many per second, oldest first, so that a long outage does
/// not flood consumers at start.
pub(crate) const CATCH_UP_PER_SECOND: u64 = 10_000;

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

/// Where the broker's definitions are written: the store, unless the broker is in memory.
pub(crate) struct Definitions {
    store: Option<Arc<Store>>,
    /// Set while the broker restores what the store holds at start: nothing is written back.
    restoring: AtomicBool,
}

impl Definitions {
    pub(crate) fn new(store: Option<Arc<Store>>) -> Self {
        Definitions {
            store,
            restoring: AtomicBool::new(false),
        }
    }

    /// A restore begins (`true`) or ends: meanwhile nothing is written.
    pub(crate) fn set_restoring(&self, restoring: bool) {
        self.restoring.store(restoring, Ordering::Release);
    }

    /// Whether a restore is under way.
    pub(crate) fn is_restoring(&self) -> bool {
        self.restoring.load(Ordering::Acquire)
    }

    /// The store, unless the broker is in memory or is restoring what the store holds (then
    /// nothing is written back).
    pub(crate) fn writing(&self) -> Option<&Arc<Store>> {
        if self.is_restoring() {
            return None;
        }
        self.store.as_ref()
    }

    /// A vhost was added at runtime (configured ones are not written: the config brings them).
    /// If writing it fails, `undo` deletes it again.
    pub(crate) fn vhost_added(
        &self,
        name: &str,
        writes: DefinitionWrites<'_>,
        undo: impl FnOnce() + Send + 'static,
    ) {
        let Some(store) = self.writing() else { return };
        let ops = vec![Op::PutVhost(VhostDef {
            name: name.into(),
            metadata: Vec::new(),
        })];
        write_or_undo(store, ops, writes, undo);
    }

    /// A vhost was deleted: the store drops every definition and message under it.
    pub(crate) fn vhost_deleted(&self, name: &str, writes: DefinitionWrites<'_>) {
        let Some(store) = self.writing() else { return };
        write(store, vec![Op::DeleteVhost { name: name.into() }], writes);
    }

    /// A durable exchange was created; `then` hears whether its definition was committed
    /// (a failure is logged first). False if nothing is written.
    pub(crate) fn exchange_declared(
        &self,
        def: ExchangeDef,
        writes: DefinitionWrites<'_>,
        then: impl FnOnce(bool) + Send + 'static,
    ) -> bool {
        let Some(store) = self.writing() else {
            return false;
        };
        submit_counted(
            store,
            vec![Op::PutExchange(def)],
            writes.ticket(),
            move |outcome| {
                if let Err(e) = outcome {
                    tracing::error!(error = %e, "writing a durable definition failed; it is taken back");
                }
                then(outcome.is_ok());
            },
        );
        true
    }

    /// Exchanges of `vhost` were deleted (with the bindings whose source they were).
    pub(crate) fn exchanges_deleted(
        &self,
        vhost: &str,
        names: &[impl AsRef<str>],
        writes: DefinitionWrites<'_>,
    ) {
        let Some(store) = self.writing() else { return };
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

    /// A durable queue was created (`def` carries its store id); if writing it fails, `undo`
    /// takes the declare back.
    pub(crate) fn queue_declared(
        &self,
        def: QueueDef,
        writes: DefinitionWrites<'_>,
        undo: impl FnOnce() + Send + 'static,
    ) {
        let Some(store) = self.writing() else { return };
        write_or_undo(store, vec![Op::PutQueue(def)], writes, undo);
    }

    /// The stored queue `name` (store id `id`) of `vhost` is being deleted: it goes with its
    /// messages and `bindings` (those leading to it; written before the vhost drops them, so
    /// that a queue declared again under the name does not get them back after a restart).
    pub(crate) fn queue_deleted<'b>(
        &self,
        vhost: &str,
        name: &str,
        id: u64,
        bindings: impl IntoIterator<Item = &'b Binding>,
        writes: DefinitionWrites<'_>,
    ) {
        let Some(store) = self.writing() else { return };
        let mut ops: Vec<Op> = bindings
            .into_iter()
            .map(|binding| Op::DeleteBinding(binding_def(vhost, binding)))
            .collect();
        ops.push(Op::DeleteQueue {
            vhost: vhost.into(),
            name: name.into(),
            id,
        });
        write(store, ops, writes);
    }

    /// A binding of `vhost` between two durable ends was added; if writing it fails, `undo`
    /// takes it back.
    pub(crate) fn bound(
        &self,
        vhost: &str,
        binding: &Binding,
        writes: DefinitionWrites<'_>,
        undo: impl FnOnce() + Send + 'static,
    ) {
        let Some(store) = self.writing() else { return };
        let ops = vec![Op::PutBinding(binding_def(vhost, binding))];
        write_or_undo(store, ops, writes, undo);
    }

    /// A binding was removed (removing one that was never stored is harmless).
    pub(crate) fn unbound(&self, vhost: &str, binding: &Binding, writes: DefinitionWrites<'_>) {
        let Some(store) = self.writing() else { return };
        let ops = vec![Op::DeleteBinding(binding_def(vhost, binding))];
        write(store, ops, writes);
    }

    /// A policy was set in `vhost`; if writing it fails, `undo` puts back what it replaced.
    pub(crate) fn policy_set(
        &self,
        vhost: &str,
        policy: &Policy,
        writes: DefinitionWrites<'_>,
        undo: impl FnOnce() + Send + 'static,
    ) {
        let Some(store) = self.writing() else { return };
        let mut definition = FieldTable::new();
        for (key, value) in policy.definition.entries() {
            let value = match value {
                PolicyValue::Integer(n) => FieldValue::I64(n),
                PolicyValue::Text(t) => FieldValue::LongStr(t.into_bytes().into()),
            };
            definition.insert(key, value);
        }
        let ops = vec![Op::PutPolicy(PolicyDef {
            vhost: vhost.into(),
            name: policy.name.clone(),
            pattern: policy.pattern.clone(),
            apply_to: policy.apply_to.name().into(),
            priority: policy.priority,
            definition: definition.to_encoded(),
        })];
        write_or_undo(store, ops, writes, undo);
    }

    /// A policy was removed.
    pub(crate) fn policy_cleared(&self, vhost: &str, name: &str, writes: DefinitionWrites<'_>) {
        let Some(store) = self.writing() else { return };
        let ops = vec![Op::DeletePolicy {
            vhost: vhost.into(),
            name: name.into(),
        }];
        write(store, ops, writes);
    }
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

/// A binding as the store records it.
pub(crate) fn binding_def(vhost: &str, binding: &Binding) -> BindingDef {
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
