//! The delayed exchanges' book: per exchange incarnation, counts and the due order of its
//! messages in the far tier. It lives beside the core scheduler under the scheduler's lock
//! (the holder's part of [`Locked`]), so that a message leaves the scheduler and its
//! exchange's counts in one lock hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dwellmq_core::schedule::DeadlineId;

use super::held::{ExchangeKey, Held, Target};
use super::{Locked, RETIRED};
use crate::broker::exchange::Exchange;
use crate::broker::scheduler::Entry;
use crate::broker::vhost::VHost;

/// Per exchange incarnation: counts, and the due order of its messages in the far tier.
pub(super) struct ExchangeIndex {
    /// What its messages point at.
    pub(super) target: Arc<Target>,
    /// (due, sequence) of its messages in the far tier.
    pub(super) beyond: BTreeSet<(u64, u64)>,
    pub(super) count: usize,
    pub(super) bytes: u64,
    /// The scheduler's next sequence number when the index was made (0 for one restored at
    /// start): its stored messages are numbered from here on ([`Book::incarnations`]).
    pub(super) first_seq: u64,
}

impl ExchangeIndex {
    /// Takes `count` messages of `bytes` body octets in all out of the counts (saturating);
    /// true when it counts none any more.
    fn uncount(&mut self, count: usize, bytes: u64) -> bool {
        self.count = self.count.saturating_sub(count);
        self.bytes = self.bytes.saturating_sub(bytes);
        self.count == 0
    }
}

/// The delayed exchanges' part of the scheduler's locked state.
#[derive(Default)]
pub(crate) struct Book {
    /// Scheduler sequence → stored id, for the few held messages scheduled under another id
    /// than the store's (caught up with after a restart).
    pub(super) stored_as: BTreeMap<u64, DeadlineId>,
    /// By incarnation: those holding messages, the exchanges' current ones and those a purge
    /// or deletion has not begun dropping yet. B-trees, not hash maps: a hash map holding many
    /// entries stalls everything using it for milliseconds whenever it rehashes.
    pub(super) exchanges: BTreeMap<u64, ExchangeIndex>,
    /// The store holds messages by exchange name, not incarnation: by name, each incarnation
    /// holding messages or being dropped, by the first sequence number of its messages. A
    /// stored message is its name's latest incarnation that began at or before its sequence
    /// number (incarnations of one name follow one another: the old one is retired or renewed
    /// before the new one holds anything). One whose incarnation is not in `exchanges` (being
    /// dropped) is dropped, not moved into the wheel.
    pub(super) incarnations: BTreeMap<ExchangeKey, BTreeMap<u64, u64>>,
    /// Durable exchanges whose stored definition could not be restored: their held messages
    /// stay on disk untouched (the disk tier does not read their ids) until a declare takes
    /// the exchange back, or a restart with a build or configuration that restores it.
    pub(super) kept: BTreeSet<ExchangeKey>,
    pub(super) unroutable: u64,
}

impl Book {
    /// The index of incarnation `incarnation` of the exchange, made (its stored messages
    /// numbered from `first_seq` on) if it holds nothing yet.
    pub(super) fn index_of(
        &mut self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        incarnation: u64,
        first_seq: u64,
    ) -> &mut ExchangeIndex {
        let Book {
            exchanges,
            incarnations,
            ..
        } = self;
        exchanges.entry(incarnation).or_insert_with(|| {
            let target = Target::new(vhost, exchange, incarnation);
            incarnations
                .entry(target.key.clone())
                .or_default()
                .insert(first_seq, incarnation);
            ExchangeIndex {
                target,
                beyond: BTreeSet::new(),
                count: 0,
                bytes: 0,
                first_seq,
            }
        })
    }

    /// The incarnation a message the store holds for exchange `key` under sequence number
    /// `seq` belongs to, if it is known (holding messages, or being dropped).
    pub(super) fn stored_incarnation(&self, key: &ExchangeKey, seq: u64) -> Option<u64> {
        let by_first_seq = self.incarnations.get(key)?;
        by_first_seq.range(..=seq).next_back().map(|(_, &inc)| inc)
    }

