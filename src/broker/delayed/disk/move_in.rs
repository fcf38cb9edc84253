//! Moving messages held on disk into the scheduler's wheel, a horizon before they are due.
//!
//! The disk tier's next move-in is a deadline in the scheduler like any other: the holder
//! arms it (a [`DeadlineClient`] callback) whenever the tier must move in sooner than armed.
//! When it comes, under a manual clock the round moves them in itself; under the system clock
//! it only wakes the disk mover thread, which reads the bodies from the store, so that the
//! timer thread never waits for a store read nor for the disk tier's lock.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use dwellmq_codec::ShortStr;
use dwellmq_core::schedule::{DeadlineId, HORIZON_MS};

use super::{DiskTier, Leaving};
use crate::broker::delayed::held::{ExchangeKey, Held, Kept};
use crate::broker::delayed::{DelayedMessages, Locked};
use crate::broker::scheduler::{DeadlineClient, Entry, MOVE_IN_BATCH};

/// Bodies read ahead of a move-in, by stored id.
type ReadAhead = BTreeMap<DeadlineId, dwellmq_store::DelayedMessage>;

impl DeadlineClient for DelayedMessages {
    /// The disk tier's move-in came.
    fn due(self: Arc<Self>, now_ms: u64) {
        // It came: the next plan arms anew.
        self.disk_armed.store(u64::MAX, Ordering::Relaxed);
        if self.mover_moves_disk() {
            // Only a wake-up: the timer thread never reads the store.
            self.scheduler.wake_mover();
        } else {
            self.move_in_from_disk(now_ms, None, Instant::now(), &mut 0);
        }
    }
}

impl DelayedMessages {
    /// Arms the disk tier's move-in at `at_ms` unless one at or before it is armed already,
    /// under the scheduler's lock; true when the timer thread must wake sooner than it planned.
    pub(in crate::broker::delayed) fn arm_disk_move(&self, inner: &mut Locked, at_ms: u64) -> bool {
        if at_ms >= self.disk_armed.load(Ordering::Relaxed) {
            return false;
        }
        self.disk_armed.store(at_ms, Ordering::Relaxed);
        let me: Weak<dyn DeadlineClient> = Weak::clone(&self.me) as Weak<DelayedMessages>;
        inner.arm(at_ms, me)
    }

    /// Works out when `disk`'s first message must move into the wheel, and arms that unless it
    /// is due by `due_by_ms` (the disk mover, about to move it in itself). Returns the plan
    /// (`None`: nothing on disk) and whether the timer thread must wake sooner.
    pub(in crate::broker::delayed) fn plan_disk_move(
        &self,
        disk: Option<&mut DiskTier>,
        inner: &mut Locked,
        due_by_ms: Option<u64>,
    ) -> bool {
        self.plan_and_arm(disk, inner, due_by_ms).1
    }

    fn plan_and_arm(
        &self,
        disk: Option<&mut DiskTier>,
        inner: &mut Locked,
        due_by_ms: Option<u64>,
    ) -> (Option<u64>, bool) {
        let Some(disk) = disk else {
            return (None, false);
        };
        let at = disk_move_at(disk, inner);
        let wake = match at {
            Some(at) if due_by_ms.is_none_or(|by| at > by) => self.arm_disk_move(inner, at),
            _ => false,
        };
        (at, wake)
    }

    /// The disk mover's plan: when it must next move messages into the wheel (a horizon
    /// before the earliest disk-held one is due; `None` when none is held on disk). A plan
    /// later than `now_ms` is armed in the scheduler, which wakes the mover then.
    pub(crate) fn next_disk_move(&self, now_ms: u64) -> Option<u64> {
        self.refill_disk_ahead();
        let mut disk = self.disk.lock();
        let (at, wake) = self.plan_and_arm(disk.as_mut(), &mut self.scheduler.lock(), Some(now_ms));
        drop(disk);
        if wake {
            self.scheduler.wake_timer();
        }
        at
    }

