//! The vhost as core's routing walk reads it: its exchange and queue maps under their read
//! locks, behind core's [`ExchangeGraph`].

use std::collections::HashMap;
use std::sync::Arc;

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::routing::{BindingSet, ExchangeGraph, RouteKeys, Routed};

use super::VHost;
use crate::broker::exchange::{Exchange, ExchangeKind};
use crate::broker::queue::Queue;

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

impl VHost {
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
