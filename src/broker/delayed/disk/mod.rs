//! The disk tier: messages held by durable delayed exchanges beyond the scheduler's horizon
//! live only in the store (table `held`, one key range per exchange); RAM keeps
//! a bounded window of their ids, read from the index in batches as time advances. A message
//! moves into the scheduler's wheel (its body read from the store) a horizon before it is due,
//! exactly as the in-memory far tier's messages do.
//!
//! The index is read through the store's [`HeldView`], which shows a hold from its submission
//! on and hides an id from its release's submission on: the store, whose writer alone knows
//! what is committed, keeps the commit lag. What the tier keeps beside the window is what only
//! the scheduler knows:
//! - `moved_out`: ids it took out of the index into the wheel (moved in, or a durable
//!   exchange's message held there from the start) whose `Release` it has not submitted: the
//!   index still shows them, and a refill must not take them out again;
//! - `vanished`: ids taken out whose message the index no longer showed (a hold whose commit
//!   failed, before its completion corrected the counts);
//! - the catch-up window: after a restart, the messages that fell due while the broker was
//!   down, released oldest first at [`CATCH_UP_PER_SECOND`] from the start on;
//! - the kept exchanges (their definitions did not restore): the windows never read their
//!   ids, so their messages stay on disk, untouched and costing no RAM, however many fall
//!   due, until a declare takes the exchange back ([`DiskTier::retake`]).

mod move_in;
mod window;

use std::collections::BTreeSet;
use std::sync::Arc;

use dwellmq_core::schedule::DeadlineId;
use dwellmq_store::{HeldView, Store, StoreError};

use window::{slot_ms, CatchUp, Window, LAST_ID};
pub(super) use window::{KeptOnDisk, ReleasedIds, WINDOW_BATCH};

/// One message leaving the disk tier for the wheel.
pub(super) struct Leaving {
    /// Its id in the scheduler (a caught-up message's is later than its stored one).
    pub(super) scheduled: DeadlineId,
    /// Its id in the store.
    pub(super) stored: DeadlineId,
}

/// Messages held on disk, beyond the scheduler's horizon.
pub(super) struct DiskTier {
    store: Arc<Store>,
    main: Window,
    catch_up: Option<CatchUp>,
    /// Taken out into the wheel, their `Release` not submitted: at most a horizon's worth of
    /// messages.
    moved_out: BTreeSet<DeadlineId>,
    /// Taken out at a move-in though the index no longer showed them: failed holds whose
    /// completion has not corrected their exchange's counts yet ([`DiskTier::hold_failed`]).
    vanished: BTreeSet<DeadlineId>,
    released: Arc<ReleasedIds>,
    /// A page of the index being read outside the lock ([`DiskTier::begin_refill`]).
    refilling: Option<Refilling>,
    kept: KeptOnDisk,
    /// The last catch-up's start and how many it took out: its last ones may still wait in
    /// the wheel for their time, and a take-back's catch-up comes after them.
    last_catch_up: (u64, u64),
}

/// What happened while a page of the index was being read outside the lock, from a view
/// that may predate it.
#[derive(Debug)]
struct Refilling {
    /// The catch-up window's page, or the main window's.
    catch_up: bool,
    /// The page starts after this id (the window's `loaded_to` when the read began; the page
    /// is dropped if that changed meanwhile).
    after: Option<DeadlineId>,
    /// Holds submitted meanwhile beyond the window: the view may not show them, and the page
    /// may reach past them.
    held: Vec<DeadlineId>,
    /// Ids taken out meanwhile (or no longer moved out because their `Release` was
    /// submitted): the view may still show them.
    taken: Vec<DeadlineId>,
    /// An exchange was taken back meanwhile: the windows read the index again, and the page,
    /// read without that exchange's ids, is dropped.
    stale: bool,
}

/// A page of the index to read outside the lock, then hand to [`DiskTier::end_refill`].
pub(super) struct RefillRead {
    pub(super) store: Arc<Store>,
    pub(super) after: Option<DeadlineId>,
    kept: KeptOnDisk,
}

impl RefillRead {
    /// Reads the page (outside the lock).
    pub(super) fn read(&self) -> Result<Vec<DeadlineId>, StoreError> {
        self.kept
            .read(&self.store.held_view()?, self.after, WINDOW_BATCH)
    }
}

impl DiskTier {
    /// The tier over `store` at `now_ms`: those held due at or before `now_ms` are caught up
    /// with, the others wait for their time; those of `kept` exchanges stay on disk.
    /// `released` is where releases of its ids are noted.
    pub(super) fn new(
        store: Arc<Store>,
        now_ms: u64,
        released: Arc<ReleasedIds>,
        kept: KeptOnDisk,
    ) -> DiskTier {
        let start = DeadlineId {
            due_ms: now_ms,
            seq: u64::MAX,
        };
        DiskTier {
            store,
            main: Window::new(Some(start), LAST_ID),
            catch_up: Some(CatchUp {
                window: Window::new(None, start),
                start_ms: now_ms,
                taken: 0,
            }),
            moved_out: BTreeSet::new(),
            vanished: BTreeSet::new(),
            released,
            refilling: None,
            kept,
            last_catch_up: (now_ms, 0),
        }
    }

