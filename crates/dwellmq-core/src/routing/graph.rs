//! The walk of a vhost's exchange graph: which queues a message goes to now, and which delayed
//! exchanges hold it on its way.
//!
//! [`route`] is a pure function over an [`ExchangeGraph`], the view of a vhost's exchanges and
//! queues it needs; the broker implements the view over its own exchange and queue handles
//! under its read locks, a test over a few names. As RabbitMQ's `rabbit_exchange:route/2`:
//! the nameless default exchange routes by queue name; exchange-to-exchange bindings are
//! followed, each exchange walked once, so cycles end; an exchange whose own bindings match
//! nothing hands the message to its alternate exchange (`process_alternate`: wherever it lies
//! on the walk, and only when none of its bindings matched, even bindings to exchanges that
//! then route nowhere); every queue is reached once. The
//! `CC` and `BCC` keys route beside the routing key at every exchange that routes by key.
//!
//! Delayed exchanges (`x-delayed-message`) add one rule: a message with a positive `x-delay`
//! is held by the first delayed exchange it reaches on each path. What lies behind a holder is
//! walked only to tell whether the message would reach a queue at release
//! ([`Routed::routable_later`], for `mandatory`); the holder routes it again when it releases
//! it, from the bindings as they are then.
//!
//! Steady state allocates nothing: every list lives in the caller's [`Routed`], reused from
//! one message to the next.

use dwellmq_codec::{FieldTable, ShortStr};

use crate::routing::{BindingSet, Destination, RoutingKind};

/// A vhost's exchanges and queues as [`route`] reads them. The handles are the shell's own
/// (the broker's shared pointers, a test's indices); the walk clones them into [`Routed`].
pub trait ExchangeGraph {
    /// A handle on an exchange.
    type Exchange: Clone;
    /// A handle on a queue.
    type Queue: Clone;

    /// The exchange of this name, if it exists.
    fn exchange(&self, name: &str) -> Option<&Self::Exchange>;
    /// The queue of this name, if it exists.
    fn queue(&self, name: &str) -> Option<&Self::Queue>;
    /// Whether two handles name the same queue.
    fn same_queue(&self, a: &Self::Queue, b: &Self::Queue) -> bool;
    /// An exchange's name (empty for the default exchange).
    fn name<'a>(&'a self, exchange: &'a Self::Exchange) -> &'a str;
    /// Whether the exchange is a delayed exchange (`x-delayed-message`).
    fn is_delayed(&self, exchange: &Self::Exchange) -> bool;
    /// The exchange's alternate exchange, when it has one (declared or by policy) and it
    /// exists.
    fn alternate(&self, exchange: &Self::Exchange) -> Option<&Self::Exchange>;
    /// Calls `f` with the exchange's bindings (the shell may hold a lock meanwhile).
    fn with_bindings(&self, exchange: &Self::Exchange, f: &mut dyn FnMut(&BindingSet));
}

/// What a message is routed by: its routing key, the extra keys of its `CC` and `BCC`
/// headers, and its headers (for headers exchanges).
#[derive(Debug, Clone, Copy)]
pub struct RouteKeys<'a> {
    /// The routing key it was published with.
    pub routing_key: &'a str,
    /// The `CC` and `BCC` keys (see [`extra_routing_keys`](crate::routing::extra_routing_keys)).
    pub extra_keys: &'a [ShortStr],
    /// The message's headers.
    pub headers: Option<&'a FieldTable>,
}

/// Where a message goes, as [`route`] finds it. Reused between messages: its lists keep
/// their capacity, so routing allocates nothing in steady state.
pub struct Routed<X, Q> {
    /// Queues that take the message now, each once.
    pub queues: Vec<Q>,
    /// Delayed exchanges that hold the message until its due time, each once.
    pub delayed: Vec<X>,
    /// Whether something behind those delayed exchanges would take it now.
    pub routable_later: bool,
    /// The destinations one exchange's bindings give.
    destinations: Vec<Destination>,
    /// Exchanges still to walk, each with whether it lies behind a holder.
    pending: Vec<(X, bool)>,
    /// Exchanges walked, each with whether it lay behind a holder (one exchange can be
    /// reached both in front of a holder and behind one).
    visited: Vec<(X, bool)>,
}

impl<X, Q> Default for Routed<X, Q> {
    fn default() -> Self {
        Routed {
            queues: Vec::new(),
            delayed: Vec::new(),
            routable_later: false,
            destinations: Vec::new(),
            pending: Vec::new(),
            visited: Vec::new(),
        }
    }
}

