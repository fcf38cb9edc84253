//! Stored definitions a restore could not bring back (kept on disk, named by the definitions
//! health check), one registry type for queues and exchanges alike: what is kept of each
//! (a queue's store id, an exchange's type and held-message counts), the kept bindings that
//! come back with it, and which of the health check's entries a declare has taken back since.
//! A later declare of the same vhost and name takes it over, so that what is stored under it
//! comes back instead of being orphaned.

use std::collections::{HashMap, HashSet};

use dwellmq_store::BindingDef;
use parking_lot::Mutex;

/// A kept queue's place in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeptQueue {
    /// Its id: its messages are stored under it.
    pub(crate) id: u64,
    /// The position its next message takes.
    pub(crate) next_seq: u64,
}

/// A kept exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeptExchange {
    /// Its stored type: a declare must name the same one to take it back.
    pub(crate) kind: String,
    /// Messages it holds on disk, and their body bytes.
    pub(crate) held: (u64, u64),
}

/// A kept binding and how the health check names it.
pub(crate) type KeptBinding = (BindingDef, String);

/// What a declare takes over: what was kept, how the health check names it, and the kept
/// bindings that come back with it.
pub(crate) struct Retaken<T> {
    pub(crate) kept: T,
    pub(crate) reported: String,
    pub(crate) bindings: Vec<KeptBinding>,
}

type Key = (String, String);

struct Registry<T> {
    /// By (vhost, name): what is kept and how the health check names it.
    by_name: HashMap<Key, (T, String)>,
    /// Kept bindings with an end at a kept definition, by that definition's (vhost, name).
    bindings: HashMap<Key, Vec<KeptBinding>>,
    /// What the health check no longer lists: taken back since.
    reattached: HashSet<String>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            by_name: HashMap::new(),
            bindings: HashMap::new(),
            reattached: HashSet::new(),
        }
    }
}

/// The kept definitions of one kind, from the last restore.
pub(crate) struct Kept<T> {
    registry: Mutex<Registry<T>>,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept {
            registry: Mutex::new(Registry::default()),
        }
    }
}

fn key(vhost: &str, name: &str) -> Key {
    (vhost.to_owned(), name.to_owned())
}

impl<T> Kept<T> {
    /// The restore kept `name` of `vhost`; `reported` is how the health check names it.
    pub(crate) fn keep(&self, vhost: &str, name: &str, kept: T, reported: String) {
        let mut registry = self.registry.lock();
        registry.reattached.remove(&reported);
        registry.by_name.insert(key(vhost, name), (kept, reported));
    }

    /// The restore kept `binding`, one of whose ends is `end` (of the binding's vhost): it
    /// comes back with that end if `end` is kept. False (nothing kept) if it is not.
    pub(crate) fn keep_binding(&self, end: &str, binding: &BindingDef, reported: String) -> bool {
        let mut registry = self.registry.lock();
        let at = key(&binding.vhost, end);
        if !registry.by_name.contains_key(&at) {
            return false;
        }
        registry
            .bindings
            .entry(at)
            .or_default()
            .push((binding.clone(), reported));
        true
    }

    /// Reads what is kept of `name`, if it is kept.
    pub(crate) fn read<R>(&self, vhost: &str, name: &str, f: impl FnOnce(&T) -> R) -> Option<R> {
        self.registry
            .lock()
            .by_name
            .get(&key(vhost, name))
            .map(|(kept, _)| f(kept))
    }

    /// Changes what is kept of `name`; false if it is not kept.
    pub(crate) fn update(&self, vhost: &str, name: &str, f: impl FnOnce(&mut T)) -> bool {
        match self.registry.lock().by_name.get_mut(&key(vhost, name)) {
            Some((kept, _)) => {
                f(kept);
                true
            }
            None => false,
        }
    }

    /// A declare takes over what is kept of `name` in `vhost`, if anything is.
    pub(crate) fn take(&self, vhost: &str, name: &str) -> Option<Retaken<T>> {
        let mut registry = self.registry.lock();
        let at = key(vhost, name);
        let (kept, reported) = registry.by_name.remove(&at)?;
        let bindings = registry.bindings.remove(&at).unwrap_or_default();
        registry.reattached.insert(reported.clone());
        Some(Retaken {
            kept,
            reported,
            bindings,
        })
    }

    /// A kept binding was restored by the declare that took one of its ends back.
    pub(crate) fn binding_reattached(&self, reported: String) {
        self.registry.lock().reattached.insert(reported);
    }

    /// The declare that took `name` back was itself taken back (its definition could not be
    /// written): everything stays kept, and the health check lists it all again.
    pub(crate) fn put_back(&self, vhost: &str, name: &str, retaken: Retaken<T>) {
        let mut registry = self.registry.lock();
        registry.reattached.remove(&retaken.reported);
        for (_, reported) in &retaken.bindings {
            registry.reattached.remove(reported);
        }
        let at = key(vhost, name);
        if !retaken.bindings.is_empty() {
            registry
                .bindings
                .entry(at.clone())
                .or_default()
                .extend(retaken.bindings);
        }
        registry
            .by_name
            .insert(at, (retaken.kept, retaken.reported));
    }

    /// Whether the health check's `reported` entry was taken back since the restore.
    pub(crate) fn was_reattached(&self, reported: &str) -> bool {
        self.registry.lock().reattached.contains(reported)
    }
}