    /// A declare took back the kept exchange `exchange` of `vhost` at `now_ms`: its messages
    /// are the tier's from now on. Those that fell due while it was kept are caught up with
    /// as after a restart: oldest first, at [`CATCH_UP_PER_SECOND`] from `now_ms` on (after
    /// what a catch-up under way has left); the others are released on time.
    ///
    /// Both windows read the index again, the catch-up up to `now_ms`, the main window after
    /// it: what they handed out before is moved out or released (its `Release` submitted),
    /// so it is not read again, and what they had not is.
    pub(super) fn retake(&mut self, vhost: &str, exchange: &str, now_ms: u64) {
        self.forget_released();
        if !self.kept.remove(vhost, exchange) {
            return;
        }
        let now = DeadlineId {
            due_ms: now_ms,
            seq: u64::MAX,
        };
        self.main = Window::new(Some(now), LAST_ID);
        let (start_ms, taken) = match &self.catch_up {
            Some(c) => (c.start_ms, c.taken),
            None => self.last_catch_up,
        };
        // One that is behind (or over) starts afresh now: a bounded rate from now on.
        let (start_ms, taken) = if slot_ms(start_ms, taken) < now_ms {
            (now_ms, 0)
        } else {
            (start_ms, taken)
        };
        self.catch_up = Some(CatchUp {
            window: Window::new(None, now),
            start_ms,
            taken,
        });
        if let Some(refilling) = self.refilling.as_mut() {
            refilling.stale = true;
        }
    }

    /// An id taken out of the index belongs to an exchange that is kept (the index read
    /// before it was kept, which cannot happen while the tier leaves kept ones out): it is
    /// left on disk, as it is, for the take-back's catch-up.
    pub(super) fn leave_on_disk(&mut self, id: DeadlineId) {
        self.moved_out.remove(&id);
    }

    pub(super) fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// A view of the index (holds and releases count from their submission).
    pub(super) fn view(&self) -> Result<HeldView, StoreError> {
        self.store.held_view()
    }

    #[cfg(test)]
    /// Ids kept in RAM (the windows, those moved out and those vanished), and how many
    /// messages the index holds beyond what is moved out.
    pub(super) fn resident(&mut self) -> (usize, u64) {
        self.forget_released();
        let resident = self.main.ids.len()
            + self.catch_up.as_ref().map_or(0, |c| c.window.ids.len())
            + self.moved_out.len()
            + self.vanished.len();
        let held = self.view().and_then(|view| view.delayed_count());
        // Unreadable (writes failing and the file not reopened yet): no count to compare.
        let held = held.unwrap_or(u64::MAX);
        (resident, held.saturating_sub(self.moved_out.len() as u64))
    }

    /// Forgets as moved out the ids whose `Release` was submitted since the last call.
    pub(super) fn forget_released(&mut self) {
        let released = self.released.take();
        for id in released {
            if self.moved_out.remove(&id) {
                self.note_taken(id);
            }
        }
    }

    /// An id left the tier, or stopped being moved out: a page being read may still show it.
    fn note_taken(&mut self, id: DeadlineId) {
        if let Some(refilling) = self.refilling.as_mut() {
            refilling.taken.push(id);
        }
    }

    /// A message was held on disk (its `Hold` submitted).
    pub(super) fn hold(&mut self, id: DeadlineId) {
        self.forget_released();
        self.main.held(id);
        if let Some(refilling) = self.refilling.as_mut().filter(|r| !r.catch_up) {
            refilling.held.push(id);
        }
    }

    /// The commit of `id`'s `Hold` failed (its publisher was nacked): whether the message was
    /// still the tier's, so its exchange's counts must lose it. Not if the writer retries the
    /// hold (a group's), nor if it was taken out before (into the wheel, cancelled or purged:
    /// those paths counted it out).
    pub(super) fn hold_failed(&mut self, id: DeadlineId) -> bool {
        self.forget_released();
        if self.store.hold_submitted(id) {
            return false;
        }
        let window = match &mut self.catch_up {
            Some(c) if c.window.in_range(id) => &mut c.window,
            _ => &mut self.main,
        };
        let ours = if window.ids.remove(&id) || self.vanished.remove(&id) {
            self.moved_out.remove(&id);
            true
        } else if self.moved_out.contains(&id) || window.loaded(id) {
            false
        } else {
            // Beyond the window: taken out only by a cancel or a purge, which submitted its
            // release (the store lists a failed batch's releases until its completions ran).
            !self.store.release_submitted(id)
        };
        if ours {
            self.note_taken(id);
        }
        ours
    }

    /// A durable exchange's message due within the horizon, held in the wheel: its `Hold` is
    /// written all the same, and a refill reading past it must not bring it out a second
    /// time. It is moved out until its `Release` is submitted; at most a horizon's worth of
    /// publishes.
    pub(super) fn held_in_wheel(&mut self, id: DeadlineId) {
        self.forget_released();
        self.moved_out.insert(id);
    }

