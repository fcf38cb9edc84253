//! What a binding is: source, destination, key and arguments; and the kinds of routing.

use dwellmq_codec::{FieldTable, FieldValue, ShortStr};

/// Where a binding sends messages: a queue, or another exchange (exchange-to-exchange binding).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Destination {
    /// A queue, by name.
    Queue(ShortStr),
    /// An exchange, by name.
    Exchange(ShortStr),
}

impl Destination {
    /// The queue's or exchange's name.
    pub fn name(&self) -> &ShortStr {
        match self {
            Destination::Queue(n) | Destination::Exchange(n) => n,
        }
    }
}

/// A binding from a source exchange to a destination.
///
/// Equality is RabbitMQ's binding identity: source, destination, routing key and arguments,
/// where the arguments are compared as RabbitMQ stores them, sorted by key
/// (`rabbit_misc:sort_field_table/1`), so `{a: 1, b: 2}` and `{b: 2, a: 1}` are the same
/// binding. Values must match in type and value.
#[derive(Debug, Clone)]
pub struct Binding {
    /// The exchange messages come from.
    pub source: ShortStr,
    /// Where they go.
    pub destination: Destination,
    /// The binding key (a pattern for topic exchanges, ignored by fanout and headers).
    pub routing_key: ShortStr,
    /// The binding arguments (`x-match` and the header values for headers exchanges).
    pub arguments: FieldTable,
}

impl Binding {
    /// A binding without arguments.
    pub fn new(
        source: impl Into<ShortStr>,
        destination: Destination,
        routing_key: impl Into<ShortStr>,
    ) -> Binding {
        Binding {
            source: source.into(),
            destination,
            routing_key: routing_key.into(),
            arguments: FieldTable::new(),
        }
    }

    /// The same binding with these arguments.
    pub fn with_arguments(mut self, arguments: FieldTable) -> Binding {
        self.arguments = arguments;
        self
    }
}

/// Whether two argument tables are equal once stably sorted by key.
fn same_sorted_arguments(a: &FieldTable, b: &FieldTable) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a.iter().zip(b.iter()).all(|(x, y)| x == y) {
        return true;
    }
    let mut x: Vec<(&ShortStr, &FieldValue)> = a.iter().collect();
    let mut y: Vec<(&ShortStr, &FieldValue)> = b.iter().collect();
    x.sort_by(|p, q| p.0.as_bytes().cmp(q.0.as_bytes()));
    y.sort_by(|p, q| p.0.as_bytes().cmp(q.0.as_bytes()));
    x == y
}

impl PartialEq for Binding {
    fn eq(&self, other: &Binding) -> bool {
        self.source == other.source
            && self.destination == other.destination
            && self.routing_key == other.routing_key
            && same_sorted_arguments(&self.arguments, &other.arguments)
    }
}

// Field values compare floats by bit pattern, so equality is reflexive.
impl Eq for Binding {}

/// How an exchange routes: the four AMQP exchange types (also the `x-delayed-type` of a
/// delayed-message exchange).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoutingKind {
    /// Exact routing-key match.
    Direct,
    /// Every bound destination.
    Fanout,
    /// Dotted-word patterns with `*` (one word) and `#` (zero or more words).
    Topic,
    /// Header values, per the binding's `x-match`.
    Headers,
}

impl RoutingKind {
    /// The kind named by an exchange type name (`direct`, `fanout`, `topic`, `headers`).
    pub fn from_name(name: &str) -> Option<RoutingKind> {
        match name {
            "direct" => Some(RoutingKind::Direct),
            "fanout" => Some(RoutingKind::Fanout),
            "topic" => Some(RoutingKind::Topic),
            "headers" => Some(RoutingKind::Headers),
            _ => None,
        }
    }

    /// The exchange type name.
    pub fn name(self) -> &'static str {
        match self {
            RoutingKind::Direct => "direct",
            RoutingKind::Fanout => "fanout",
            RoutingKind::Topic => "topic",
            RoutingKind::Headers => "headers",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(name: &str) -> Destination {
        Destination::Queue(name.into())
    }

    #[test]
    fn identity_ignores_argument_order() {
        let a: FieldTable = [("a", FieldValue::I64(1)), ("b", FieldValue::I64(2))]
            .into_iter()
            .collect();
        let b: FieldTable = [("b", FieldValue::I64(2)), ("a", FieldValue::I64(1))]
            .into_iter()
            .collect();
        let x = Binding::new("x", q("q"), "k");
        assert_eq!(
            x.clone().with_arguments(a.clone()),
            x.clone().with_arguments(b)
        );
        assert_ne!(x.clone().with_arguments(a), x.clone());
    }

    #[test]
    fn identity_covers_every_part() {
        let base = Binding::new("x", q("q"), "k");
        assert_ne!(base, Binding::new("y", q("q"), "k"));
        assert_ne!(base, Binding::new("x", q("r"), "k"));
        assert_ne!(
            base,
            Binding::new("x", Destination::Exchange("q".into()), "k")
        );
        assert_ne!(base, Binding::new("x", q("q"), "l"));
        let typed = |v| {
            base.clone()
                .with_arguments([("a", v)].into_iter().collect())
        };
        assert_ne!(typed(FieldValue::I64(1)), typed(FieldValue::I32(1)));
    }

    #[test]
    fn kinds_round_trip_by_name() {
        for k in [
            RoutingKind::Direct,
            RoutingKind::Fanout,
            RoutingKind::Topic,
            RoutingKind::Headers,
        ] {
            assert_eq!(RoutingKind::from_name(k.name()), Some(k));
        }
        assert_eq!(RoutingKind::from_name("x-delayed-message"), None);
    }
}
