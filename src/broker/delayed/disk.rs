//! The disk tier: messages held by durable delayed exchanges beyond the scheduler's horizon
//! live only in the store (table `held`, one key range per exchange); RAM keeps
//! a bounded window of their ids, read from the index in batches as time advances. A message
//! moves into the scheduler's wheel (its body read from the store) a horizon before it is due,
//! exactly as the in-memory far tier's messages do.
//!
//! Three sets make the window agree with the store, which commits later than the broker acts:
//! - `pending`: holds submitted but not committed yet. A snapshot does not show them, so they
//!   stay in RAM, body included (a publisher's confirm window of them at most), until their
//!   commit's completion puts their id in the window (or leaves it to a later refill);
//! - `leaving`: ids taken out (moved into the wheel, cancelled, purged) whose `Release` is not
//!   committed yet, so that a refill does not bring them back;
//! - the catch-up window: after a restart, the messages that fell due while the broker was
//!   down, released oldest first at [`CATCH_UP_PER_SECOND`] from the start on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dwellmq_core::schedule::DeadlineId;
use dwellmq_store::{Snapshot, Store, StoreError};

use super::held::Held;
use crate::broker::persist::recover::CATCH_UP_PER_SECOND;

/// Ids read from the index per refill.
pub(super) const WINDOW_BATCH: usize = 4096;

/// The window is cut back to [`WINDOW_BATCH`] ids once it holds more than this (commits of
/// messages due before its end add to it); what is cut is committed and read again later.
const WINDOW_MAX: usize = 4 * WINDOW_BATCH;

/// A window holding fewer ids than this is refilled ahead, outside the lock
/// ([`DiskTier::begin_refill`]).
const REFILL_AHEAD_BELOW: usize = WINDOW_BATCH / 4;

/// Ids of one range of the index, in (due, seq) order.
#[derive(Debug)]
struct Window {
    /// Every id held on disk at or before `loaded_to`, except those leaving.
    ids: BTreeSet<DeadlineId>,
    /// The last index id read (or the start of the range).
    loaded_to: Option<DeadlineId>,
    /// The last refill found nothing more in the range.
    exhausted: bool,
    /// The range ends with this due time.
    due_max: u64,
}

impl Window {
    fn new(after: Option<DeadlineId>, due_max: u64) -> Window {
        Window {
            ids: BTreeSet::new(),
            loaded_to: after,
            exhausted: false,
            due_max,
        }
    }

    fn loaded(&self, id: DeadlineId) -> bool {
        self.loaded_to.is_some_and(|last| id <= last)
    }

    fn in_range(&self, id: DeadlineId) -> bool {
        id.due_ms <= self.due_max
    }

    /// The earliest id, reading the next batch of the index if the window ran dry.
    fn first(
        &mut self,
        store: &Store,
        leaving: &BTreeSet<DeadlineId>,
    ) -> Result<Option<DeadlineId>, StoreError> {
        if self.ids.is_empty() && !self.exhausted {
            self.refill(&store.snapshot()?, leaving)?;
        }
        Ok(self.ids.first().copied())
    }

    fn refill(
        &mut self,
        snapshot: &Snapshot,
        leaving: &BTreeSet<DeadlineId>,
    ) -> Result<(), StoreError> {
        let ids = snapshot.delayed_ids(self.loaded_to, WINDOW_BATCH)?;
        self.merge(ids, leaving);
        Ok(())
    }

    /// Adds a page of the index read after `loaded_to` (all of it in one snapshot).
    fn merge(&mut self, ids: Vec<DeadlineId>, leaving: &BTreeSet<DeadlineId>) {
        self.exhausted = ids.len() < WINDOW_BATCH;
        for id in ids {
            if !self.in_range(id) {
                self.exhausted = true;
                break;
            }
            self.loaded_to = Some(id);
            if !leaving.contains(&id) {
                self.ids.insert(id);
            }
        }
    }

    /// Whether a refill should be read ahead (outside the lock), before the window runs dry.
    fn running_low(&self) -> bool {
        !self.exhausted && self.ids.len() < REFILL_AHEAD_BELOW
    }

