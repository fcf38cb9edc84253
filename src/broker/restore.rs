//! Start-up: what the store holds comes back before any client connects: users and
//! permissions, policies, durable exchanges, durable queues (a paging queue with its stored
//! messages counted, not read; any other with its persistent messages in order), bindings,
//! and the counts of what durable delayed exchanges hold. Above the vhost: it declares
//! through the vhost's own operations, with the store's writes off meanwhile.

use std::sync::Arc;

use dwellmq_codec::{FieldTable, FieldValue, ShortStr};
use dwellmq_core::policy::{ApplyTo, Policy, PolicyDefinition, PolicyValue};
use dwellmq_store::{
    BindingDef, DestinationKind, ExchangeDef, Op, PolicyDef, QueueDef, Snapshot, Store, StoreError,
};

use crate::broker::exchange::{DeclaredBy, DeclaredType, ExchangeKind};
use crate::broker::persist::kept::{KeptExchange, KeptQueue};
use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::Queue;
use crate::broker::vhost::{ExchangeSpec, QueueSpec, VHost};
use crate::broker::BrokerState;

/// Stored delayed messages dropped per submission (those of an exchange that is gone).
const PAGE: usize = 4096;

/// What went wrong restoring the store's contents.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecoveryError {
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a restore brought back (logged at start).
#[derive(Debug, Default)]
struct Restored {
    exchanges: usize,
    queues: usize,
    bindings: usize,
    policies: usize,
    messages: usize,
    delayed: usize,
    skipped: usize,
    /// User and permission records applied over the configured ones.
    access: usize,
    /// Stored definitions that could not be restored, kept on disk as they are: what and why.
    kept: Vec<String>,
    /// Exchanges among them (vhost, name): what they hold stays on disk too.
    kept_exchanges: Vec<(String, String)>,
}

/// Restores everything the store holds into `state`. A restore never deletes: definitions
/// that no longer fit (a vhost not configured any more, arguments this build refuses, a
/// binding whose end was not restored) stay in the store untouched, are logged by name and
/// listed by `GET /api/health/checks/definitions`, and come back with a restart that accepts
/// them; what a kept exchange holds stays on disk with it.
pub(crate) fn restore(state: &BrokerState) -> Result<(), RecoveryError> {
    let Some(store) = state.store().cloned() else {
        return Ok(());
    };
    let definitions = &state.runtime.definitions;
    definitions.set_restoring(true);
    let result = restore_from(state, &store);
    definitions.set_restoring(false);
    let (restored, queues) = result?;
    *state.unrestored.lock() = restored.kept.clone();
    // Now that every definition is back (dead-letter exchanges, their bindings and target
    // queues): messages whose TTL passed while the broker was down expire, dead-lettered
    // where their queue says, and the deadlines of the others are armed.
    for (vhost, queue) in &queues {
        queue.tick(&**vhost);
    }
    tracing::info!(
        path = %store.path().display(),
        exchanges = restored.exchanges,
        queues = restored.queues,
        bindings = restored.bindings,
        policies = restored.policies,
        messages = restored.messages,
        delayed = restored.delayed,
        skipped = restored.skipped,
        users_and_permissions = restored.access,
        "store restored"
    );
    Ok(())
}

/// What a restore leaves to do: its report and the queues it restored.
type RestoreOutcome = (Restored, Vec<(Arc<VHost>, Arc<Queue>)>);

