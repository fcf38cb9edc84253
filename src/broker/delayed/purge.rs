//! Dropping everything an exchange holds: an operator's purge (the exchange moves to a fresh
//! incarnation) or its deletion. Its messages are dropped a chunk at a time wherever they are
//! (far tier, disk, wheel), so releases and publishers get the lock in between; the test
//! double can stop a purge halfway to act meanwhile.

use std::time::Instant;

use dwellmq_codec::ShortStr;
use dwellmq_core::schedule::DeadlineId;

use super::held::{ExchangeKey, Held};
use super::{id_of, key_of, successor, DelayedId, DelayedMessages};
use crate::broker::scheduler::Entry;

/// Messages dropped per lock hold when an exchange is deleted or purged.
const PURGE_CHUNK: usize = 1024;

impl DelayedMessages {
    /// Drops every message `exchange` in `vhost` holds now (an operator purged it; what is
    /// published to it meanwhile stays); returns how many.
    pub(crate) fn purge_exchange(&self, vhost: &ShortStr, exchange: &ShortStr) -> usize {
        self.drop_logged(vhost, exchange, false)
    }

    /// Drops every message held for `exchange` in `vhost`, which was deleted (an exchange
    /// declared under its name meanwhile keeps its own); returns how many.
    pub(crate) fn forget_exchange(&self, vhost: &ShortStr, exchange: &ShortStr) -> usize {
        self.drop_logged(vhost, exchange, true)
    }

    fn drop_logged(&self, vhost: &ShortStr, exchange: &ShortStr, deleted: bool) -> usize {
        let started = Instant::now();
        let dropped = self.drop_held_by(vhost, exchange, deleted);
        if dropped > 0 {
            tracing::info!(
                vhost = %vhost,
                exchange = %exchange,
                dropped,
                took_ms = started.elapsed().as_millis() as u64,
                "dropped the messages a delayed exchange held"
            );
        }
        dropped
    }

    /// Takes the exchange's messages from it (its incarnation), then drops them
    /// ([`DelayedMessages::finish_dropping`]).
    fn drop_held_by(&self, vhost: &ShortStr, exchange: &ShortStr, deleted: bool) -> usize {
        let key = key_of(vhost, exchange);
        let pause = self.paused_purges.lock().as_ref().map(|p| p.at);
        if pause == Some(PauseAt::Start) {
            self.park(PausedPurge::NotBegun { key, deleted });
            return 0;
        }
        let Some(dropping) = self.start_dropping(&key, deleted) else {
            return 0;
        };
        if pause == Some(PauseAt::Begun) {
            self.park(PausedPurge::Begun { key, dropping });
            return 0;
        }
        self.finish_dropping(&key, dropping)
    }

    fn park(&self, purge: PausedPurge) {
        if let Some(paused) = self.paused_purges.lock().as_mut() {
            paused.purges.push(purge);
        }
    }

    /// From now on a purge (an operator's, or an exchange's deletion) stops at `at`, until
    /// [`DelayedMessages::resume_purges`]: the test double's way to act while one is under
    /// way.
    pub(crate) fn pause_purges(&self, at: PauseAt) {
        let mut paused = self.paused_purges.lock();
        paused
            .get_or_insert_with(|| PausedPurges {
                at,
                purges: Vec::new(),
            })
            .at = at;
    }

    /// Finishes the purges stopped since [`DelayedMessages::pause_purges`], and lets later
    /// ones run through; returns how many messages they dropped.
    pub(crate) fn resume_purges(&self) -> usize {
        let paused = self.paused_purges.lock().take();
        let purges = paused.map(|p| p.purges).unwrap_or_default();
        purges
            .into_iter()
            .map(|purge| match purge {
                PausedPurge::NotBegun { key, deleted } => {
                    self.drop_held_by(&key.0, &key.1, deleted)
                }
                PausedPurge::Begun { key, dropping } => self.finish_dropping(&key, dropping),
            })
            .sum()
    }

    /// Drops what [`DelayedMessages::start_dropping`] took from the exchange: those in the far
    /// tier a chunk per lock hold (releases and publishers get the lock in between), those on
    /// disk, those in the wheel; frees them outside the lock. Returns how many.
    pub(super) fn finish_dropping(&self, key: &ExchangeKey, dropping: Dropping) -> usize {
        let Dropping {
            beyond,
            incarnations,
        } = dropping;
        let mut dropped = 0;
        let mut beyond = beyond.into_iter();
        let mut chunk: Vec<Entry<Held>> = Vec::with_capacity(PURGE_CHUNK);
        let mut stored = Vec::new();
        loop {
            {
                let mut inner = self.scheduler.lock();
                for (due_ms, seq) in beyond.by_ref().take(PURGE_CHUNK) {
                    let id = id_of(DelayedId { due_ms, seq });
                    chunk.extend(inner.cancel_dropped(id, &mut stored));
                }
            }
            if chunk.is_empty() {
                break;
            }
            dropped += chunk.len();
            self.discard_entries(&mut chunk);
        }
        let dropped_incarnation = |inc: u64| incarnations.iter().any(|&(i, _)| i == inc);
        dropped += self.drop_disk_held_by(key, &dropped_incarnation);
        // What already moved into the wheel: a second or so of messages.
        {
            let mut guard = self.scheduler.lock();
            let inner = &mut *guard;
            let ids: Vec<DeadlineId> = inner
                .core
                .in_wheel()
                .filter_map(|(id, entry)| match entry {
                    Entry::Held(held) if dropped_incarnation(held.incarnation()) => Some(id),
                    _ => None,
                })
                .collect();
            for id in ids {
                chunk.extend(inner.cancel_dropped(id, &mut stored));
            }
            for &(_, first_seq) in &incarnations {
                inner.book.forget_incarnation(key, first_seq);
            }
        }
        self.release_stored(stored);
        dropped += chunk.len();
        self.discard_entries(&mut chunk);
        dropped
    }

