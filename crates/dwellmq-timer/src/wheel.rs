//! The hierarchical timing wheel. See the crate docs for the design.

mod layout;
mod list;
mod slab;
#[cfg(test)]
mod tests;

use std::fmt;

use layout::{level_for, slot_for, slot_start, LEVELS, SLOTS};
use list::SlotList;
use slab::{Entry, Slab, NIL};

/// Index of the list holding entries that were already overdue (due before
/// `now`) when inserted; the wheel lists come first, `level * SLOTS + slot`.
const OVERDUE_LIST: usize = LEVELS * SLOTS;
const LIST_COUNT: usize = OVERDUE_LIST + 1;

/// Handle to a pending timer, returned by [`TimerWheel::insert`] and
/// accepted by [`TimerWheel::cancel`].
///
/// Keys are cheap to copy and store. Once their timer fires or is cancelled
/// a key goes stale for good: even after the wheel reuses its storage for a
/// new timer, the old key does not match it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerKey {
    index: u32,
    generation: u32,
}

/// A timer that [`TimerWheel::advance`] found due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired<T> {
    /// The due time the timer was inserted with, in milliseconds.
    pub due_ms: u64,
    /// The value the timer was inserted with.
    pub value: T,
}

/// A hierarchical timing wheel with millisecond resolution.
///
/// Holds values until their due time, then hands them back from
/// [`advance`](Self::advance) in `(due time, insertion order)` order.
/// Insert and cancel are O(1); advancing costs O(levels) per occupied slot
/// it passes, however much time it skips. The wheel has no clock of its
/// own: callers pass the time in, typically from a [`crate::Clock`].
pub struct TimerWheel<T> {
    /// The time of the last advance; every pending entry outside the
    /// overdue list is due at or after it.
    now: u64,
    slab: Slab<T>,
    /// `LEVELS * SLOTS` slot lists followed by the overdue list.
    lists: Box<[SlotList]>,
    /// Bit `s` of `occupied[level]` is set iff that slot's list is
    /// non-empty, so the earliest slot is found without visiting slots.
    occupied: [u64; LEVELS],
    /// Reused buffer for sorting overdue entries, so firing them does not
    /// allocate in steady state.
    overdue_order: Vec<u32>,
}

