//! The one deadline scheduler: every deadline of the broker (a delayed message's release, a
//! queue's next message expiry, `x-expires`, a retry coming due) is an item here. What an item
//! is for is the caller's business: `T` carries it (the broker's scheduler keeps held messages
//! inside their items and calls its other clients back through them).
//!
//! Two tiers keep it fast however many items wait. Items due within [`HORIZON_MS`] sit in a
//! hierarchical timer wheel (O(1) insert and cancel); later ones wait in a [`FarTier`] ordered by
//! (due, sequence) and move into the wheel shortly before they are due, a batch at a time, so
//! the wheel stays small and its cascades short. A release then reads only what was touched at
//! most a horizon ago. (On a virtual machine, memory untouched for tens of seconds can cost
//! hundreds of microseconds per page to read again.)
//!
//! Time comes in as an argument; nothing here reads a clock. Items due in the same millisecond
//! come out in the order they were scheduled.

mod far_tier;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use dwellmq_timer::{Fired, TimerKey, TimerWheel};

pub use far_tier::{FarTier, MemoryFarTier};

/// How far ahead of now the wheel holds items; later ones wait in the far tier.
pub const HORIZON_MS: u64 = 1_000;

/// An item's identity: its due time and a sequence number that orders items due in the same
/// millisecond. Unique, and enough to find the item in either tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeadlineId {
    /// Due time, milliseconds since the Unix epoch.
    pub due_ms: u64,
    /// Scheduling order.
    pub seq: u64,
}

/// An item that came due.
#[derive(Debug)]
pub struct Due<T> {
    /// Its id.
    pub id: DeadlineId,
    /// The item.
    pub item: T,
    /// Whether it came straight from the far tier (it never moved into the wheel).
    pub from_far_tier: bool,
}

/// How a round of moving items into the wheel ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveIn {
    /// Everything due within the horizon is in the wheel.
    Done,
    /// The batch is full; more remain to move.
    More,
}

/// The scheduler. `T` is what an item carries; `F` keeps the items beyond the horizon.
#[derive(Debug)]
pub struct Scheduler<T, F = MemoryFarTier<T>> {
    wheel: TimerWheel<(u64, T)>,
    /// Sequence number → wheel key, for the items in the wheel (cancel, listing).
    in_wheel: BTreeMap<u64, TimerKey>,
    far: F,
    /// Every item due at or before this is in the wheel (or released).
    horizon_ms: u64,
    next_seq: u64,
    fired: Vec<Fired<(u64, T)>>,
}

impl<T, F: FarTier<T> + Default> Scheduler<T, F> {
    /// An empty scheduler at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Self::with_far_tier(now_ms, F::default(), 1)
    }
}

impl<T, F: FarTier<T>> Scheduler<T, F> {
    /// A scheduler at `now_ms` whose far tier is `far` (empty, or restored from a store whose
    /// items all have sequence numbers below `next_seq`).
    pub fn with_far_tier(now_ms: u64, far: F, next_seq: u64) -> Self {
        Scheduler {
            wheel: TimerWheel::new(now_ms),
            in_wheel: BTreeMap::new(),
            far,
            horizon_ms: now_ms.saturating_add(HORIZON_MS),
            next_seq,
            fired: Vec::new(),
        }
    }

