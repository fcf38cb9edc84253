//! Stored queues that a restore could not bring back (kept on disk, named by the definitions
//! health check): a later declare of the same vhost and name takes over the stored id, so
//! the messages kept under it come back instead of being orphaned under a new id.

use std::collections::{HashMap, HashSet};

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
    /// What the health check no longer lists: those reattached since.
    reattached: HashSet<String>,
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

    /// A declare takes over the kept queue of this vhost and name, if there is one.
    pub(crate) fn take(&self, vhost: &str, name: &str) -> Option<(KeptQueue, String)> {
        let mut kept = self.kept.lock();
        let taken = kept.by_name.remove(&(vhost.to_owned(), name.to_owned()))?;
        kept.reattached.insert(taken.1.clone());
        Some(taken)
    }

    /// Whether the health check's `reported` entry was reattached since the restore.
    pub(crate) fn was_reattached(&self, reported: &str) -> bool {
        self.kept.lock().reattached.contains(reported)
    }
}