    /// The index of the incarnation a stored message belongs to; `None` when that one is
    /// being dropped or gone.
    pub(super) fn stored_index(&self, key: &ExchangeKey, seq: u64) -> Option<&ExchangeIndex> {
        self.exchanges.get(&self.stored_incarnation(key, seq)?)
    }

    /// The index of the exchange `key`'s current incarnation, if it holds anything.
    pub(super) fn current(&self, key: &ExchangeKey) -> Option<&ExchangeIndex> {
        let by_first_seq = self.incarnations.get(key)?;
        by_first_seq
            .values()
            .rev()
            .filter_map(|inc| self.exchanges.get(inc))
            .find(|index| index.target.is_current())
    }

    /// Forgets an incarnation's place among its name's ([`Book::incarnations`]): it holds
    /// nothing any more.
    pub(super) fn forget_incarnation(&mut self, key: &ExchangeKey, first_seq: u64) {
        if let Some(by_first_seq) = self.incarnations.get_mut(key) {
            by_first_seq.remove(&first_seq);
            if by_first_seq.is_empty() {
                self.incarnations.remove(key);
            }
        }
    }

    /// Removes an incarnation's index once it counts no message.
    fn remove_index(&mut self, incarnation: u64) {
        if let Some(index) = self.exchanges.remove(&incarnation) {
            self.forget_incarnation(&index.target.key, index.first_seq);
        }
    }

    /// The store's id of a held message the scheduler knows as `scheduled`.
    pub(super) fn stored_id(&mut self, scheduled: DeadlineId) -> DeadlineId {
        self.stored_as.remove(&scheduled.seq).unwrap_or(scheduled)
    }

    /// Takes `count` messages of `bytes` body octets in all out of their incarnation's counts,
    /// and the index with them once it counts none (nothing if it is being dropped).
    pub(super) fn forget_counts(&mut self, incarnation: u64, count: usize, bytes: u64) {
        if let Some(index) = self.exchanges.get_mut(&incarnation) {
            if index.uncount(count, bytes) {
                self.remove_index(incarnation);
            }
        }
    }

    /// Takes a message leaving the holder out of its exchange's counts (and, for one still in
    /// the far tier, out of its exchange's due order).
    pub(super) fn forget(&mut self, held: &Held, beyond: Option<(u64, u64)>) {
        // One lookup per release (a number, not a name): this runs for every message released.
        let incarnation = held.incarnation();
        let Some(index) = self.exchanges.get_mut(&incarnation) else {
            return;
        };
        if let Some(due_seq) = beyond {
            index.beyond.remove(&due_seq);
        }
        if index.uncount(1, held.message.body_len() as u64) {
            self.remove_index(incarnation);
        }
    }

    /// Notes where a message of incarnation `incarnation` is in the far tier (`Some`), or that
    /// it left it (`None` for `now`), for its exchange's due order.
    pub(super) fn note_beyond(
        &mut self,
        incarnation: u64,
        was: Option<DeadlineId>,
        now: Option<DeadlineId>,
    ) {
        if let Some(index) = self.exchanges.get_mut(&incarnation) {
            if let Some(id) = was {
                index.beyond.remove(&(id.due_ms, id.seq));
            }
            if let Some(id) = now {
                index.beyond.insert((id.due_ms, id.seq));
            }
        }
    }
}

impl Locked {
    /// The index of the exchange's current incarnation, made if it holds nothing yet; `None`
    /// once the exchange is deleted.
    pub(super) fn index_for(
        &mut self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
    ) -> Option<&mut ExchangeIndex> {
        let incarnation = exchange.incarnation();
        if incarnation == RETIRED {
            return None;
        }
        let first_seq = self.core.next_seq();
        Some(self.book.index_of(vhost, exchange, incarnation, first_seq))
    }

    /// Cancels `id` for a purge (its index is gone already): notes its store id in `stored`
    /// if the store holds it.
    pub(super) fn cancel_dropped(
        &mut self,
        id: DeadlineId,
        stored: &mut Vec<DeadlineId>,
    ) -> Option<Entry<Held>> {
        let entry = self.core.cancel(id)?;
        if let Entry::Held(held) = &entry {
            if held.stored {
                stored.push(self.book.stored_id(id));
            }
        }
        Some(entry)
    }
}
