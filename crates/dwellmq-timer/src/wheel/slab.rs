//! Entry storage: a `Vec` of nodes with a free list and per-node
//! generations.
//!
//! Every pending timer occupies one node; a removed node goes on the free
//! list and is reused by the next insert, so a steady-state wheel does not
//! allocate. Each node's generation is bumped when it is freed, which turns
//! a [`TimerKey`] held past its timer's lifetime into a detectable stale key
//! instead of a handle to whichever timer reuses the node.

use super::TimerKey;

/// "No node": terminates free and slot lists. Never a valid index, which
/// caps the slab at `u32::MAX` nodes.
pub(super) const NIL: u32 = u32::MAX;

/// A pending timer plus its place in a slot list.
#[derive(Debug)]
pub(super) struct Entry<T> {
    pub(super) due: u64,
    pub(super) value: T,
    /// Neighbours in the slot list (`NIL` at the ends).
    pub(super) prev: u32,
    pub(super) next: u32,
    /// Which slot list holds this entry (see `TimerWheel::lists`).
    pub(super) list: u16,
}

#[derive(Debug)]
enum NodeState<T> {
    Vacant { next_free: u32 },
    Occupied(Entry<T>),
}

#[derive(Debug)]
struct Node<T> {
    generation: u32,
    state: NodeState<T>,
}

/// The arena holding every pending entry.
#[derive(Debug)]
pub(super) struct Slab<T> {
    nodes: Vec<Node<T>>,
    free_head: u32,
    len: usize,
}

impl<T> Slab<T> {
    pub(super) fn new() -> Self {
        Self {
            nodes: Vec::new(),
            free_head: NIL,
            len: 0,
        }
    }

    /// Number of occupied nodes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Stores `entry` in a free node (reusing one if possible).
    ///
    /// # Panics
    ///
    /// If `u32::MAX` entries are already stored (which needs well over
    /// 100 GiB of memory).
    pub(super) fn insert(&mut self, entry: Entry<T>) -> TimerKey {
        if let Some(node) = self.nodes.get_mut(self.free_head as usize) {
            let index = self.free_head;
            if let NodeState::Vacant { next_free } = node.state {
                self.free_head = next_free;
            }
            node.state = NodeState::Occupied(entry);
            self.len += 1;
            return TimerKey {
                index,
                generation: node.generation,
            };
        }
        let index = u32::try_from(self.nodes.len())
            .ok()
            .filter(|&index| index != NIL)
            .expect("timer wheel cannot hold more than u32::MAX entries");
        self.nodes.push(Node {
            generation: 0,
            state: NodeState::Occupied(entry),
        });
        self.len += 1;
        TimerKey {
            index,
            generation: 0,
        }
    }

    /// Whether `key` names a timer that is still stored.
    pub(super) fn contains(&self, key: TimerKey) -> bool {
        matches!(
            self.nodes.get(key.index as usize),
            Some(Node { generation, state: NodeState::Occupied(_) }) if *generation == key.generation
        )
    }

    /// Frees node `index` and returns its entry.
    ///
    /// `index` must be occupied: callers only pass indices taken from slot
    /// lists or validated keys.
    pub(super) fn remove(&mut self, index: u32) -> Entry<T> {
        let node = &mut self.nodes[index as usize];
        let vacant = NodeState::Vacant {
            next_free: self.free_head,
        };
        match std::mem::replace(&mut node.state, vacant) {
            NodeState::Occupied(entry) => {
                // Wrapping: a key would only be confused with a later timer
                // after 2^32 reuses of its node while the key is still held.
                node.generation = node.generation.wrapping_add(1);
                self.free_head = index;
                self.len -= 1;
                entry
            }
            NodeState::Vacant { .. } => unreachable!("removed a vacant timer node"),
        }
    }

    /// The entry in occupied node `index`.
    pub(super) fn entry(&self, index: u32) -> &Entry<T> {
        match &self.nodes[index as usize].state {
            NodeState::Occupied(entry) => entry,
            NodeState::Vacant { .. } => unreachable!("read a vacant timer node"),
        }
    }

    /// The entry in occupied node `index`, mutably.
    pub(super) fn entry_mut(&mut self, index: u32) -> &mut Entry<T> {
        match &mut self.nodes[index as usize].state {
            NodeState::Occupied(entry) => entry,
            NodeState::Vacant { .. } => unreachable!("wrote a vacant timer node"),
        }
    }
}