impl<X, Q> Routed<X, Q> {
    /// Forgets the last result (keeping the lists' capacity).
    pub fn clear(&mut self) {
        self.queues.clear();
        self.delayed.clear();
        self.routable_later = false;
    }

    /// Whether the message reaches a queue, now or (held) at release, as far as the bindings
    /// of this moment tell.
    pub fn is_routable(&self) -> bool {
        !self.queues.is_empty() || self.routable_later
    }
}

/// Routes a message published to `exchange` through `graph` into `out` (cleared first).
///
/// With `hold_delayed` (a message with a positive `x-delay`), each delayed exchange the
/// message reaches in front of another holder goes to `out.delayed`, and what lies behind it
/// only tells `out.routable_later`. Without it (no delay, or a release), delayed exchanges
/// route like their `x-delayed-type`.
///
/// ```
/// use std::collections::HashMap;
/// use dwellmq_core::routing::{
///     route, Binding, BindingSet, Destination, ExchangeGraph, RouteKeys, Routed, RoutingKind,
/// };
///
/// /// One direct exchange "x" and its queues, by name.
/// struct Graph { x: (String, BindingSet), queues: Vec<String> }
///
/// impl ExchangeGraph for Graph {
///     type Exchange = String;
///     type Queue = String;
///     fn exchange(&self, name: &str) -> Option<&String> {
///         (self.x.0 == name).then_some(&self.x.0)
///     }
///     fn queue(&self, name: &str) -> Option<&String> {
///         self.queues.iter().find(|q| q.as_str() == name)
///     }
///     fn same_queue(&self, a: &String, b: &String) -> bool { a == b }
///     fn name<'a>(&'a self, x: &'a String) -> &'a str { x }
///     fn is_delayed(&self, _: &String) -> bool { false }
///     fn alternate(&self, _: &String) -> Option<&String> { None }
///     fn with_bindings(&self, _: &String, f: &mut dyn FnMut(&BindingSet)) { f(&self.x.1) }
/// }
///
/// let mut bindings = BindingSet::new(RoutingKind::Direct);
/// bindings.add(Binding::new("x", Destination::Queue("eu".into()), "eu"));
/// bindings.add(Binding::new("x", Destination::Queue("us".into()), "us"));
/// let graph = Graph { x: ("x".into(), bindings), queues: vec!["eu".into(), "us".into()] };
/// let mut out = Routed::default();
/// // The CC key "us" routes beside the routing key.
/// let cc = ["us".into()];
/// let keys = RouteKeys { routing_key: "eu", extra_keys: &cc, headers: None };
/// route(&graph, &graph.x.0, keys, false, &mut out);
/// assert_eq!(out.queues, ["eu", "us"]);
/// ```
pub fn route<G: ExchangeGraph>(
    graph: &G,
    exchange: &G::Exchange,
    keys: RouteKeys<'_>,
    hold_delayed: bool,
    out: &mut Routed<G::Exchange, G::Queue>,
) {
    out.clear();
    let Routed {
        queues,
        delayed,
        routable_later,
        destinations,
        pending,
        visited,
    } = out;
    if graph.name(exchange).is_empty() {
        // The default exchange: every key names a queue.
        let names =
            std::iter::once(keys.routing_key).chain(keys.extra_keys.iter().map(|k| k.as_str()));
        for name in names {
            if let Some(queue) = graph.queue(name) {
                push_queue(graph, queues, queue);
            }
        }
        return;
    }
    pending.push((exchange.clone(), false));
    while let Some((current, behind)) = pending.pop() {
        // A delayed exchange behind a holder is reached only at release, when the message
        // carries a negative `x-delay` and is not held again.
        let holds_here = hold_delayed && !behind && graph.is_delayed(&current);
        if holds_here {
            let name = graph.name(&current);
            if !delayed.iter().any(|d| graph.name(d) == name) {
                delayed.push(current.clone());
            }
        }
        let behind = behind || holds_here;
        let seen = visited
            .iter()
            .any(|(x, b)| *b == behind && graph.name(x) == graph.name(&current));
        if seen {
            continue;
        }
        destinations.clear();
        graph.with_bindings(&current, &mut |bindings| {
            bindings.route(keys.routing_key, keys.headers, destinations);
            if matches!(bindings.kind(), RoutingKind::Direct | RoutingKind::Topic) {
                for key in keys.extra_keys {
                    bindings.route(key, keys.headers, destinations);
                }
            }
        });
        if destinations.is_empty() {
            // Nothing bound matched: the alternate exchange takes the message (a holder's at
            // release, so now it is only consulted, as what lies behind the holder is).
            if let Some(alternate) = graph.alternate(&current) {
                pending.push((alternate.clone(), behind));
            }
        }
        visited.push((current, behind));
        for destination in destinations.drain(..) {
            match destination {
                Destination::Queue(name) => {
                    let Some(queue) = graph.queue(&name) else {
                        continue;
                    };
                    if behind {
                        *routable_later = true;
                    } else {
                        push_queue(graph, queues, queue);
                    }
                }
                Destination::Exchange(name) => {
                    if let Some(next) = graph.exchange(&name) {
                        pending.push((next.clone(), behind));
                    }
                }
            }
        }
    }
    // Handles kept past the walk would keep deleted exchanges alive.
    visited.clear();
}