impl<T> TimerWheel<T> {
    /// An empty wheel whose time is `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self {
            now: now_ms,
            slab: Slab::new(),
            lists: vec![SlotList::EMPTY; LIST_COUNT].into_boxed_slice(),
            occupied: [0; LEVELS],
            overdue_order: Vec::new(),
        }
    }

    /// The wheel's time: the latest time passed to [`advance`](Self::advance)
    /// (or to [`new`](Self::new)).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// Number of pending timers.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// Whether no timers are pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Schedules `value` to fire at `due_ms`. O(1).
    ///
    /// Any due time is accepted. One at or before [`now`](Self::now) fires
    /// on the next call to [`advance`](Self::advance), whatever time that
    /// call passes.
    ///
    /// # Panics
    ///
    /// If `u32::MAX` timers are already pending (well over 100 GiB of
    /// memory): keys address entries with 32 bits.
    pub fn insert(&mut self, due_ms: u64, value: T) -> TimerKey {
        let key = self.slab.insert(Entry {
            due: due_ms,
            value,
            prev: NIL,
            next: NIL,
            list: 0,
        });
        self.link(key.index);
        key
    }

    /// Whether `key`'s timer is still pending.
    pub fn contains(&self, key: TimerKey) -> bool {
        self.slab.contains(key)
    }

    /// The value of `key`'s timer and its due time, if it is still pending. O(1).
    pub fn get(&self, key: TimerKey) -> Option<(u64, &T)> {
        if !self.slab.contains(key) {
            return None;
        }
        let entry = self.slab.entry(key.index);
        Some((entry.due, &entry.value))
    }

    /// Removes `key`'s timer and returns its value. O(1).
    ///
    /// Returns `None` if the timer already fired or was cancelled.
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        if !self.slab.contains(key) {
            return None;
        }
        self.unlink(key.index);
        Some(self.slab.remove(key.index).value)
    }

    /// The exact earliest due time among pending timers; `None` when empty.
    ///
    /// Finding the earliest slot is O(levels). Its minimum is cached, except
    /// right after a cancel removed the slot's earliest entry: then, for
    /// slots above the lowest level, the slot's entries are walked. Cancel
    /// never makes `next_due` earlier, so a caller already sleeping until an
    /// earlier time may skip asking again after a cancel.
    pub fn next_due(&self) -> Option<u64> {
        // Overdue entries are all due before `now`, everything else at or
        // after it.
        if let Some(due) = self.lists[OVERDUE_LIST].min_due(&self.slab) {
            return Some(due);
        }
        let (level, slot) = self.earliest_slot()?;
        if level == 0 {
            // Every entry in a level-0 slot is due exactly at its start.
            return Some(slot_start(self.now, 0, slot));
        }
        self.lists[level * SLOTS + slot].min_due(&self.slab)
    }

    /// Moves time to `now_ms` and appends every timer due at or before it to
    /// `fired`, ordered by due time and then by insertion order.
    ///
    /// Time never moves backwards: an earlier `now_ms` leaves
    /// [`now`](Self::now) unchanged and only fires timers that were
    /// inserted already due. Empty stretches are skipped, so a jump of
    /// years costs no more than one of milliseconds.
    pub fn advance(&mut self, now_ms: u64, fired: &mut Vec<Fired<T>>) {
        self.advance_with(now_ms, |due_ms, value| fired.push(Fired { due_ms, value }));
    }

    /// Like [`advance`](Self::advance), but hands each fired timer's due time
    /// and value to `on_fire` instead of collecting them.
    ///
    /// If `on_fire` panics, the timers not yet handed over stay pending and
    /// the wheel stays consistent.
    pub fn advance_with<F>(&mut self, now_ms: u64, mut on_fire: F)
    where
        F: FnMut(u64, T),
    {
        let target = now_ms.max(self.now);
        self.fire_overdue(&mut on_fire);

        // Visit occupied slots in time order. Stopping `now` at each slot's
        // start keeps every pending entry on the level that `level_for`
        // gives for the current `now`, which is what makes the lowest
        // occupied slot the earliest one.
        while let Some((level, slot)) = self.earliest_slot() {
            let start = slot_start(self.now, level, slot);
            if start > target {
                break;
            }
            self.now = start;
            let list_id = level * SLOTS + slot;
            if level == 0 {
                self.fire_list(list_id, &mut on_fire);
            } else {
                self.cascade(list_id);
            }
        }
        self.now = target;
    }

    /// The lowest occupied level and its first occupied slot: the slot with
    /// the earliest entries.
    ///
    /// Occupied slots on a level are never behind `now`'s digit there, so
    /// the lowest set bit is also the earliest in time.
    fn earliest_slot(&self) -> Option<(usize, usize)> {
        self.occupied
            .iter()
            .enumerate()
            .find(|(_, &mask)| mask != 0)
            .map(|(level, mask)| (level, mask.trailing_zeros() as usize))
    }

    /// Appends slab node `index` to the list its due time belongs in.
    fn link(&mut self, index: u32) {
        let due = self.slab.entry(index).due;
        let list_id = if due < self.now {
            OVERDUE_LIST
        } else {
            let level = level_for(self.now, due);
            let slot = slot_for(due, level);
            self.occupied[level] |= 1 << slot;
            level * SLOTS + slot
        };
        // LIST_COUNT is 705, so list ids fit in the entry's u16.
        self.lists[list_id].push_back(&mut self.slab, index, list_id as u16);
    }

    /// Removes slab node `index` from its list, keeping `occupied` in sync.
    fn unlink(&mut self, index: u32) {
        let list_id = usize::from(self.slab.entry(index).list);
        let list = &mut self.lists[list_id];
        list.unlink(&mut self.slab, index);
        if list.is_empty() {
            self.mark_empty(list_id);
        }
    }

    fn mark_empty(&mut self, list_id: usize) {
        if list_id != OVERDUE_LIST {
            self.occupied[list_id / SLOTS] &= !(1 << (list_id % SLOTS));
        }
    }

    /// Fires a level-0 slot, whose entries share one due time and so are
    /// already in firing order.
    fn fire_list<F: FnMut(u64, T)>(&mut self, list_id: usize, on_fire: &mut F) {
        // One entry at a time, so a panicking `on_fire` leaves the rest
        // linked.
        while let Some(index) = self.lists[list_id].head() {
            self.unlink(index);
            let entry = self.slab.remove(index);
            on_fire(entry.due, entry.value);
        }
    }

    /// Moves the entries of a higher-level slot down to the levels they
    /// belong on now that `now` has reached the slot's start.
    ///
    /// Walking the list front to back and appending keeps insertion order
    /// among equal due times: they all sit in this one slot and all land in
    /// the same lower slot.
    fn cascade(&mut self, list_id: usize) {
        self.mark_empty(list_id);
        let mut cursor = self.lists[list_id].take();
        while cursor != NIL {
            let next = self.slab.entry(cursor).next;
            self.link(cursor);
            cursor = next;
        }
    }

    /// Fires entries that were inserted already due, sorted by due time.
    ///
    /// The overdue list is in insertion order and the sort is stable, so
    /// equal due times keep insertion order. All of these are due before
    /// `now`, hence before anything else in the wheel.
    fn fire_overdue<F: FnMut(u64, T)>(&mut self, on_fire: &mut F) {
        let Some(head) = self.lists[OVERDUE_LIST].head() else {
            return;
        };
        let mut order = std::mem::take(&mut self.overdue_order);
        order.clear();
        let mut cursor = head;
        while cursor != NIL {
            order.push(cursor);
            cursor = self.slab.entry(cursor).next;
        }
        order.sort_by_key(|&index| self.slab.entry(index).due);

        for &index in &order {
            self.unlink(index);
            let entry = self.slab.remove(index);
            on_fire(entry.due, entry.value);
        }
        order.clear();
        self.overdue_order = order;
    }
}

impl<T> fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("now", &self.now)
            .field("len", &self.len())
            .field("next_due", &self.next_due())
            .finish_non_exhaustive()
    }
}