    /// When a window runs low, marks a page of the index as being read and says where it
    /// starts: the caller reads it outside the lock (a read of thousands of keys takes long
    /// enough for publishers waiting on the lock to notice) and hands it to
    /// [`DiskTier::end_refill`]. `None` when no window needs one, or one is being read.
    pub(super) fn begin_refill(&mut self) -> Option<RefillRead> {
        if self.refilling.is_some() {
            return None;
        }
        self.forget_released();
        let (catch_up, window) = match &self.catch_up {
            Some(c) if c.window.running_low() => (true, &c.window),
            _ if self.main.running_low() => (false, &self.main),
            _ => return None,
        };
        let after = window.loaded_to;
        self.refilling = Some(Refilling {
            catch_up,
            after,
            held: Vec::new(),
            taken: Vec::new(),
            stale: false,
        });
        Some(RefillRead {
            store: Arc::clone(&self.store),
            after,
            kept: self.kept.clone(),
        })
    }

    /// Merges a page read after [`DiskTier::begin_refill`] (dropped if its window moved on
    /// meanwhile: a refill under the lock, or a cut), without what was taken out during the
    /// read and with what was held during it.
    pub(super) fn end_refill(&mut self, read: Result<Vec<DeadlineId>, StoreError>) {
        let Some(refilling) = self.refilling.take() else {
            return;
        };
        if refilling.stale {
            // The windows read the index again: what was held or taken meanwhile is in it.
            self.forget_released();
            return;
        }
        let window = match (&mut self.catch_up, refilling.catch_up) {
            (Some(c), true) => Some(&mut c.window),
            (_, false) => Some(&mut self.main),
            (None, true) => None,
        };
        let Some(window) = window else {
            return;
        };
        match read {
            Ok(ids) if window.loaded_to == refilling.after => {
                window.merge(ids, &self.moved_out);
                for id in &refilling.taken {
                    window.ids.remove(id);
                }
            }
            Ok(_) => {}
            Err(e) => {
                // Read again under the lock when the window runs dry, which reports it.
                tracing::warn!(error = %e, "reading the delayed index ahead failed");
            }
        }
        for id in refilling.held {
            if !refilling.taken.contains(&id) {
                window.held(id);
            }
        }
        window.bound();
        // Only now: a release noted during the read may be one the page still shows.
        self.forget_released();
    }

    /// The scheduler's id of the next message to leave, if any; its due time is when it
    /// must be in the wheel.
    pub(super) fn next(&mut self) -> Result<Option<DeadlineId>, StoreError> {
        self.forget_released();
        let caught_up = match &mut self.catch_up {
            Some(c) => match c.window.first(&self.store, &self.moved_out, &self.kept)? {
                Some(id) => Some(DeadlineId {
                    due_ms: c.next_due_ms(),
                    seq: id.seq,
                }),
                None => {
                    self.last_catch_up = (c.start_ms, c.taken);
                    self.catch_up = None;
                    None
                }
            },
            None => None,
        };
        let on_time = self.main.first(&self.store, &self.moved_out, &self.kept)?;
        Ok([caught_up, on_time].into_iter().flatten().min())
    }

    /// Stored ids of (up to `n` of) the messages the next [`DiskTier::pop_due`]s up to
    /// `up_to_ms` take out: their bodies can be read before the lock is taken again.
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
        self.moved_out.insert(stored);
        Ok(Some(Leaving {
            scheduled: next,
            stored,
        }))
    }

    /// A message taken out by [`DiskTier::pop_due`] was no longer in the index (a hold whose
    /// commit failed): nothing to release, and its counts are its hold's completion's to
    /// correct.
    pub(super) fn vanished(&mut self, id: DeadlineId) {
        self.moved_out.remove(&id);
        self.vanished.insert(id);
    }

    /// Puts back messages taken out whose contents could not be read (a store error): they
    /// are tried again at the next move-in.
    pub(super) fn put_back(&mut self, ids: impl IntoIterator<Item = DeadlineId>) {
        for id in ids {
            if !self.moved_out.remove(&id) {
                continue;
            }
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

    /// Takes `id` out if the disk tier holds it (cancel, purge): the caller submits its
    /// `Release` before it lets the lock go (so that no refill can find it meanwhile).
    /// `view` answers for ids beyond the windows.
    pub(super) fn take(&mut self, id: DeadlineId, view: &HeldView) -> Result<bool, StoreError> {
        self.forget_released();
        if self.moved_out.contains(&id) {
            return Ok(false);
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
            None => view.delayed_contains(id)?,
        };
        if found {
            self.note_taken(id);
        }
        Ok(found)
    }

    /// How many ids are moved out (a listing of the index reads that many more).
    pub(super) fn moved_out_len(&self) -> usize {
        self.moved_out.len()
    }

    /// Whether `id` is moved out (in the wheel): a listing of the index skips it.
    pub(super) fn is_moved_out(&self, id: DeadlineId) -> bool {
        self.moved_out.contains(&id)
    }
}
