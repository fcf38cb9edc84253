//! Stored exchanges that a restore could not bring back (kept on disk, named by the
//! definitions health check), with the bindings from and to them and, for a durable delayed
//! exchange, the counts of the messages it holds on disk: a later declare of the same vhost
//! and name takes them all back, as a declare of a kept queue does (`kept.rs`).

use std::collections::{HashMap, HashSet};

use dwellmq_store::{BindingDef, DestinationKind};
use parking_lot::Mutex;

/// A kept exchange.
struct KeptExchange {
    /// Its stored type: a declare must name the same one to take it back.
    kind: String,
    /// How the health check names it.
    reported: String,
    /// Messages it holds on disk, and their body bytes.
    held: (u64, u64),
}

#[derive(Default)]
struct Kept {
    by_name: HashMap<(String, String), KeptExchange>,
    /// Kept bindings from or to a kept exchange, by that exchange's (vhost, name), each with
    /// what the health check says of it.
    bindings: HashMap<(String, String), Vec<(BindingDef, String)>>,
    /// What the health check no longer lists: those reattached since.
    reattached: HashSet<String>,
}

/// What a declare takes back: how the health check names the exchange, the counts of the
/// messages it holds on disk, and the kept bindings from and to it.
pub(crate) struct RetakenExchange {
    kind: String,
    pub(crate) reported: String,
    pub(crate) held: (u64, u64),
    pub(crate) bindings: Vec<(BindingDef, String)>,
}

/// The kept exchanges of the last restore.
#[derive(Default)]
pub(crate) struct KeptExchanges {
    kept: Mutex<Kept>,
}

impl KeptExchanges {
    /// The restore kept this exchange of type `kind`; `reported` is how the health check
    /// names it.
    pub(crate) fn keep(&self, vhost: &str, name: &str, kind: &str, reported: String) {
        let mut kept = self.kept.lock();
        kept.reattached.remove(&reported);
        kept.by_name.insert(
            (vhost.to_owned(), name.to_owned()),
            KeptExchange {
                kind: kind.to_owned(),
                reported,
                held: (0, 0),
            },
        );
    }

    /// The kept exchange holds `count` messages of `bytes` body bytes on disk. False if it is
    /// not a kept exchange.
    pub(crate) fn keep_held(&self, vhost: &str, name: &str, count: u64, bytes: u64) -> bool {
        let mut kept = self.kept.lock();
        match kept.by_name.get_mut(&(vhost.to_owned(), name.to_owned())) {
            Some(exchange) => {
                exchange.held = (count, bytes);
                true
            }
            None => false,
        }
    }

    /// The stored type of the kept exchange `name`, if it is one.
    pub(crate) fn kind_of(&self, vhost: &str, name: &str) -> Option<String> {
        self.kept
            .lock()
            .by_name
            .get(&(vhost.to_owned(), name.to_owned()))
            .map(|x| x.kind.clone())
    }

    /// The restore kept this binding; it comes back with each kept exchange at either end.
    /// Returns false (and keeps nothing) if neither end is a kept exchange.
    pub(crate) fn keep_binding(&self, binding: &BindingDef, reported: String) -> bool {
        let mut kept = self.kept.lock();
        let mut ends = vec![binding.source.clone()];
        if binding.destination_kind == DestinationKind::Exchange
            && binding.destination != binding.source
        {
            ends.push(binding.destination.clone());
        }
        let mut any = false;
        for end in ends {
            let key = (binding.vhost.clone(), end);
            if kept.by_name.contains_key(&key) {
                kept.bindings
                    .entry(key)
                    .or_default()
                    .push((binding.clone(), reported.clone()));
                any = true;
            }
        }
        any
    }

    /// A declare takes back the kept exchange of this vhost and name, if there is one.
    pub(crate) fn take(&self, vhost: &str, name: &str) -> Option<RetakenExchange> {
        let mut kept = self.kept.lock();
        let key = (vhost.to_owned(), name.to_owned());
        let exchange = kept.by_name.remove(&key)?;
        let bindings = kept.bindings.remove(&key).unwrap_or_default();
        kept.reattached.insert(exchange.reported.clone());
        Some(RetakenExchange {
            kind: exchange.kind,
            reported: exchange.reported,
            held: exchange.held,
            bindings,
        })
    }

    /// A kept binding was restored by the declare that took an exchange back.
    pub(crate) fn binding_reattached(&self, reported: String) {
        self.kept.lock().reattached.insert(reported);
    }

    /// A declare that took the exchange back was itself taken back (its definition could not
    /// be written): everything stays kept.
    pub(crate) fn put_back(&self, vhost: &str, name: &str, retaken: RetakenExchange) {
        let mut kept = self.kept.lock();
        kept.reattached.remove(&retaken.reported);
        for (_, reported) in &retaken.bindings {
            kept.reattached.remove(reported);
        }
        let key = (vhost.to_owned(), name.to_owned());
        if !retaken.bindings.is_empty() {
            kept.bindings
                .entry(key.clone())
                .or_default()
                .extend(retaken.bindings);
        }
        kept.by_name.insert(
            key,
            KeptExchange {
                kind: retaken.kind,
                reported: retaken.reported,
                held: retaken.held,
            },
        );
    }

    /// Whether the health check's `reported` entry was reattached since the restore.
    pub(crate) fn was_reattached(&self, reported: &str) -> bool {
        self.kept.lock().reattached.contains(reported)
    }
}