    /// Reads the next page of the disk tier's index outside its lock once a window runs low,
    /// so that moving in rarely waits for a read under it.
    pub(in crate::broker::delayed) fn refill_disk_ahead(&self) {
        let Some(read) = self.disk.lock().as_mut().and_then(|d| d.begin_refill()) else {
            return;
        };
        let page = read.read();
        if let Some(disk) = self.disk.lock().as_mut() {
            disk.end_refill(page);
        }
    }

    /// The disk mover's round: moves every disk-held message due within the horizon of
    /// `now_ms` into the wheel. Returns how many it moved.
    pub(crate) fn move_in_disk(&self, now_ms: u64) -> usize {
        let mut moved = 0;
        self.move_in_from_disk(now_ms, None, Instant::now(), &mut moved);
        moved
    }

    /// Moves the disk-held messages due within the horizon of `now_ms` into the wheel, a batch
    /// per lock hold, reading their bodies from the store, then arms the next move-in (unless
    /// the disk mover plans its own). Stops early once `budget` is spent or a moved message is
    /// already due; returns whether it finished.
    pub(in crate::broker::delayed) fn move_in_from_disk(
        &self,
        now_ms: u64,
        budget: Option<Duration>,
        started: Instant,
        moved: &mut usize,
    ) -> bool {
        let finished = self.move_in_batches(now_ms, budget, started, moved);
        if !self.mover_moves_disk() {
            let mut disk = self.disk.lock();
            let wake = self.plan_disk_move(disk.as_mut(), &mut self.scheduler.lock(), None);
            drop(disk);
            if wake {
                self.scheduler.wake_timer();
            }
        }
        finished
    }

    fn move_in_batches(
        &self,
        now_ms: u64,
        budget: Option<Duration>,
        started: Instant,
        moved: &mut usize,
    ) -> bool {
        let up_to = now_ms.saturating_add(HORIZON_MS);
        loop {
            self.refill_disk_ahead();
            // Bodies are read before the lock is taken for the move: a store read can take
            // milliseconds, and publishers to durable delayed exchanges wait for this lock.
            // Bodies of an older snapshot are safe to use: a body of an incarnation dropped
            // meanwhile finds no index, and is dropped.
            let mut read_ahead = self.read_upcoming(up_to);
            #[cfg(test)]
            if let Some(hook) = self.after_read_ahead.lock().take() {
                hook();
            }
            let mut disk_guard = self.disk.lock();
            let Some(disk) = disk_guard.as_mut() else {
                return true;
            };
            let moving = take_batch(disk, up_to);
            if moving.is_empty() {
                return true;
            }
            let bodies = match read_bodies(disk.store(), &moving, &mut read_ahead) {
                Ok(bodies) => bodies,
                Err(e) => {
                    tracing::error!(error = %e, "reading delayed messages failed; retried");
                    disk.put_back(moving.iter().map(|m| m.stored));
                    return true;
                }
            };
            *moved += moving.len();
            let mut guard = self.scheduler.lock();
            let dropped = self.schedule_moved(disk, &mut guard, moving, bodies);
            let release_due = guard.core.wheel_due(now_ms);
            drop(guard);
            drop(disk_guard);
            self.release_stored(dropped);
            if budget.is_some() && release_due || budget.is_some_and(|b| started.elapsed() >= b) {
                return false;
            }
        }
    }

