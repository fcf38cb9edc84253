//! Direct routing: an exact match of the routing key, one hash lookup per message.

use std::collections::HashMap;

use dwellmq_codec::ShortStr;

use crate::routing::destinations::DestinationCounts;
use crate::routing::Destination;

/// The bindings of a direct exchange, indexed by binding key.
#[derive(Debug, Clone, Default)]
pub(crate) struct DirectIndex {
    by_key: HashMap<ShortStr, DestinationCounts>,
}

impl DirectIndex {
    /// Adds one binding of `key` to `destination`.
    pub(crate) fn insert(&mut self, key: &ShortStr, destination: &Destination) {
        self.by_key.entry(key.clone()).or_default().add(destination);
    }

    /// Removes one binding of `key` to `destination`.
    pub(crate) fn remove(&mut self, key: &str, destination: &Destination) {
        if let Some(set) = self.by_key.get_mut(key) {
            set.remove(destination);
            if set.is_empty() {
                self.by_key.remove(key);
            }
        }
    }

    /// Whether any binding has exactly `key`.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.by_key.contains_key(key)
    }

    /// Appends the destinations bound with exactly `key` (each once).
    pub(crate) fn collect(&self, key: &str, out: &mut Vec<Destination>) {
        if let Some(set) = self.by_key.get(key) {
            set.extend_into(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_keys_only() {
        let mut d = DirectIndex::default();
        let q = Destination::Queue("q".into());
        d.insert(&"a".into(), &q);
        d.insert(&"".into(), &q);
        let mut out = vec![];
        d.collect("a", &mut out);
        d.collect("A", &mut out);
        d.collect("a.b", &mut out);
        assert_eq!(out, vec![q.clone()]);
        out.clear();
        d.collect("", &mut out);
        assert_eq!(out, vec![q.clone()]);
        d.remove("a", &q);
        d.remove("", &q);
        assert!(d.by_key.is_empty());
    }
}
