//! The scheduler's far tier on the store: the ids of held messages in a bounded window in RAM,
//! everything else (bodies, later ids) on disk. See DESIGN.md, "The scheduler's far tier".
//!
//! The broker submits `Op::Hold` when a message is held (its confirm waits for that commit) and
//! `Op::Release` once it is routed; this type only tracks ids. A snapshot does not show
//! uncommitted holds, so ids inserted beyond the window stay in RAM (`pending`) until a snapshot
//! shows them committed; and ids taken out beyond the window are remembered (`taken`) until a
//! snapshot no longer shows them, so that a refill does not bring them back.

use std::collections::BTreeSet;
use std::sync::Arc;

use dwellmq_core::schedule::DeadlineId;

use crate::error::Result;
use crate::store::Store;

/// Ids of held messages in (due, seq) order, with RAM bounded by the window, not the count.
#[derive(Debug)]
pub struct DelayedWindow {
    store: Arc<Store>,
    /// Every id still held that is at or before `loaded_to`.
    window: BTreeSet<DeadlineId>,
    /// The last index id read; `None` before any was.
    loaded_to: Option<DeadlineId>,
    /// The last refill found nothing beyond `loaded_to`.
    exhausted: bool,
    /// Inserted beyond `loaded_to`, perhaps not committed yet.
    pending: BTreeSet<DeadlineId>,
    /// Taken out beyond `loaded_to`, perhaps still in the index.
    taken: BTreeSet<DeadlineId>,
    len: u64,
    batch: usize,
    changes_since_prune: usize,
}

impl DelayedWindow {
    /// A window over the store's delayed index, reading `batch` ids at a time.
    pub fn new(store: Arc<Store>, batch: usize) -> Result<DelayedWindow> {
        let len = store.snapshot()?.delayed_count()?;
        let mut window = DelayedWindow {
            store,
            window: BTreeSet::new(),
            loaded_to: None,
            exhausted: false,
            pending: BTreeSet::new(),
            taken: BTreeSet::new(),
            len,
            batch: batch.max(1),
            changes_since_prune: 0,
        };
        window.refill()?;
        Ok(window)
    }

    /// How many messages are held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Ids kept in RAM (the window, and what waits to be seen committed or released).
    pub fn resident(&self) -> usize {
        self.window.len() + self.pending.len() + self.taken.len()
    }

    fn loaded(&self, id: DeadlineId) -> bool {
        self.loaded_to.is_some_and(|last| id <= last)
    }

    /// A message was held (its `Op::Hold` submitted).
    pub fn insert(&mut self, id: DeadlineId) -> Result<()> {
        self.len += 1;
        if self.loaded(id) {
            self.window.insert(id);
        } else {
            self.pending.insert(id);
        }
        self.changed()
    }

    /// Takes `id` out (cancelled, or its exchange deleted); false if it is not held.
    pub fn remove(&mut self, id: DeadlineId) -> Result<bool> {
        let found = if self.window.remove(&id) || self.pending.remove(&id) {
            true
        } else if self.loaded(id) || self.taken.contains(&id) {
            false
        } else {
            self.store.snapshot()?.delayed_contains(id)?
        };
        if found {
            self.taken_out(id);
            self.changed()?;
        }
        Ok(found)
    }

    /// The earliest held id.
    pub fn first(&mut self) -> Result<Option<DeadlineId>> {
        if self.window.is_empty() && !self.exhausted {
            self.refill()?;
        }
        let window = self.window.first().copied();
        let pending = self.pending.first().copied();
        Ok(match (window, pending) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Takes the earliest id if it is due at or before `up_to_ms`. The caller reads its body
    /// (`Snapshot::delayed_message`) and submits `Op::Release` once it is routed.
    pub fn pop_first_due(&mut self, up_to_ms: u64) -> Result<Option<DeadlineId>> {
        let Some(id) = self.first()? else {
            return Ok(None);
        };
        if id.due_ms > up_to_ms {
            return Ok(None);
        }
        if !self.window.remove(&id) {
            self.pending.remove(&id);
        }
        self.taken_out(id);
        self.changed()?;
        Ok(Some(id))
    }

    fn taken_out(&mut self, id: DeadlineId) {
        self.len = self.len.saturating_sub(1);
        if !self.loaded(id) {
            self.taken.insert(id);
        }
    }

    fn changed(&mut self) -> Result<()> {
        self.changes_since_prune += 1;
        if self.changes_since_prune >= self.batch {
            self.prune()?;
        }
        Ok(())
    }

    /// Reads the next batch of the index into the window.
    fn refill(&mut self) -> Result<()> {
        let snapshot = self.store.snapshot()?;
        let ids = snapshot.delayed_ids(self.loaded_to, self.batch)?;
        self.exhausted = ids.len() < self.batch;
        if let Some(&last) = ids.last() {
            self.loaded_to = Some(last);
        }
        for id in ids {
            if !self.taken.contains(&id) {
                self.window.insert(id);
            }
        }
        // What is now inside the window stays there (committed or not); what was taken out
        // inside it can no longer come back.
        if let Some(last) = self.loaded_to {
            let beyond = self.pending.split_off(&successor(last));
            self.window.append(&mut self.pending);
            self.pending = beyond;
            self.taken = self.taken.split_off(&successor(last));
        }
        Ok(())
    }

    /// Drops from RAM the pending ids a snapshot shows committed (a refill will read them) and
    /// the taken ids it no longer shows (their release is committed).
    fn prune(&mut self) -> Result<()> {
        self.changes_since_prune = 0;
        let snapshot = self.store.snapshot()?;
        let mut dropped = false;
        let mut keep = BTreeSet::new();
        for id in std::mem::take(&mut self.pending) {
            if snapshot.delayed_contains(id)? {
                dropped = true;
            } else {
                keep.insert(id);
            }
        }
        self.pending = keep;
        let mut keep = BTreeSet::new();
        for id in std::mem::take(&mut self.taken) {
            if snapshot.delayed_contains(id)? {
                keep.insert(id);
            }
        }
        self.taken = keep;
        if dropped {
            // Stored ids now exist beyond the window that only the index knows.
            self.exhausted = false;
        }
        Ok(())
    }
}

fn successor(id: DeadlineId) -> DeadlineId {
    match id.seq.checked_add(1) {
        Some(seq) => DeadlineId { seq, ..id },
        None => DeadlineId {
            due_ms: id.due_ms.saturating_add(1),
            seq: 0,
        },
    }
}