fn restore_from(state: &BrokerState, store: &Arc<Store>) -> Result<RestoreOutcome, RecoveryError> {
    let snapshot = store.snapshot()?;
    let recovery = snapshot.recovery()?;
    let definitions = recovery.definitions;
    let mut restored = Restored::default();
    let mut queues = Vec::new();
    // Before anything is scheduled (queues restored below arm ticks): new deadlines are
    // numbered above every held message's id.
    state.delayed.reserve_below(recovery.next_delayed_seq);
    // Vhosts added at runtime first: what follows lives in them.
    for v in &definitions.vhosts {
        state.add_vhost(&v.name, DefinitionWrites::UNAWAITED);
    }
    // Users and permissions changed at runtime, over the configured ones; later changes are
    // written from here on.
    restored.access = state.access.restore(
        &definitions.users,
        &definitions.permissions,
        Arc::clone(store),
    );
    for p in &definitions.policies {
        match restore_policy(state, p) {
            Ok(()) => restored.policies += 1,
            Err(why) => skip(&mut restored, "policy", &p.vhost, &p.name, &why),
        }
    }
    for x in &definitions.exchanges {
        match restore_exchange(state, x) {
            Ok(()) => restored.exchanges += 1,
            Err(why) => {
                skip(&mut restored, "exchange", &x.vhost, &x.name, &why);
                restored
                    .kept_exchanges
                    .push((x.vhost.clone(), x.name.clone()));
                let reported = restored.kept.last().cloned().unwrap_or_default();
                let kept = KeptExchange {
                    kind: x.kind.clone(),
                    held: (0, 0),
                };
                state
                    .runtime
                    .kept_exchanges
                    .keep(&x.vhost, &x.name, kept, reported);
            }
        }
    }
    for q in &definitions.queues {
        let next_seq = recovery
            .next_queue_seqs
            .iter()
            .find(|(id, _)| *id == q.id)
            .map_or(0, |&(_, seq)| seq);
        match restore_queue(state, &snapshot, q, next_seq) {
            Ok((vhost, queue, count)) => {
                restored.queues += 1;
                restored.messages += count;
                queues.push((vhost, queue));
            }
            Err(why) => {
                skip(&mut restored, "queue", &q.vhost, &q.name, &why);
                let kept = KeptQueue { id: q.id, next_seq };
                let reported = restored.kept.last().cloned().unwrap_or_default();
                state
                    .runtime
                    .kept_queues
                    .keep(&q.vhost, &q.name, kept, reported);
            }
        }
    }
    for b in &definitions.bindings {
        match restore_binding(state, b) {
            Ok(()) => restored.bindings += 1,
            Err(why) => {
                let name = format!("{} -> {}", b.source, b.destination);
                skip(&mut restored, "binding", &b.vhost, &name, &why);
                let reported = restored.kept.last().cloned().unwrap_or_default();
                keep_binding(state, b, reported);
            }
        }
    }
    restore_delayed(state, store, &snapshot, &mut restored)?;
    Ok((restored, queues))
}

/// Messages held by durable delayed exchanges: their exchanges' counts, and the disk tier that
/// reads their ids from the index as time advances. No body is read here: with millions held,
/// a start reads one counter row per exchange. Those that fell due while the broker was down
/// are released oldest first from now on, at most [`CATCH_UP_PER_SECOND`](crate::broker::persist::CATCH_UP_PER_SECOND). Ones whose exchange
/// is gone are removed from the store, a chunk of ids at a time.
fn restore_delayed(
    state: &BrokerState,
    store: &Arc<Store>,
    snapshot: &Snapshot,
    restored: &mut Restored,
) -> Result<(), RecoveryError> {
    let now = state.clock.now_ms();
    for (vhost_name, exchange_name, count, bytes) in snapshot.delayed_counts()? {
        let target = state.vhost(&vhost_name).and_then(|vhost| {
            let exchange = vhost.exchange(&exchange_name).ok()?;
            let delayed = matches!(exchange.kind, ExchangeKind::Delayed(_));
            (delayed && exchange.durable).then_some((vhost, exchange))
        });
        let Some((vhost, exchange)) = target else {
            let kept = restored
                .kept_exchanges
                .iter()
                .any(|(v, x)| *v == vhost_name && *x == exchange_name);
            if kept {
                // Its definition is kept on disk: so are its messages.
                tracing::warn!(
                    vhost = %vhost_name,
                    exchange = %exchange_name,
                    count,
                    "stored delayed messages of an exchange not restored, kept on disk"
                );
                state.delayed.keep_unrestored(&vhost_name, &exchange_name);
                state
                    .runtime
                    .kept_exchanges
                    .update(&vhost_name, &exchange_name, |x| x.held = (count, bytes));
                continue;
            }
            // No definition at all: what a deletion interrupted by a crash left behind.
            tracing::warn!(
                vhost = %vhost_name,
                exchange = %exchange_name,
                count,
                "stored delayed messages of an exchange that is gone, dropped"
            );
            restored.skipped += count as usize;
            drop_stored_of(store, snapshot, &vhost_name, &exchange_name)?;
            continue;
        };
        state
            .delayed
            .restore_counts(&vhost, &exchange, count, bytes);
        restored.delayed += count as usize;
    }
    state.delayed.attach_disk(Arc::clone(store), now);
    Ok(())
}

/// Submits the removal of every stored message of one exchange, [`PAGE`] per submission.
fn drop_stored_of(
    store: &Store,
    snapshot: &Snapshot,
    vhost: &str,
    exchange: &str,
) -> Result<(), RecoveryError> {
    let mut from = dwellmq_store::DeadlineId { due_ms: 0, seq: 0 };
    loop {
        let ids = snapshot.delayed_ids_of(vhost, exchange, from, PAGE)?;
        let Some(&last) = ids.last() else {
            return Ok(());
        };
        store.submit_detached(ids.into_iter().map(|id| Op::Release { id }).collect());
        from = dwellmq_store::DeadlineId {
            due_ms: last.due_ms,
            seq: last.seq.saturating_add(1),
        };
    }
}

