//! Where deadlines beyond the scheduler's horizon wait, ordered by (due, sequence).

use std::collections::BTreeMap;

use super::DeadlineId;

/// The far tier: everything not due within the horizon. In memory today; the store puts a
/// redb table (keyed by due time and sequence) behind the same trait, so that RAM stays flat
/// however many deadlines wait.
pub trait FarTier<T> {
    /// Adds an item.
    fn insert(&mut self, id: DeadlineId, item: T);
    /// Takes an item out.
    fn remove(&mut self, id: DeadlineId) -> Option<T>;
    /// Looks at an item (listing).
    fn get(&self, id: DeadlineId) -> Option<&T>;
    /// The earliest item's id.
    fn first(&self) -> Option<DeadlineId>;
    /// Takes the earliest item if it is due at or before `up_to_ms`.
    fn pop_first_due(&mut self, up_to_ms: u64) -> Option<(DeadlineId, T)>;
    /// How many items wait.
    fn len(&self) -> usize;
    /// Whether none waits.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The far tier in memory: a B-tree (a hash map holding millions of entries stalls everything
/// using it whenever it rehashes).
#[derive(Debug)]
pub struct MemoryFarTier<T> {
    items: BTreeMap<DeadlineId, T>,
}

impl<T> Default for MemoryFarTier<T> {
    fn default() -> Self {
        MemoryFarTier {
            items: BTreeMap::new(),
        }
    }
}

impl<T> FarTier<T> for MemoryFarTier<T> {
    fn insert(&mut self, id: DeadlineId, item: T) {
        self.items.insert(id, item);
    }

    fn remove(&mut self, id: DeadlineId) -> Option<T> {
        self.items.remove(&id)
    }

    fn get(&self, id: DeadlineId) -> Option<&T> {
        self.items.get(&id)
    }

    fn first(&self) -> Option<DeadlineId> {
        self.items.first_key_value().map(|(&id, _)| id)
    }

    fn pop_first_due(&mut self, up_to_ms: u64) -> Option<(DeadlineId, T)> {
        let entry = self.items.first_entry()?;
        if entry.key().due_ms > up_to_ms {
            return None;
        }
        let id = *entry.key();
        Some((id, entry.remove()))
    }

    fn len(&self) -> usize {
        self.items.len()
    }
}
