//! A virtual host: its exchanges and queues, and the operations on them, one file per job:
//! declaring (`declare.rs`), taking back what the restore kept (`kept.rs`), binding
//! (`bind.rs`), deleting with everything that goes with it (`delete.rs`, the one delete
//! cascade), policies (`policies.rs`), and the adapter core's routing walk reads the maps
//! through (`routing.rs`).
//!
//! A vhost owns its queues: it is their [`QueueOwner`](super::queue::QueueOwner) (the
//! implementation, which carries out what a queue hands up, is `broker::effects`). It reaches
//! the delayed exchanges' holder only through [`HeldMessages`].

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::routing::{Binding, Destination, RoutingKind};
use dwellmq_core::{BrokerError, BrokerResult, Message};
use parking_lot::RwLock;

use super::exchange::{DeclaredBy, Exchange, ExchangeKind};
use super::queue::Queue;
use super::runtime::Runtime;
use super::tickets::PublishTicket;

mod bind;
mod declare;
mod delete;
mod policies;
mod routing;
mod stored;
#[cfg(test)]
mod tests;

pub(crate) use declare::{ExchangeSpec, QueueSpec};
pub(crate) use routing::Routing;

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

/// The delayed exchanges' holder as a vhost and the publish pipeline use it (implemented by
/// `delayed::DelayedMessages`, which the vhost does not know by type).
pub(crate) trait HeldMessages: Send + Sync {
    /// Holds `message` at the delayed `exchange` of `vhost` until `due_ms`; a durable
    /// exchange's copy is written to the store, its commit counted on `ticket`.
    fn hold(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<Message>,
        due_ms: u64,
        ticket: Option<&Arc<PublishTicket>>,
    );

    /// Exchange `exchange` of `vhost` was deleted: what it held goes (a chunk at a time).
    fn forget_exchange(&self, vhost: &ShortStr, exchange: &ShortStr);

    /// A declare took back a kept exchange whose definition is now committed: the messages
    /// the restore counted for it on disk (`held`: count and body bytes) are its own.
    fn reattach_kept(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        held: (u64, u64),
        now_ms: u64,
    );
}

/// A virtual host.
pub(crate) struct VHost {
    pub(crate) name: ShortStr,
    exchanges: RwLock<HashMap<ShortStr, Arc<Exchange>>>,
    queues: RwLock<HashMap<ShortStr, Arc<Queue>>>,
    runtime: Arc<Runtime>,
    /// Messages held by delayed exchanges.
    held: Arc<dyn HeldMessages>,
    /// This vhost, for what outlives a call: undoing a failed write, and the owner its
    /// queues' page reads, store completions and ticks carry (`QueueOwner::weak`).
    me: Weak<VHost>,
    policies: RwLock<policies::Policies>,
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

fn bool_text(b: bool) -> &'static str {
    if b {
        "true"
    } else {
        "false"
    }
}

impl VHost {
    /// A vhost whose queues share `runtime`, and whose delayed exchanges hold in `held`.
    pub(crate) fn shared(
        name: ShortStr,
        runtime: Arc<Runtime>,
        held: Arc<dyn HeldMessages>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me| Self::build(name, runtime, held, me.clone()))
    }

    fn build(
        name: ShortStr,
        runtime: Arc<Runtime>,
        held: Arc<dyn HeldMessages>,
        me: Weak<VHost>,
    ) -> Self {
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
            held,
            me,
            policies: RwLock::new(policies::Policies::default()),
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

    /// This vhost, for what outlives a call (the undo of a failed write, a queue's tick).
    pub(crate) fn me(&self) -> &Weak<VHost> {
        &self.me
    }

    /// What this vhost shares with the broker (queue services, scheduler, names...).
    pub(crate) fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Where its delayed exchanges hold messages.
    pub(crate) fn held(&self) -> &Arc<dyn HeldMessages> {
        &self.held
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
}