    /// Keeps RAM bounded: cuts the window back to its first [`WINDOW_BATCH`] ids.
    fn bound(&mut self) {
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
struct CatchUp {
    window: Window,
    start_ms: u64,
    /// How many were taken out in order so far.
    taken: u64,
}

impl CatchUp {
    /// When the next one in line is released.
    fn next_due_ms(&self) -> u64 {
        self.start_ms + self.taken * 1_000 / CATCH_UP_PER_SECOND
    }
}

/// One message leaving the disk tier for the wheel.
pub(super) struct Leaving {
    /// Its id in the scheduler (a caught-up message's is later than its stored one).
    pub(super) scheduled: DeadlineId,
    /// Its id in the store.
    pub(super) stored: DeadlineId,
    /// Its contents, if they were still in RAM (not committed yet); otherwise read them from
    /// the store.
    pub(super) held: Option<Held>,
}

/// Messages held on disk, beyond the scheduler's horizon.
pub(super) struct DiskTier {
    store: Arc<Store>,
    main: Window,
    catch_up: Option<CatchUp>,
    pending: BTreeMap<DeadlineId, Held>,
    leaving: BTreeSet<DeadlineId>,
    /// Leaving ids whose `Release` commit failed: the writer carries a failed removal into
    /// its next commit, so the next release commit that succeeds removed them too.
    release_carried: Vec<DeadlineId>,
    /// Holds whose commit failed (their publishers were nacked), by incarnation and body
    /// octets: their exchanges' counts are corrected by the next caller that holds the
    /// scheduler's lock.
    failed: Vec<(u64, u64)>,
    /// A page of the index being read outside the lock ([`DiskTier::begin_refill`]).
    refilling: Option<Refilling>,
    len: u64,
}

/// What happened while a page of the index was being read outside the lock, from a snapshot
/// that may predate it.
#[derive(Debug)]
struct Refilling {
    /// The catch-up window's page, or the main window's.
    catch_up: bool,
    /// The page starts after this id (the window's `loaded_to` when the read began; the page
    /// is dropped if that changed meanwhile).
    after: Option<DeadlineId>,
    /// Holds committed meanwhile beyond the window: the snapshot may not show them, and the
    /// page may reach past them.
    committed: Vec<DeadlineId>,
    /// Ids whose `Release` committed meanwhile: still leaving until the page is merged, as
    /// the snapshot may still show them.
    released: Vec<DeadlineId>,
}

/// A page of the index to read outside the lock, then hand to [`DiskTier::end_refill`].
pub(super) struct RefillRead {
    pub(super) store: Arc<Store>,
    pub(super) after: Option<DeadlineId>,
}

impl DiskTier {
    /// The tier over `store` at `now_ms`, holding `len` messages: those due at or before
    /// `now_ms` are caught up with, the others wait for their time.
    pub(super) fn new(store: Arc<Store>, now_ms: u64, len: u64) -> DiskTier {
        let start = DeadlineId {
            due_ms: now_ms,
            seq: u64::MAX,
        };
        DiskTier {
            store,
            main: Window::new(Some(start), u64::MAX),
            catch_up: Some(CatchUp {
                window: Window::new(None, now_ms),
                start_ms: now_ms,
                taken: 0,
            }),
            pending: BTreeMap::new(),
            leaving: BTreeSet::new(),
            release_carried: Vec::new(),
            failed: Vec::new(),
            refilling: None,
            len,
        }
    }

    pub(super) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Messages held on disk (and pending).
    #[cfg(test)]
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    #[cfg(test)]
    /// Ids kept in RAM: the windows, the pending holds and the releases not yet committed.
    pub(super) fn resident(&self) -> usize {
        self.main.ids.len()
            + self.catch_up.as_ref().map_or(0, |c| c.window.ids.len())
            + self.pending.len()
            + self.leaving.len()
    }

    /// A message was held (its `Hold` submitted).
    pub(super) fn hold(&mut self, id: DeadlineId, held: Held) {
        self.len += 1;
        self.pending.insert(id, held);
    }

    /// The commit of `id`'s `Hold` ended.
    pub(super) fn committed(&mut self, id: DeadlineId, ok: bool) {
        let Some(held) = self.pending.remove(&id) else {
            // Taken out meanwhile (moved in, cancelled, purged).
            return;
        };
        if !ok {
            self.len = self.len.saturating_sub(1);
            self.failed
                .push((held.incarnation(), held.message.body_len() as u64));
        } else if self.main.loaded(id) {
            self.main.ids.insert(id);
            self.main.bound();
        } else {
            // Beyond the window: the index brings it back when the window gets there.
            self.main.exhausted = false;
            if let Some(refilling) = self.refilling.as_mut().filter(|r| !r.catch_up) {
                refilling.committed.push(id);
            }
        }
    }

    /// Counts to correct for holds whose commit failed.
    pub(super) fn take_failed(&mut self) -> Vec<(u64, u64)> {
        std::mem::take(&mut self.failed)
    }

    /// A durable exchange's message due within the horizon, held in the wheel: its `Hold` is
    /// written all the same, and a refill reading past it once it is committed must not bring
    /// it out a second time. It is remembered as leaving until its `Release` is committed
    /// ([`DiskTier::released`]); at most a horizon's worth of publishes.
    pub(super) fn held_in_wheel(&mut self, id: DeadlineId) {
        self.leaving.insert(id);
    }

    /// Their `Release` commit ended: once committed, a refill may no longer find them. A
    /// failed one is carried by the writer into its next commit; they are forgotten with the
    /// next release that commits (so `leaving` does not grow for good while writes fail).
    pub(super) fn released(&mut self, ids: &[DeadlineId], committed: bool) {
        if !committed {
            self.release_carried.extend_from_slice(ids);
            return;
        }
        let carried = std::mem::take(&mut self.release_carried);
        if let Some(refilling) = self.refilling.as_mut() {
            refilling.released.extend_from_slice(ids);
            refilling.released.extend(carried);
            return;
        }
        for id in ids.iter().chain(&carried) {
            self.leaving.remove(id);
        }
    }

    /// When a window runs low, marks a page of the index as being read and says where it
    /// starts: the caller reads it outside the lock (a read of thousands of keys takes long
    /// enough for publishers waiting on the lock to notice) and hands it to
    /// [`DiskTier::end_refill`]. `None` when no window needs one, or one is being read.
    pub(super) fn begin_refill(&mut self) -> Option<RefillRead> {
        if self.refilling.is_some() {
            return None;
        }
        let (catch_up, window) = match &self.catch_up {
            Some(c) if c.window.running_low() => (true, &c.window),
            _ if self.main.running_low() => (false, &self.main),
            _ => return None,
        };
        let after = window.loaded_to;
        self.refilling = Some(Refilling {
            catch_up,
            after,
            committed: Vec::new(),
            released: Vec::new(),
        });
        Some(RefillRead {
            store: Arc::clone(&self.store),
            after,
        })
    }

    /// Merges a page read after [`DiskTier::begin_refill`] (dropped if its window moved on
    /// meanwhile: a refill under the lock, or a cut), then forgets the releases that committed
    /// during the read.
    pub(super) fn end_refill(&mut self, read: Result<Vec<DeadlineId>, StoreError>) {
        let Some(refilling) = self.refilling.take() else {
            return;
        };
        let window = match (&mut self.catch_up, refilling.catch_up) {
            (Some(c), true) => Some(&mut c.window),
            (_, false) => Some(&mut self.main),
            (None, true) => None,
        };
        match (window, read) {
            (Some(window), Ok(ids)) if window.loaded_to == refilling.after => {
                window.merge(ids, &self.leaving);
                for id in refilling.committed {
                    if !window.loaded(id) {
                        window.exhausted = false;
                    } else if !self.leaving.contains(&id) {
                        window.ids.insert(id);
                    }
                }
                window.bound();
            }
            (_, Err(e)) => {
                // Read again under the lock when the window runs dry, which reports it.
                tracing::warn!(error = %e, "reading the delayed index ahead failed");
            }
            _ => {}
        }
        for id in refilling.released {
            self.leaving.remove(&id);
        }
    }

    /// The scheduler's id of the next message to leave, if any; its due time is when it
    /// must be in the wheel.
    pub(super) fn next(&mut self) -> Result<Option<DeadlineId>, StoreError> {
        let caught_up = match &mut self.catch_up {
            Some(c) => match c.window.first(&self.store, &self.leaving)? {
                Some(id) => Some(DeadlineId {
                    due_ms: c.next_due_ms(),
                    seq: id.seq,
                }),
                None => {
                    self.catch_up = None;
                    None
                }
            },
            None => None,
        };
        let on_time = self.main.first(&self.store, &self.leaving)?;
        let pending = self.pending.keys().next().copied();
        Ok([caught_up, on_time, pending].into_iter().flatten().min())
    }

    /// Stored ids of (up to `n` of) the committed messages the next [`DiskTier::pop_due`]s
    /// up to `up_to_ms` take out: their bodies can be read before the lock is taken again.
    pub(super) fn upcoming_stored(
        &mut self,
        up_to_ms: u64,
        n: usize,
    ) -> Result<Vec<DeadlineId>, StoreError> {
        // As `pop_due` would: a window that ran dry is refilled from the index.
        self.next()?;
        let mut ids = Vec::new();
        if let Some(c) = &self.catch_up {
            if c.next_due_ms() <= up_to_ms {
                ids.extend(c.window.ids.iter().take(n).copied());
            }
        }
        ids.extend(
            self.main
                .ids
                .iter()
                .take_while(|id| id.due_ms <= up_to_ms)
                .take(n)
                .copied(),
        );
        Ok(ids)
    }

    /// Takes the next message due at or before `up_to_ms` out (it goes into the wheel; the
    /// caller submits its `Release` once it is released, or cancelled).
    pub(super) fn pop_due(&mut self, up_to_ms: u64) -> Result<Option<Leaving>, StoreError> {
        let Some(next) = self.next()? else {
            return Ok(None);
        };
        if next.due_ms > up_to_ms {
            return Ok(None);
        }
        let caught_up = self.catch_up.as_mut().and_then(|c| {
            let first = c.window.ids.first().copied()?;
            (first.seq == next.seq && c.next_due_ms() == next.due_ms).then(|| {
                c.window.ids.remove(&first);
                c.taken += 1;
                first
            })
        });
        let stored = match caught_up {
            Some(stored) => stored,
            None => {
                self.main.ids.remove(&next);
                next
            }
        };
        let held = self.pending.remove(&stored);
        self.len = self.len.saturating_sub(1);
        self.leaving.insert(stored);
        Ok(Some(Leaving {
            scheduled: next,
            stored,
            held,
        }))
    }

    /// Puts back messages taken out whose contents could not be read (a store error): they
    /// are tried again at the next move-in.
    pub(super) fn put_back(&mut self, ids: impl IntoIterator<Item = DeadlineId>) {
        for id in ids {
            if !self.leaving.remove(&id) {
                continue;
            }
            self.len += 1;
            match &mut self.catch_up {
                Some(c) if c.window.in_range(id) => {
                    c.taken = c.taken.saturating_sub(1);
                    c.window.ids.insert(id);
                }
                _ => {
                    self.main.ids.insert(id);
                }
            }
        }
    }

    /// Takes `id` out if the disk tier holds it (cancel, purge); the caller submits its
    /// `Release`. `snapshot` answers for ids beyond the windows.
    pub(super) fn take(
        &mut self,
        id: DeadlineId,
        snapshot: &Snapshot,
    ) -> Result<Taken, StoreError> {
        if let Some(held) = self.pending.remove(&id) {
            self.main.ids.remove(&id);
            self.taken(id);
            return Ok(Taken::Pending(held));
        }
        if self.leaving.contains(&id) {
            return Ok(Taken::No);
        }
        let in_window = match &mut self.catch_up {
            Some(c) if c.window.in_range(id) => {
                if c.window.ids.remove(&id) {
                    Some(true)
                } else {
                    c.window.loaded(id).then_some(false)
                }
            }
            _ => {
                if self.main.ids.remove(&id) {
                    Some(true)
                } else {
                    self.main.loaded(id).then_some(false)
                }
            }
        };
        let found = match in_window {
            Some(found) => found,
            None => snapshot.delayed_contains(id)?,
        };
        if !found {
            return Ok(Taken::No);
        }
        self.taken(id);
        Ok(Taken::Stored)
    }

    fn taken(&mut self, id: DeadlineId) {
        self.len = self.len.saturating_sub(1);
        self.leaving.insert(id);
    }

    /// How many ids are being taken out (a listing reads that many more).
    pub(super) fn leaving_len(&self) -> usize {
        self.leaving.len()
    }

    /// Whether `id` is being taken out (its release not committed): a listing skips it.
    pub(super) fn is_leaving(&self, id: DeadlineId) -> bool {
        self.leaving.contains(&id)
    }

    /// A pending hold (not committed yet).
    pub(super) fn pending(&self, id: DeadlineId) -> Option<&Held> {
        self.pending.get(&id)
    }

    /// The pending holds (not in any snapshot yet) that `of` picks, in id order.
    pub(super) fn pending_where<'a>(
        &'a self,
        of: impl Fn(&Held) -> bool + 'a,
    ) -> impl Iterator<Item = (DeadlineId, &'a Held)> + 'a {
        self.pending
            .iter()
            .filter(move |(_, held)| of(held))
            .map(|(&id, held)| (id, held))
    }
}

/// What [`DiskTier::take`] found.
pub(super) enum Taken {
    /// Not held on disk.
    No,
    /// Held on disk.
    Stored,
    /// Held, not committed yet: its contents.
    Pending(Held),
}
