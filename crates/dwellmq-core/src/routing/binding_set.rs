//! The bindings of one exchange and the routing decision over them.

use std::collections::HashMap;

use dwellmq_codec::FieldTable;

use crate::routing::destinations::dedupe_tail;
use crate::routing::direct::DirectIndex;
use crate::routing::headers::{headers_match, MatchKind};
use crate::routing::topic::TopicTrie;
use crate::routing::{Binding, Destination, RoutingKind};

/// A binding as stored, with what routing needs precomputed.
#[derive(Debug, Clone)]
struct Stored {
    binding: Binding,
    /// The `x-match` mode (headers exchanges only).
    x_match: MatchKind,
}

/// Every binding to one destination.
#[derive(Debug, Clone)]
struct ToDestination {
    destination: Destination,
    bindings: Vec<Stored>,
}

/// The per-kind index that `route` consults.
#[derive(Debug, Clone)]
enum Index {
    Direct(DirectIndex),
    Topic(TopicTrie),
    /// Fanout and headers walk the destinations themselves.
    None,
}

/// The bindings of one exchange, indexed for its routing kind.
///
/// `route` is the hot path: direct is one hash lookup, topic one trie walk (cost independent
/// of the number of bindings that do not match), fanout a copy of the destination list, and
/// headers a scan of the bindings as in RabbitMQ. It allocates nothing beyond growing `out`,
/// and reports each destination at most once per call.
///
/// ```
/// use dwellmq_core::routing::{Binding, BindingSet, Destination, RoutingKind};
///
/// let mut set = BindingSet::new(RoutingKind::Topic);
/// let q = Destination::Queue("eu-orders".into());
/// assert!(set.add(Binding::new("orders", q.clone(), "order.eu.#")));
/// let mut out = Vec::new();
/// set.route("order.eu.created", None, &mut out);
/// assert_eq!(out, vec![q]);
/// ```
#[derive(Debug, Clone)]
pub struct BindingSet {
    kind: RoutingKind,
    destinations: Vec<ToDestination>,
    position: HashMap<Destination, usize>,
    len: usize,
    index: Index,
}

impl BindingSet {
    /// An empty set for an exchange routing as `kind`.
    pub fn new(kind: RoutingKind) -> Self {
        let index = match kind {
            RoutingKind::Direct => Index::Direct(DirectIndex::default()),
            RoutingKind::Topic => Index::Topic(TopicTrie::default()),
            RoutingKind::Fanout | RoutingKind::Headers => Index::None,
        };
        BindingSet {
            kind,
            destinations: Vec::new(),
            position: HashMap::new(),
            len: 0,
            index,
        }
    }

    /// The routing kind.
    pub fn kind(&self) -> RoutingKind {
        self.kind
    }

    /// Adds a binding; `false` if an identical one (same source, destination, key and
    /// arguments in any order) is already present. Headers bindings should be checked with
    /// [`validate_headers_binding_args`](crate::routing::validate_headers_binding_args) first;
    /// an invalid `x-match` routes as `all`.
    pub fn add(&mut self, binding: Binding) -> bool {
        let at = match self.position.get(&binding.destination) {
            Some(&i) => i,
            None => {
                self.destinations.push(ToDestination {
                    destination: binding.destination.clone(),
                    bindings: Vec::new(),
                });
                let i = self.destinations.len() - 1;
                self.position.insert(binding.destination.clone(), i);
                i
            }
        };
        let Some(entry) = self.destinations.get_mut(at) else {
            return false;
        };
        if entry.bindings.iter().any(|s| s.binding == binding) {
            return false;
        }
        match &mut self.index {
            Index::Direct(d) => d.insert(&binding.routing_key, &binding.destination),
            Index::Topic(t) => t.insert(&binding.routing_key, &binding.destination),
            Index::None => {}
        }
        let x_match = match self.kind {
            RoutingKind::Headers => MatchKind::of(&binding.arguments),
            _ => MatchKind::All,
        };
        entry.bindings.push(Stored { binding, x_match });
        self.len += 1;
        true
    }

    /// Removes a binding; `false` if it was not present.
    pub fn remove(&mut self, binding: &Binding) -> bool {
        let Some(&at) = self.position.get(&binding.destination) else {
            return false;
        };
        let Some(entry) = self.destinations.get_mut(at) else {
            return false;
        };
        let Some(i) = entry.bindings.iter().position(|s| s.binding == *binding) else {
            return false;
        };
        let stored = entry.bindings.remove(i);
        let now_empty = entry.bindings.is_empty();
        self.unindex(&stored.binding);
        self.len -= 1;
        if now_empty {
            self.drop_destination_at(at);
        }
        true
    }