    /// Schedules `item` at `due_ms`. Returns its id and whether the earliest wake-up moved
    /// earlier (whoever sleeps until [`Scheduler::next_wake`] must look again).
    pub fn schedule(&mut self, due_ms: u64, item: T) -> (DeadlineId, bool) {
        let id = DeadlineId {
            due_ms,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        (id, self.place(id, item))
    }

    /// Numbers a deadline at `due_ms` without scheduling it here: the caller keeps it elsewhere
    /// (a store's far tier) and hands it back with [`Scheduler::restore`] when it is near.
    pub fn allocate(&mut self, due_ms: u64) -> DeadlineId {
        let id = DeadlineId {
            due_ms,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        id
    }

    /// Every item due at or before this is in the wheel (or released); an item due later
    /// waits in the far tier.
    pub fn horizon_ms(&self) -> u64 {
        self.horizon_ms
    }

    /// Schedules `item` under the id it had before a restart (read back from a store); later
    /// items are numbered above it. Returns whether the earliest wake-up moved earlier.
    pub fn restore(&mut self, id: DeadlineId, item: T) -> bool {
        self.next_seq = self.next_seq.max(id.seq.saturating_add(1));
        self.place(id, item)
    }

    /// The sequence number the next scheduled or allocated item gets: every item numbered so
    /// far is below it.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Numbers later items from `seq` on at least (a store's items use the ones below).
    pub fn reserve_below(&mut self, seq: u64) {
        self.next_seq = self.next_seq.max(seq);
    }

    fn place(&mut self, id: DeadlineId, item: T) -> bool {
        let next_wake = self.next_wake();
        let due_ms = id.due_ms;
        let wake_ms = if due_ms <= self.horizon_ms {
            let key = self.wheel.insert(due_ms, (id.seq, item));
            self.in_wheel.insert(id.seq, key);
            due_ms
        } else {
            self.far.insert(id, item);
            // It must move into the wheel a horizon ahead of its due time.
            due_ms.saturating_sub(HORIZON_MS)
        };
        next_wake.is_none_or(|next| wake_ms < next)
    }

    /// When the scheduler must next act: the earliest due time in the wheel, or the moment the
    /// next far item must move in.
    pub fn next_wake(&self) -> Option<u64> {
        let moving_in = self
            .far
            .first()
            .map(|id| id.due_ms.saturating_sub(HORIZON_MS));
        match (self.wheel.next_due(), moving_in) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes everything due at `now_ms` into `out`, in (due, sequence) order: what fired in the
    /// wheel and what never moved in (the clock jumped, or moving in fell behind).
    pub fn take_due(&mut self, now_ms: u64, out: &mut Vec<Due<T>>) {
        let start = out.len();
        let mut fired = std::mem::take(&mut self.fired);
        self.wheel.advance(now_ms, &mut fired);
        for Fired {
            due_ms,
            value: (seq, item),
        } in fired.drain(..)
        {
            self.in_wheel.remove(&seq);
            out.push(Due {
                id: DeadlineId { due_ms, seq },
                item,
                from_far_tier: false,
            });
        }
        self.fired = fired;
        while let Some((id, item)) = self.far.pop_first_due(now_ms) {
            out.push(Due {
                id,
                item,
                from_far_tier: true,
            });
            self.horizon_ms = self.horizon_ms.max(now_ms);
        }
        // Items of the same millisecond may have entered the wheel out of sequence order (a
        // far tier kept elsewhere hands its items back with `restore`); nearly sorted already,
        // so this is linear.
        out[start..].sort_by_key(|d| d.id);
    }

    /// Moves up to `batch` far items due within the horizon of `now_ms` into the wheel, in
    /// (due, sequence) order; `on_move` sees each one (to warm its memory, or to update an index).
    pub fn move_in(
        &mut self,
        now_ms: u64,
        batch: usize,
        mut on_move: impl FnMut(DeadlineId, &T),
    ) -> MoveIn {
        let target = now_ms.saturating_add(HORIZON_MS);
        for _ in 0..batch {
            let Some((id, item)) = self.far.pop_first_due(target) else {
                self.horizon_ms = self.horizon_ms.max(target);
                return MoveIn::Done;
            };
            on_move(id, &item);
            let key = self.wheel.insert(id.due_ms, (id.seq, item));
            self.in_wheel.insert(id.seq, key);
            // Everything due before this item is in; later ones with its due time may not be,
            // so a new item due then must still queue behind them in the far tier.
            self.horizon_ms = self.horizon_ms.max(id.due_ms.saturating_sub(1));
        }
        MoveIn::More
    }

    /// Whether something in the wheel is due at `now_ms` (moving in fell behind).
    pub fn wheel_due(&self, now_ms: u64) -> bool {
        self.wheel.next_due().is_some_and(|due| due <= now_ms)
    }

    /// Cancels the item `id`; `None` if it is unknown or already taken.
    pub fn cancel(&mut self, id: DeadlineId) -> Option<T> {
        if let Some(item) = self.far.remove(id) {
            return Some(item);
        }
        let &key = self.in_wheel.get(&id.seq)?;
        if self.wheel.get(key).map(|(due, _)| due) != Some(id.due_ms) {
            return None;
        }
        self.in_wheel.remove(&id.seq);
        self.wheel.cancel(key).map(|(_, item)| item)
    }

    /// Whether `id` is in the far tier (not yet moved into the wheel).
    pub fn is_far(&self, id: DeadlineId) -> bool {
        self.far.get(id).is_some()
    }

    /// The item `id`, wherever it is.
    pub fn get(&self, id: DeadlineId) -> Option<&T> {
        if let Some(item) = self.far.get(id) {
            return Some(item);
        }
        let &key = self.in_wheel.get(&id.seq)?;
        match self.wheel.get(key) {
            Some((due, (_, item))) if due == id.due_ms => Some(item),
            _ => None,
        }
    }

    /// The items in the wheel, in no particular order.
    pub fn in_wheel(&self) -> impl Iterator<Item = (DeadlineId, &T)> {
        self.in_wheel_from(0)
    }

    /// The items in the wheel scheduled as `from_seq` or later, in sequence order (a scan
    /// that resumes where it stopped, a chunk per lock hold).
    pub fn in_wheel_from(&self, from_seq: u64) -> impl Iterator<Item = (DeadlineId, &T)> {
        self.in_wheel.range(from_seq..).filter_map(|(&seq, &key)| {
            let (due_ms, (_, item)) = self.wheel.get(key)?;
            Some((DeadlineId { due_ms, seq }, item))
        })
    }

    /// Removes every item in the wheel that `matches`, appending them to `out`.
    pub fn drain_wheel_where(&mut self, mut matches: impl FnMut(&T) -> bool, out: &mut Vec<T>) {
        let chosen: Vec<(u64, TimerKey)> = self
            .in_wheel
            .iter()
            .filter(|(_, &key)| {
                self.wheel
                    .get(key)
                    .is_some_and(|(_, (_, item))| matches(item))
            })
            .map(|(&seq, &key)| (seq, key))
            .collect();
        for (seq, key) in chosen {
            self.in_wheel.remove(&seq);
            out.extend(self.wheel.cancel(key).map(|(_, item)| item));
        }
    }

    /// Items waiting, in both tiers.
    pub fn len(&self) -> usize {
        self.wheel.len() + self.far.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