fn push_queue<G: ExchangeGraph>(graph: &G, queues: &mut Vec<G::Queue>, queue: &G::Queue) {
    if !queues.iter().any(|q| graph.same_queue(q, queue)) {
        queues.push(queue.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::Binding;

    /// A vhost's exchanges and queues by index.
    #[derive(Default)]
    struct Graph {
        exchanges: Vec<TestExchange>,
        queues: Vec<String>,
    }

    struct TestExchange {
        /// Its handle: its index.
        id: usize,
        name: String,
        delayed: bool,
        alternate: Option<String>,
        bindings: BindingSet,
    }

    impl Graph {
        fn exchange_named(&mut self, name: &str, kind: RoutingKind, delayed: bool) -> usize {
            self.exchanges.push(TestExchange {
                id: self.exchanges.len(),
                name: name.into(),
                delayed,
                alternate: None,
                bindings: BindingSet::new(kind),
            });
            self.exchanges.len() - 1
        }

        fn direct(&mut self, name: &str) -> usize {
            self.exchange_named(name, RoutingKind::Direct, false)
        }

        fn fanout(&mut self, name: &str) -> usize {
            self.exchange_named(name, RoutingKind::Fanout, false)
        }

        fn delayed_fanout(&mut self, name: &str) -> usize {
            self.exchange_named(name, RoutingKind::Fanout, true)
        }

        fn queue_named(&mut self, name: &str) {
            self.queues.push(name.into());
        }

        fn bind(&mut self, source: usize, destination: Destination, key: &str) {
            let name = self.exchanges[source].name.clone();
            let binding = Binding::new(name, destination, key);
            assert!(self.exchanges[source].bindings.add(binding));
        }

        fn bind_queue(&mut self, source: usize, queue: &str, key: &str) {
            self.bind(source, Destination::Queue(queue.into()), key);
        }

        fn bind_exchange(&mut self, source: usize, exchange: usize, key: &str) {
            let name = self.exchanges[exchange].name.clone();
            self.bind(source, Destination::Exchange(name.into()), key);
        }

        fn position(&self, name: &str) -> Option<usize> {
            self.exchanges.iter().position(|x| x.name == name)
        }
    }

    impl ExchangeGraph for Graph {
        type Exchange = usize;
        type Queue = String;

        fn exchange(&self, name: &str) -> Option<&usize> {
            self.position(name).map(|i| &self.exchanges[i].id)
        }

        fn queue(&self, name: &str) -> Option<&String> {
            self.queues.iter().find(|q| *q == name)
        }

        fn same_queue(&self, a: &String, b: &String) -> bool {
            a == b
        }

        fn name<'a>(&'a self, exchange: &'a usize) -> &'a str {
            &self.exchanges[*exchange].name
        }

        fn is_delayed(&self, exchange: &usize) -> bool {
            self.exchanges[*exchange].delayed
        }

        fn alternate(&self, exchange: &usize) -> Option<&usize> {
            let name = self.exchanges[*exchange].alternate.as_deref()?;
            self.exchange(name)
        }

        fn with_bindings(&self, exchange: &usize, f: &mut dyn FnMut(&BindingSet)) {
            f(&self.exchanges[*exchange].bindings)
        }
    }

    /// The result of routing through `exchange`: queue names, holders' names, routable later.
    fn route_through(
        graph: &Graph,
        exchange: usize,
        routing_key: &str,
        extra_keys: &[&str],
        hold_delayed: bool,
    ) -> (Vec<String>, Vec<String>, bool) {
        let extra: Vec<ShortStr> = extra_keys.iter().map(|k| ShortStr::from(*k)).collect();
        let keys = RouteKeys {
            routing_key,
            extra_keys: &extra,
            headers: None,
        };
        let mut out = Routed::default();
        route(graph, &exchange, keys, hold_delayed, &mut out);
        let queues = out.queues.clone();
        let delayed = out
            .delayed
            .iter()
            .map(|x| graph.exchanges[*x].name.clone())
            .collect();
        (queues, delayed, out.routable_later)
    }

    #[test]
    fn a_cycle_between_exchanges_is_walked_once() {
        let mut g = Graph::default();
        let front = g.direct("front");
        let back = g.fanout("back");
        g.queue_named("behind");
        g.bind_exchange(front, back, "k");
        g.bind_exchange(back, front, "");
        g.bind_queue(back, "behind", "");
        assert_eq!(route_through(&g, front, "k", &[], false).0, ["behind"]);
        // From the other end: back -> front -> back again stops at back.
        assert_eq!(route_through(&g, back, "k", &[], false).0, ["behind"]);
        assert!(route_through(&g, front, "other", &[], false).0.is_empty());
    }

    #[test]
    fn a_queue_reached_along_several_paths_is_delivered_once() {
        let mut g = Graph::default();
        let root = g.fanout("root");
        let left = g.fanout("left");
        let right = g.direct("right");
        g.queue_named("q");
        g.queue_named("r");
        g.bind_exchange(root, left, "");
        g.bind_exchange(root, right, "");
        g.bind_queue(root, "q", "");
        g.bind_queue(left, "q", "");
        g.bind_queue(right, "q", "k");
        g.bind_queue(right, "q", "cc");
        g.bind_queue(right, "r", "k");
        let (queues, _, _) = route_through(&g, root, "k", &["cc", "k"], false);
        let mut sorted = queues.clone();
        sorted.sort();
        assert_eq!(sorted, ["q", "r"], "{queues:?}");
    }

    #[test]
    fn cc_keys_route_at_every_exchange_that_routes_by_key_but_not_at_fanout() {
        let mut g = Graph::default();
        let direct = g.direct("direct");
        let fanout = g.fanout("fanout");
        g.queue_named("main");
        g.queue_named("copy");
        g.bind_queue(direct, "main", "main");
        g.bind_queue(direct, "copy", "copy");
        g.bind_exchange(direct, fanout, "copy");
        g.bind_queue(fanout, "main", "");
        assert_eq!(route_through(&g, direct, "main", &[], false).0, ["main"]);
        let (queues, _, _) = route_through(&g, direct, "main", &["copy"], false);
        assert_eq!(queues, ["main", "copy"]);
    }

    #[test]
    fn the_default_exchange_routes_by_queue_name_for_every_key_once() {
        let mut g = Graph::default();
        let default = g.direct("");
        g.queue_named("a");
        g.queue_named("b");
        let (queues, delayed, later) = route_through(&g, default, "a", &["b", "a", "none"], true);
        assert_eq!(queues, ["a", "b"]);
        assert!(delayed.is_empty() && !later);
        assert!(route_through(&g, default, "none", &[], false).0.is_empty());
    }

    #[test]
    fn a_delayed_exchange_holds_and_tells_what_it_would_route_to_later() {
        let mut g = Graph::default();
        let front = g.direct("front");
        let delayed = g.delayed_fanout("delayed");
        let also_delayed = g.delayed_fanout("also-delayed");
        g.queue_named("now");
        g.queue_named("later");
        g.bind_queue(front, "now", "k");
        g.bind_exchange(front, delayed, "k");
        g.bind_queue(delayed, "later", "");
        // A delayed exchange behind the holder is not a second holder.
        g.bind_exchange(delayed, also_delayed, "");
        g.bind_queue(also_delayed, "later", "");

        let (queues, holders, later) = route_through(&g, front, "k", &[], true);
        assert_eq!(queues, ["now"]);
        assert_eq!(holders, ["delayed"]);
        assert!(later);

        // Published to the holder itself: nothing now, routable at release.
        let (queues, holders, later) = route_through(&g, delayed, "k", &[], true);
        assert!(queues.is_empty());
        assert_eq!(holders, ["delayed"]);
        assert!(later);

        // Without a positive delay (or at release) a delayed exchange routes at once.
        let (queues, holders, later) = route_through(&g, delayed, "k", &[], false);
        assert_eq!(queues, ["later"]);
        assert!(holders.is_empty() && !later);
    }

    #[test]
    fn a_holder_with_nothing_behind_it_is_not_routable_later() {
        let mut g = Graph::default();
        let delayed = g.delayed_fanout("delayed");
        let (queues, holders, later) = route_through(&g, delayed, "k", &[], true);
        assert!(queues.is_empty());
        assert_eq!(holders, ["delayed"]);
        assert!(!later);
    }

    #[test]
    fn an_exchange_reached_in_front_of_and_behind_a_holder_routes_both_ways() {
        let mut g = Graph::default();
        let root = g.fanout("root");
        let delayed = g.delayed_fanout("delayed");
        let shared = g.fanout("shared");
        g.queue_named("q");
        g.bind_exchange(root, shared, "");
        g.bind_exchange(root, delayed, "");
        g.bind_exchange(delayed, shared, "");
        g.bind_queue(shared, "q", "");
        let (queues, holders, later) = route_through(&g, root, "", &[], true);
        assert_eq!(queues, ["q"]);
        assert_eq!(holders, ["delayed"]);
        assert!(later);
    }

    #[test]
    fn an_unroutable_message_goes_to_the_alternate_exchange_and_on_to_its_alternate() {
        let mut g = Graph::default();
        let main = g.direct("main");
        let first = g.direct("first-ae");
        let second = g.fanout("second-ae");
        g.exchanges[main].alternate = Some("first-ae".into());
        g.exchanges[first].alternate = Some("second-ae".into());
        // A cycle of alternates ends.
        g.exchanges[second].alternate = Some("main".into());
        g.queue_named("hit");
        g.queue_named("first");
        g.queue_named("fallback");
        g.bind_queue(main, "hit", "hit");
        g.bind_queue(first, "first", "first");
        g.bind_queue(second, "fallback", "");
        assert_eq!(route_through(&g, main, "hit", &[], false).0, ["hit"]);
        assert_eq!(route_through(&g, main, "first", &[], false).0, ["first"]);
        assert_eq!(route_through(&g, main, "miss", &[], false).0, ["fallback"]);
    }

    #[test]
    fn each_exchange_on_the_walk_uses_its_own_alternate_when_none_of_its_bindings_match() {
        let mut g = Graph::default();
        let front = g.fanout("front");
        let middle = g.direct("middle");
        let front_ae = g.fanout("front-ae");
        let middle_ae = g.fanout("middle-ae");
        g.exchanges[front].alternate = Some("front-ae".into());
        g.exchanges[middle].alternate = Some("middle-ae".into());
        g.queue_named("direct");
        g.queue_named("front-fallback");
        g.queue_named("middle-fallback");
        g.bind_queue(front, "direct", "");
        g.bind_exchange(front, middle, "");
        g.bind_queue(front_ae, "front-fallback", "");
        g.bind_queue(middle_ae, "middle-fallback", "");
        // front matched (a queue and middle): its alternate is not used; middle matched
        // nothing: its alternate is, beside the queue front reached.
        let (queues, _, _) = route_through(&g, front, "k", &[], false);
        assert_eq!(queues, ["direct", "middle-fallback"]);

        // A binding to an exchange that routes nowhere is still a match for its source.
        g.exchanges[middle].alternate = None;
        let lone = g.direct("lone");
        g.exchanges[lone].alternate = Some("front-ae".into());
        g.bind_exchange(lone, middle, "k");
        assert!(route_through(&g, lone, "k", &[], false).0.is_empty());
        assert_eq!(
            route_through(&g, lone, "other", &[], false).0,
            ["front-fallback"]
        );
    }

    #[test]
    fn a_holders_alternate_exchange_is_consulted_for_the_release() {
        let mut g = Graph::default();
        let delayed = g.delayed_fanout("delayed");
        let ae = g.fanout("ae");
        g.exchanges[delayed].alternate = Some("ae".into());
        g.queue_named("q");
        g.bind_queue(ae, "q", "");
        let (queues, holders, later) = route_through(&g, delayed, "", &[], true);
        assert!(
            queues.is_empty(),
            "the alternate takes it at release, not now"
        );
        assert_eq!(holders, ["delayed"]);
        assert!(later);
    }

    #[test]
    fn reused_scratch_forgets_the_last_message() {
        let mut g = Graph::default();
        let x = g.direct("x");
        let delayed = g.delayed_fanout("delayed");
        g.queue_named("q");
        g.bind_queue(x, "q", "q");
        g.bind_exchange(x, delayed, "d");
        g.bind_queue(delayed, "q", "");
        let mut out = Routed::default();
        let keys = |routing_key| RouteKeys {
            routing_key,
            extra_keys: &[],
            headers: None,
        };
        route(&g, &x, keys("d"), true, &mut out);
        assert_eq!((out.delayed.len(), out.routable_later), (1, true));
        route(&g, &x, keys("q"), true, &mut out);
        assert_eq!(out.queues, ["q"]);
        assert!(out.delayed.is_empty() && !out.routable_later);
        assert!(out.visited.is_empty() && out.pending.is_empty());
    }
}