    /// Removes every binding to `destination` (it was deleted); returns how many there were.
    pub fn remove_destination(&mut self, destination: &Destination) -> usize {
        let Some(&at) = self.position.get(destination) else {
            return 0;
        };
        let Some(entry) = self.destinations.get_mut(at) else {
            return 0;
        };
        let removed = std::mem::take(&mut entry.bindings);
        for stored in &removed {
            self.unindex(&stored.binding);
        }
        self.len -= removed.len();
        self.drop_destination_at(at);
        removed.len()
    }

    fn unindex(&mut self, binding: &Binding) {
        match &mut self.index {
            Index::Direct(d) => d.remove(&binding.routing_key, &binding.destination),
            Index::Topic(t) => t.remove(&binding.routing_key, &binding.destination),
            Index::None => {}
        }
    }

    fn drop_destination_at(&mut self, at: usize) {
        if at >= self.destinations.len() {
            return;
        }
        let gone = self.destinations.swap_remove(at);
        self.position.remove(&gone.destination);
        if let Some(moved) = self.destinations.get(at) {
            self.position.insert(moved.destination.clone(), at);
        }
    }

    /// Appends the destinations a message with this routing key and these headers goes to.
    ///
    /// Direct and topic exchanges read the routing key, headers exchanges the headers, fanout
    /// neither. Each destination is appended at most once per call (entries already in `out`
    /// are left alone). Nothing is allocated beyond growing `out`.
    pub fn route(
        &self,
        routing_key: &str,
        headers: Option<&FieldTable>,
        out: &mut Vec<Destination>,
    ) {
        match (&self.index, self.kind) {
            (Index::Direct(d), _) => d.collect(routing_key, out),
            (Index::Topic(t), _) => {
                let start = out.len();
                t.collect(routing_key, out);
                dedupe_tail(out, start);
            }
            (Index::None, RoutingKind::Headers) => {
                for entry in &self.destinations {
                    let hit = entry
                        .bindings
                        .iter()
                        .any(|s| headers_match(s.x_match, &s.binding.arguments, headers));
                    if hit {
                        out.push(entry.destination.clone());
                    }
                }
            }
            (Index::None, _) => {
                out.extend(self.destinations.iter().map(|e| e.destination.clone()));
            }
        }
    }

    /// Whether a message would be routed anywhere (for `mandatory` checks), without collecting.
    pub fn routes_anywhere(&self, routing_key: &str, headers: Option<&FieldTable>) -> bool {
        match (&self.index, self.kind) {
            (Index::None, RoutingKind::Fanout) => !self.destinations.is_empty(),
            (Index::None, _) => self.destinations.iter().any(|e| {
                e.bindings
                    .iter()
                    .any(|s| headers_match(s.x_match, &s.binding.arguments, headers))
            }),
            (Index::Direct(d), _) => d.contains(routing_key),
            (Index::Topic(t), _) => {
                // Allocates only once something matched.
                let mut out = Vec::new();
                t.collect(routing_key, &mut out);
                !out.is_empty()
            }
        }
    }

    /// The number of bindings.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bindings.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every binding, grouped by destination.
    pub fn iter(&self) -> impl Iterator<Item = &Binding> {
        self.destinations
            .iter()
            .flat_map(|e| e.bindings.iter().map(|s| &s.binding))
    }

    /// Whether any binding leads to `destination`.
    pub fn has_destination(&self, destination: &Destination) -> bool {
        self.position.contains_key(destination)
    }

