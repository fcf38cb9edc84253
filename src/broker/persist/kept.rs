//! Stored queues that a restore could not bring back (kept on disk, named by the definitions
//! health check): a later declare of the same vhost and name takes over the stored id, so
//! the messages kept under it come back instead of being orphaned under a new id.

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

#[derive(Default)]
struct Kept {
    /// By (vhost, name): the queue and what the health check says of it.
    by_name: HashMap<(String, String), (KeptQueue, String)>,
    /// Kept bindings to a kept queue, by the queue's (vhost, name), each with what the health
    /// check says of it.
    bindings: HashMap<(String, String), Vec<(BindingDef, String)>>,
    /// What the health check no longer lists: those reattached since.
    reattached: HashSet<String>,
}

/// What a declare takes over: the kept queue, how the health check names it, and the kept
/// bindings leading to it.
pub(crate) struct Retaken {
    pub(crate) queue: KeptQueue,
    pub(crate) reported: String,
    pub(crate) bindings: Vec<(BindingDef, String)>,
}

/// The kept queues of the last restore.
#[derive(Default)]
pub(crate) struct KeptQueues {
    kept: Mutex<Kept>,
}

impl KeptQueues {
    /// The restore kept this queue; `reported` is how the health check names it.
    pub(crate) fn keep(&self, vhost: &str, name: &str, queue: KeptQueue, reported: String) {
        let mut kept = self.kept.lock();
        kept.reattached.remove(&reported);
        kept.by_name
            .insert((vhost.to_owned(), name.to_owned()), (queue, reported));
    }

    /// The restore kept this binding because its destination, a kept queue, was not restored.
    /// Returns false (and keeps nothing) if the queue is not one of the kept ones.
    pub(crate) fn keep_binding(&self, binding: &BindingDef, reported: String) -> bool {
        let mut kept = self.kept.lock();
        let queue = (binding.vhost.clone(), binding.destination.clone());
        if !kept.by_name.contains_key(&queue) {
            return false;
        }
        kept.bindings
            .entry(queue)
            .or_default()
            .push((binding.clone(), reported));
        true
    }

    /// A declare takes over the kept queue of this vhost and name, if there is one.
    pub(crate) fn take(&self, vhost: &str, name: &str) -> Option<Retaken> {
        let mut kept = self.kept.lock();
        let key = (vhost.to_owned(), name.to_owned());
        let (queue, reported) = kept.by_name.remove(&key)?;
        let bindings = kept.bindings.remove(&key).unwrap_or_default();
        kept.reattached.insert(reported.clone());
        Some(Retaken {
            queue,
            reported,
            bindings,
        })
    }

    /// A kept binding was restored by the declare that took its queue back.
    pub(crate) fn binding_reattached(&self, reported: String) {
        self.kept.lock().reattached.insert(reported);
    }

    /// A declare that took the queue back was itself taken back: everything stays kept.
    pub(crate) fn put_back(&self, vhost: &str, name: &str, retaken: Retaken) {
        let mut kept = self.kept.lock();
        kept.reattached.remove(&retaken.reported);
        let key = (vhost.to_owned(), name.to_owned());
        if !retaken.bindings.is_empty() {
            kept.bindings.insert(key.clone(), retaken.bindings);
        }
        kept.by_name.insert(key, (retaken.queue, retaken.reported));
    }

    /// Whether the health check's `reported` entry was reattached since the restore.
    pub(crate) fn was_reattached(&self, reported: &str) -> bool {
        self.kept.lock().reattached.contains(reported)
    }
}