    /// Takes the exchange's messages from it: a purge (`deleted` false) moves the exchange to
    /// a fresh incarnation and takes the current one's; a deletion (the exchange is retired
    /// already) takes every incarnation of that name that is not current (a namesake declared
    /// since keeps its own). Their indexes go at once (their counts with them), and their
    /// far-tier ids are returned to drop. `None` when there is nothing to take.
    pub(super) fn start_dropping(&self, key: &ExchangeKey, deleted: bool) -> Option<Dropping> {
        let mut guard = self.scheduler.lock();
        let book = &mut guard.book;
        let taken: Vec<u64> = if deleted {
            let by_first_seq = book.incarnations.get(key)?;
            by_first_seq
                .values()
                .copied()
                .filter(|inc| {
                    let index = book.exchanges.get(inc);
                    index.is_some_and(|index| !index.target.is_current())
                })
                .collect()
        } else {
            let index = book.current(key)?;
            let incarnation = index.target.incarnation;
            // Under the scheduler's lock, which every hold takes to read the incarnation:
            // a message held from now on is the new incarnation's. Refused only when the
            // exchange was deleted meanwhile: its messages go all the same.
            index.target.exchange.renew(incarnation);
            vec![incarnation]
        };
        let mut dropping = Dropping {
            beyond: Vec::new(),
            incarnations: Vec::with_capacity(taken.len()),
        };
        for incarnation in taken {
            if let Some(index) = book.exchanges.remove(&incarnation) {
                dropping.beyond.extend(index.beyond);
                dropping.incarnations.push((incarnation, index.first_seq));
            }
        }
        (!dropping.incarnations.is_empty()).then_some(dropping)
    }

    /// Drops the messages held on disk of the incarnations `dropped` picks (every hold of them
    /// is submitted by now, so the store's index shows them), [`PURGE_CHUNK`] per lock hold
    /// and per submitted removal (the exchange name's range of the index is read a chunk at a
    /// time; each id is told apart by its incarnation); returns how many.
    fn drop_disk_held_by(&self, key: &ExchangeKey, dropped: &dyn Fn(u64) -> bool) -> usize {
        let mut count = 0;
        let mut from = DeadlineId { due_ms: 0, seq: 0 };
        loop {
            let mut disk_guard = self.disk.lock();
            let Some(disk) = disk_guard.as_mut() else {
                return count;
            };
            let view = match disk.view() {
                Ok(view) => view,
                Err(e) => {
                    tracing::error!(error = %e, "dropping a delayed exchange's stored messages failed");
                    return count;
                }
            };
            let page = view
                .delayed_ids_of(&key.0, &key.1, from, PURGE_CHUNK)
                .and_then(|ids| {
                    let theirs: Vec<DeadlineId> = {
                        let inner = self.scheduler.lock();
                        ids.iter()
                            .copied()
                            .filter(|id| {
                                let inc = inner.book.stored_incarnation(key, id.seq);
                                inc.is_some_and(dropped)
                            })
                            .collect()
                    };
                    let mut taken = Vec::with_capacity(theirs.len());
                    for id in theirs {
                        if disk.take(id, &view)? {
                            taken.push(id);
                        }
                    }
                    Ok((ids.last().copied(), taken))
                });
            drop(view);
            let (last, taken) = match page {
                Ok(page) => page,
                Err(e) => {
                    tracing::error!(error = %e, "dropping a delayed exchange's stored messages failed");
                    (None, Vec::new())
                }
            };
            count += taken.len();
            // Under the disk tier's lock: no refill may find them before the index hides them.
            self.release_stored(taken);
            drop(disk_guard);
            match last {
                Some(last) => from = successor(last),
                None => return count,
            }
        }
    }

    fn discard_entries(&self, entries: &mut Vec<Entry<Held>>) {
        for entry in entries.drain(..) {
            if let Entry::Held(held) = entry {
                self.discard(held.message);
            }
        }
    }
}

/// Where the test double stops purges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PauseAt {
    /// Before a purge begins: for a deletion, the exchange is gone from its vhost and its
    /// messages not yet dropped.
    Start,
    /// Once it has begun: its messages are no longer the exchange's, and not dropped yet.
    Begun,
}

/// Purges the test double stopped.
pub(super) struct PausedPurges {
    at: PauseAt,
    purges: Vec<PausedPurge>,
}

pub(super) enum PausedPurge {
    NotBegun {
        key: ExchangeKey,
        deleted: bool,
    },
    Begun {
        key: ExchangeKey,
        dropping: Dropping,
    },
}

/// What a purge drops (see [`DelayedMessages::start_dropping`]).
pub(super) struct Dropping {
    /// The incarnations' messages in the far tier, as (due, seq).
    beyond: Vec<(u64, u64)>,
    /// The incarnations taken, each with the first sequence number of its stored messages.
    incarnations: Vec<(u64, u64)>,
}