    /// The distinct destinations, in no particular order.
    pub fn destinations(&self) -> impl Iterator<Item = &Destination> {
        self.destinations.iter().map(|e| &e.destination)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dwellmq_codec::FieldValue;

    fn q(name: &str) -> Destination {
        Destination::Queue(name.into())
    }

    fn x(name: &str) -> Destination {
        Destination::Exchange(name.into())
    }

    fn route(set: &BindingSet, key: &str, headers: Option<&FieldTable>) -> Vec<Destination> {
        let mut out = vec![];
        set.route(key, headers, &mut out);
        out.sort();
        out
    }

    #[test]
    fn direct_routes_exact_keys_once() {
        let mut s = BindingSet::new(RoutingKind::Direct);
        assert!(s.add(Binding::new("e", q("a"), "k")));
        assert!(!s.add(Binding::new("e", q("a"), "k")), "duplicate");
        let with_args = Binding::new("e", q("a"), "k")
            .with_arguments([("x", FieldValue::I64(1))].into_iter().collect());
        assert!(s.add(with_args.clone()), "differs by arguments");
        assert!(s.add(Binding::new("e", x("b"), "k")));
        assert!(s.add(Binding::new("e", q("c"), "other")));
        assert_eq!(s.len(), 4);
        assert_eq!(route(&s, "k", None), vec![q("a"), x("b")]);
        assert!(s.remove(&with_args));
        assert!(!s.remove(&with_args));
        assert_eq!(route(&s, "k", None), vec![q("a"), x("b")]);
        assert!(s.remove(&Binding::new("e", q("a"), "k")));
        assert_eq!(route(&s, "k", None), vec![x("b")]);
        assert!(!s.has_destination(&q("a")));
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn fanout_routes_everything_once() {
        let mut s = BindingSet::new(RoutingKind::Fanout);
        s.add(Binding::new("e", q("a"), "k1"));
        s.add(Binding::new("e", q("a"), "k2"));
        s.add(Binding::new("e", q("b"), ""));
        assert_eq!(route(&s, "anything", None), vec![q("a"), q("b")]);
        assert_eq!(s.remove_destination(&q("a")), 2);
        assert_eq!(route(&s, "", None), vec![q("b")]);
        assert_eq!(s.len(), 1);
        assert_eq!(s.remove_destination(&q("a")), 0);
    }

    #[test]
    fn topic_dedupes_across_patterns() {
        let mut s = BindingSet::new(RoutingKind::Topic);
        s.add(Binding::new("e", q("a"), "#"));
        s.add(Binding::new("e", q("a"), "a.*"));
        s.add(Binding::new("e", q("a"), "a.b"));
        s.add(Binding::new("e", q("b"), "*.b"));
        s.add(Binding::new("e", q("c"), "c.#"));
        assert_eq!(route(&s, "a.b", None), vec![q("a"), q("b")]);
        assert_eq!(route(&s, "c", None), vec![q("a"), q("c")]);
        // Entries already in `out` are not touched by the de-duplication.
        let mut out = vec![q("a")];
        s.route("a.b", None, &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0], q("a"));
        s.remove_destination(&q("a"));
        assert_eq!(route(&s, "a.b", None), vec![q("b")]);
        assert_eq!(route(&s, "x", None), vec![]);
    }

    #[test]
    fn headers_route_once_per_destination() {
        let mut s = BindingSet::new(RoutingKind::Headers);
        let args = |entries: &[(&str, FieldValue)]| entries.iter().cloned().collect::<FieldTable>();
        s.add(Binding::new("e", q("a"), "").with_arguments(args(&[("format", "pdf".into())])));
        s.add(Binding::new("e", q("a"), "").with_arguments(args(&[
            ("x-match", "any".into()),
            ("format", "pdf".into()),
            ("type", "report".into()),
        ])));
        s.add(Binding::new("e", q("b"), "").with_arguments(args(&[("format", "zip".into())])));
        let h = args(&[("format", "pdf".into()), ("type", "report".into())]);
        assert_eq!(route(&s, "ignored", Some(&h)), vec![q("a")]);
        assert_eq!(route(&s, "", None), vec![]);
        assert!(s.routes_anywhere("", Some(&h)));
        assert!(!s.routes_anywhere("", None));
    }

    #[test]
    fn iteration_and_bookkeeping() {
        let mut s = BindingSet::new(RoutingKind::Direct);
        assert!(s.is_empty());
        for i in 0..50 {
            s.add(Binding::new(
                "e",
                q(&format!("q{}", i % 10)),
                format!("k{i}"),
            ));
        }
        assert_eq!(s.len(), 50);
        assert_eq!(s.iter().count(), 50);
        assert_eq!(s.destinations().count(), 10);
        for i in 0..10 {
            assert_eq!(s.remove_destination(&q(&format!("q{i}"))), 5);
        }
        assert!(s.is_empty());
        assert_eq!(s.destinations().count(), 0);
        assert_eq!(route(&s, "k1", None), vec![]);
    }

    #[test]
    fn mandatory_checks_match_routing() {
        let mut s = BindingSet::new(RoutingKind::Topic);
        assert!(!s.routes_anywhere("a", None));
        s.add(Binding::new("e", q("a"), "a.#"));
        assert!(s.routes_anywhere("a", None));
        assert!(!s.routes_anywhere("b", None));
        let mut f = BindingSet::new(RoutingKind::Fanout);
        assert!(!f.routes_anywhere("", None));
        f.add(Binding::new("e", q("a"), ""));
        assert!(f.routes_anywhere("", None));
    }
}
