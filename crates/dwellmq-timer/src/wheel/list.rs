//! Intrusive doubly-linked lists of slab nodes, one per wheel slot.
//!
//! Links are slab indices stored in the entries themselves, so a slot costs
//! a few words regardless of how many entries it holds, and unlinking any
//! entry is O(1). Entries are only ever appended, so a list is always in
//! the order its entries arrived; the wheel relies on that to fire equal
//! due times in insertion order.

use super::slab::{Slab, NIL};

/// Head, tail and a cached minimum due time of one slot's entries.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotList {
    head: u32,
    tail: u32,
    /// A lower bound on every due time in the list; exact unless
    /// `min_is_stale`. Meaningless while the list is empty.
    min_due: u64,
    /// Set when the entry holding `min_due` was unlinked while others
    /// remained: the true minimum may now be larger.
    min_is_stale: bool,
}

impl SlotList {
    pub(super) const EMPTY: Self = Self {
        head: NIL,
        tail: NIL,
        min_due: u64::MAX,
        min_is_stale: false,
    };

    pub(super) fn is_empty(&self) -> bool {
        self.head == NIL
    }

    /// The first entry, if any.
    pub(super) fn head(&self) -> Option<u32> {
        (self.head != NIL).then_some(self.head)
    }

    /// Appends node `index` (already holding its due time) and records
    /// `list_id` in it so it can later be unlinked without a search.
    pub(super) fn push_back<T>(&mut self, slab: &mut Slab<T>, index: u32, list_id: u16) {
        let old_tail = self.tail;
        let entry = slab.entry_mut(index);
        entry.prev = old_tail;
        entry.next = NIL;
        entry.list = list_id;
        let due = entry.due;

        if old_tail == NIL {
            self.head = index;
        } else {
            slab.entry_mut(old_tail).next = index;
        }
        self.tail = index;

        // Everything already here is >= the (possibly stale) bound, so a due
        // time at or below it is the exact new minimum.
        if self.head == index || due <= self.min_due {
            self.min_due = due;
            self.min_is_stale = false;
        }
    }

    /// Unlinks node `index`, which must be in this list. The node keeps its
    /// entry; the caller frees or relinks it.
    pub(super) fn unlink<T>(&mut self, slab: &mut Slab<T>, index: u32) {
        let entry = slab.entry(index);
        let (prev, next, due) = (entry.prev, entry.next, entry.due);

        if prev == NIL {
            self.head = next;
        } else {
            slab.entry_mut(prev).next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            slab.entry_mut(next).prev = prev;
        }

        if self.head == NIL {
            *self = Self::EMPTY;
        } else if due == self.min_due {
            // Finding the next minimum would cost a walk; defer it to the
            // rare reader that needs it (`min_due`).
            self.min_is_stale = true;
        }
    }

    /// Empties the list and returns its former head. The nodes keep their
    /// `next` links, so the caller can walk the detached chain.
    pub(super) fn take(&mut self) -> u32 {
        let head = self.head;
        *self = Self::EMPTY;
        head
    }

    /// The exact earliest due time in the list: the cached minimum, or a
    /// walk over the list when a cancellation made it stale.
    pub(super) fn min_due<T>(&self, slab: &Slab<T>) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        if !self.min_is_stale {
            return Some(self.min_due);
        }
        let mut min = u64::MAX;
        let mut cursor = self.head;
        while cursor != NIL {
            let entry = slab.entry(cursor);
            min = min.min(entry.due);
            cursor = entry.next;
        }
        Some(min)
    }
}