fn skip(restored: &mut Restored, what: &str, vhost: &str, name: &str, why: &str) {
    restored.skipped += 1;
    tracing::warn!(
        vhost,
        name,
        "stored {what} not restored, kept on disk: {why}"
    );
    restored
        .kept
        .push(format!("{what} '{name}' in vhost '{vhost}': {why}"));
}

fn restore_policy(state: &BrokerState, p: &PolicyDef) -> Result<(), String> {
    let vhost = state
        .vhost(&p.vhost)
        .ok_or_else(|| format!("no vhost '{}'", p.vhost))?;
    let table = FieldTable::from_encoded(&p.definition).ok_or("malformed definition")?;
    let entries: Vec<(String, PolicyValue)> = table
        .iter()
        .map(|(key, value)| {
            let value = match value {
                FieldValue::LongStr(_) => {
                    PolicyValue::Text(value.as_str().unwrap_or_default().to_string())
                }
                other => PolicyValue::Integer(other.as_integer().unwrap_or_default()),
            };
            (key.to_string(), value)
        })
        .collect();
    let definition =
        PolicyDefinition::from_entries(entries.iter().map(|(k, v)| (k.as_str(), v.clone())))
            .map_err(|e| e.to_string())?;
    let policy = Policy {
        name: p.name.clone(),
        pattern: p.pattern.clone(),
        apply_to: ApplyTo::from_name(&p.apply_to).map_err(|e| e.to_string())?,
        priority: p.priority,
        definition,
    };
    vhost
        .set_policy(policy, DefinitionWrites::UNAWAITED)
        .map_err(|e| e.to_string())
}

fn restore_exchange(state: &BrokerState, x: &ExchangeDef) -> Result<(), String> {
    let vhost = state
        .vhost(&x.vhost)
        .ok_or_else(|| format!("no vhost '{}'", x.vhost))?;
    let arguments = FieldTable::from_encoded(&x.arguments).ok_or("malformed arguments")?;
    let kind = DeclaredType::parse(&x.kind).map_err(|e| e.to_string())?;
    let spec = ExchangeSpec {
        name: ShortStr::from(x.name.as_str()),
        kind,
        passive: false,
        durable: true,
        auto_delete: x.auto_delete,
        internal: x.internal,
        arguments,
        // Unrecorded in a record written before store format 5.
        declared_by: DeclaredBy::from_stored(x.declared_by.as_deref()),
    };
    vhost
        .declare_exchange_reporting(spec, DefinitionWrites::UNAWAITED)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Declares the queue under its stored id and loads its messages page by page; returns its
/// vhost, the queue and how many.
fn restore_queue(
    state: &BrokerState,
    snapshot: &Snapshot,
    q: &QueueDef,
    next_seq: u64,
) -> Result<(Arc<VHost>, Arc<Queue>, usize), String> {
    let vhost = state
        .vhost(&q.vhost)
        .ok_or_else(|| format!("no vhost '{}'", q.vhost))?;
    let arguments = FieldTable::from_encoded(&q.arguments).ok_or("malformed arguments")?;
    let queue = vhost
        .declare_queue_reporting(
            QueueSpec {
                name: ShortStr::from(q.name.as_str()),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: q.auto_delete,
                arguments,
            },
            0,
            DefinitionWrites::UNAWAITED,
        )
        .map_err(|e| e.to_string())?;
    if queue.store_id.set(q.id).is_err() {
        return Err("declared twice".into());
    }
    let count = queue
        .load_stored(&*vhost, snapshot, q.id, next_seq)
        .map_err(|e| e.to_string())?;
    if queue.pages() {
        // One page at once: what expired at its head while the broker was down expires now.
        queue.read_first_page(&*vhost);
    }
    Ok((vhost, queue, count))
}

fn restore_binding(state: &BrokerState, b: &BindingDef) -> Result<(), String> {
    let vhost = state
        .vhost(&b.vhost)
        .ok_or_else(|| format!("no vhost '{}'", b.vhost))?;
    vhost.bind_stored(b)
}

/// A binding the restore keeps comes back with a kept exchange or queue at either end, if a
/// declare takes one back.
fn keep_binding(state: &BrokerState, b: &BindingDef, reported: String) {
    let runtime = &state.runtime;
    runtime
        .kept_exchanges
        .keep_binding(&b.source, b, reported.clone());
    match b.destination_kind {
        DestinationKind::Exchange if b.destination != b.source => {
            runtime
                .kept_exchanges
                .keep_binding(&b.destination, b, reported);
        }
        DestinationKind::Exchange => {}
        DestinationKind::Queue => {
            runtime
                .kept_queues
                .keep_binding(&b.destination, b, reported);
        }
    }
}