    /// Puts the messages taken out of the disk tier into the wheel, under both locks; returns
    /// the stored ids of those whose incarnation is being dropped or gone (to remove).
    fn schedule_moved(
        &self,
        disk: &mut DiskTier,
        inner: &mut Locked,
        moving: Vec<Leaving>,
        bodies: Vec<Option<dwellmq_store::DelayedMessage>>,
    ) -> Vec<DeadlineId> {
        let mut dropped = Vec::new();
        for (leaving, body) in moving.into_iter().zip(bodies) {
            let Some(stored) = body else {
                // Its hold failed since the window took it in.
                disk.vanished(leaving.stored);
                continue;
            };
            let key: ExchangeKey = (
                ShortStr::from(stored.vhost.as_str()),
                ShortStr::from(stored.exchange.as_str()),
            );
            let index = inner.book.stored_index(&key, leaving.stored.seq);
            let held = index.map(|index| Held {
                target: Arc::clone(&index.target),
                message: Kept::Packed(stored.message),
                stored: true,
            });
            if held.is_none() && inner.book.kept.contains(&key) {
                // Its exchange's definition could not be restored: it stays on disk as it
                // is, for the declare that takes the exchange back (the tier does not read
                // kept exchanges' ids; this is a safety net, never a drop).
                disk.leave_on_disk(leaving.stored);
                continue;
            }
            let Some(held) = held else {
                // Its incarnation is being dropped or gone.
                dropped.push(leaving.stored);
                continue;
            };
            held.message.warm_up();
            self.memory.charge_bytes(held.message.charged_by_holder());
            let scheduled = if leaving.scheduled == leaving.stored {
                leaving.scheduled
            } else {
                // Caught up with: numbered anew, so that those due in the same millisecond
                // come out oldest first, and its stored id kept aside for its release.
                let id = inner.core.allocate(leaving.scheduled.due_ms);
                inner.book.stored_as.insert(id.seq, leaving.stored);
                id
            };
            inner.core.restore(scheduled, Entry::Held(held));
        }
        dropped
    }

    /// Reads the bodies of the disk-held messages the next move-in up to `up_to_ms` takes out
    /// (the disk lock is held only to find their ids). A failed read leaves them to the
    /// move-in itself, which reports it.
    fn read_upcoming(&self, up_to_ms: u64) -> ReadAhead {
        let (ids, store) = {
            let mut disk = self.disk.lock();
            let Some(disk) = disk.as_mut() else {
                return ReadAhead::new();
            };
            match disk.upcoming_stored(up_to_ms, MOVE_IN_BATCH) {
                Ok(ids) if !ids.is_empty() => (ids, Arc::clone(disk.store())),
                _ => return ReadAhead::new(),
            }
        };
        let Ok(view) = store.held_view() else {
            return ReadAhead::new();
        };
        ids.into_iter()
            .filter_map(|id| Some((id, view.delayed_message(id).ok()??)))
            .collect()
    }
}

/// Takes out of `disk` up to a batch of messages due at or before `up_to_ms`.
fn take_batch(disk: &mut DiskTier, up_to_ms: u64) -> Vec<Leaving> {
    let mut moving: Vec<Leaving> = Vec::with_capacity(MOVE_IN_BATCH);
    while moving.len() < MOVE_IN_BATCH {
        match disk.pop_due(up_to_ms) {
            Ok(Some(leaving)) => moving.push(leaving),
            Ok(None) => break,
            Err(e) => {
                tracing::error!(error = %e, "reading the delayed index failed");
                break;
            }
        }
    }
    moving
}

/// When `disk`'s first message must move into the wheel (a horizon before it is due).
fn disk_move_at(disk: &mut DiskTier, inner: &mut Locked) -> Option<u64> {
    match disk.next() {
        Ok(next) => next.map(|id| id.due_ms.saturating_sub(HORIZON_MS)),
        Err(e) => {
            // Looked at again within a horizon.
            tracing::error!(error = %e, "reading the delayed index failed");
            Some(inner.core.horizon_ms())
        }
    }
}

/// Reads the bodies of the messages moving in that were not read ahead, from one view.
fn read_bodies(
    store: &dwellmq_store::Store,
    moving: &[Leaving],
    read_ahead: &mut ReadAhead,
) -> Result<Vec<Option<dwellmq_store::DelayedMessage>>, dwellmq_store::StoreError> {
    let mut bodies: Vec<Option<dwellmq_store::DelayedMessage>> = moving
        .iter()
        .map(|m| read_ahead.remove(&m.stored))
        .collect();
    if bodies.iter().any(Option::is_none) {
        let view = store.held_view()?;
        for (m, body) in moving.iter().zip(bodies.iter_mut()) {
            if body.is_none() {
                *body = view.delayed_message(m.stored)?;
            }
        }
    }
    Ok(bodies)
}
