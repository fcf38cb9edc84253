//! The disk tier's bounded views of the store's held index: windows of ids in (due, seq)
//! order read a page at a time, the catch-up with what fell due while the broker was down,
//! the exchanges whose messages stay on disk untouched, and the releases the tier has yet to
//! forget.

use std::collections::BTreeSet;
use std::sync::Arc;

use dwellmq_core::schedule::DeadlineId;
use dwellmq_store::{HeldView, Store, StoreError};
use parking_lot::Mutex;

use crate::broker::persist::CATCH_UP_PER_SECOND;

/// Ids read from the index per refill.
pub(in crate::broker::delayed) const WINDOW_BATCH: usize = 4096;

/// The window is cut back to [`WINDOW_BATCH`] ids once it holds more than this (holds due
/// before its end add to it); what is cut is read again later.
pub(super) const WINDOW_MAX: usize = 4 * WINDOW_BATCH;

/// A window holding fewer ids than this is refilled ahead, outside the lock
/// ([`DiskTier::begin_refill`]).
pub(super) const REFILL_AHEAD_BELOW: usize = WINDOW_BATCH / 4;

/// Stored ids whose `Release` was submitted: the wheel releases them without the disk tier's
/// lock (the timer thread never waits for it), and the tier forgets them as moved out the next
/// time it is used. Submitted first, noted here after: once noted, the index hides them.
#[derive(Default)]
pub(in crate::broker::delayed) struct ReleasedIds(Mutex<Vec<DeadlineId>>);

impl ReleasedIds {
    pub(in crate::broker::delayed) fn note(&self, ids: &[DeadlineId]) {
        self.0.lock().extend_from_slice(ids);
    }

    pub(super) fn take(&self) -> Vec<DeadlineId> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// The last id there can be: a range that never ends.
pub(super) const LAST_ID: DeadlineId = DeadlineId {
    due_ms: u64::MAX,
    seq: u64::MAX,
};

/// Exchanges (vhost, name) whose stored messages the tier leaves on disk: those the restore
/// kept and no declare took back yet. Few; shared with reads outside the lock.
#[derive(Debug, Clone, Default)]
pub(in crate::broker::delayed) struct KeptOnDisk(Arc<Vec<(String, String)>>);

impl KeptOnDisk {
    pub(in crate::broker::delayed) fn new(exchanges: Vec<(String, String)>) -> KeptOnDisk {
        KeptOnDisk(Arc::new(exchanges))
    }

    pub(super) fn contains(&self, vhost: &str, exchange: &str) -> bool {
        self.0.iter().any(|(v, x)| v == vhost && x == exchange)
    }

    /// Up to `limit` ids of the index strictly after `after`, without the kept exchanges'.
    pub(super) fn read(
        &self,
        view: &HeldView,
        after: Option<DeadlineId>,
        limit: usize,
    ) -> Result<Vec<DeadlineId>, StoreError> {
        if self.0.is_empty() {
            return view.delayed_ids(after, limit);
        }
        view.delayed_ids_skipping(after, limit, &|v, x| self.contains(v, x))
    }

    /// Takes `exchange` out; false if it was not kept.
    pub(super) fn remove(&mut self, vhost: &str, exchange: &str) -> bool {
        if !self.contains(vhost, exchange) {
            return false;
        }
        Arc::make_mut(&mut self.0).retain(|(v, x)| !(v == vhost && x == exchange));
        true
    }
}

/// Ids of one range of the index, in (due, seq) order.
#[derive(Debug)]
pub(super) struct Window {
    /// Every id the index shows at or before `loaded_to`, except those moved out and those
    /// of kept exchanges.
    pub(super) ids: BTreeSet<DeadlineId>,
    /// The last index id read (or the start of the range).
    pub(super) loaded_to: Option<DeadlineId>,
    /// The last refill found nothing more in the range.
    pub(super) exhausted: bool,
    /// The range ends with this id.
    pub(super) last: DeadlineId,
}

impl Window {
    pub(super) fn new(after: Option<DeadlineId>, last: DeadlineId) -> Window {
        Window {
            ids: BTreeSet::new(),
            loaded_to: after,
            exhausted: false,
            last,
        }
    }

    pub(super) fn loaded(&self, id: DeadlineId) -> bool {
        self.loaded_to.is_some_and(|last| id <= last)
    }

    pub(super) fn in_range(&self, id: DeadlineId) -> bool {
        id <= self.last
    }

    /// The earliest id, reading the next batch of the index if the window ran dry.
    pub(super) fn first(
        &mut self,
        store: &Store,
        moved_out: &BTreeSet<DeadlineId>,
        kept: &KeptOnDisk,
    ) -> Result<Option<DeadlineId>, StoreError> {
        if self.ids.is_empty() && !self.exhausted {
            let ids = kept.read(&store.held_view()?, self.loaded_to, WINDOW_BATCH)?;
            self.merge(ids, moved_out);
        }
        Ok(self.ids.first().copied())
    }

    /// Adds a page of the index read after `loaded_to` (all of it from one view).
    pub(super) fn merge(&mut self, ids: Vec<DeadlineId>, moved_out: &BTreeSet<DeadlineId>) {
        self.exhausted = ids.len() < WINDOW_BATCH;
        for id in ids {
            if !self.in_range(id) {
                self.exhausted = true;
                break;
            }
            self.loaded_to = Some(id);
            if !moved_out.contains(&id) {
                self.ids.insert(id);
            }
        }
    }

    /// A hold submitted: in the window if the window has read past it, otherwise left to a
    /// refill (which the window must then read again).
    pub(super) fn held(&mut self, id: DeadlineId) {
        if self.loaded(id) {
            self.ids.insert(id);
            self.bound();
        } else {
            self.exhausted = false;
        }
    }

    /// Whether a refill should be read ahead (outside the lock), before the window runs dry.
    pub(super) fn running_low(&self) -> bool {
        !self.exhausted && self.ids.len() < REFILL_AHEAD_BELOW
    }

    /// Keeps RAM bounded: cuts the window back to its first [`WINDOW_BATCH`] ids.
    pub(super) fn bound(&mut self) {
        if self.ids.len() <= WINDOW_MAX {
            return;
        }
        let Some(&cut) = self.ids.iter().nth(WINDOW_BATCH) else {
            return;
        };
        drop(self.ids.split_off(&cut));
        self.loaded_to = self.ids.last().copied();
        self.exhausted = false;
    }
}

/// Messages that fell due while the broker was down.
#[derive(Debug)]
pub(super) struct CatchUp {
    pub(super) window: Window,
    pub(super) start_ms: u64,
    /// How many were taken out in order so far.
    pub(super) taken: u64,
}

impl CatchUp {
    /// When the next one in line is released.
    pub(super) fn next_due_ms(&self) -> u64 {
        slot_ms(self.start_ms, self.taken)
    }
}

/// When the catch-up started at `start_ms` releases its message number `taken`.
pub(super) fn slot_ms(start_ms: u64, taken: u64) -> u64 {
    start_ms + taken * 1_000 / CATCH_UP_PER_SECOND
}
