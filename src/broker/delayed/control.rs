//! Inspection and operator control of held messages: counts, listing, cancel, purge.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use dwellmq_codec::ShortStr;

use dwellmq_core::schedule::DeadlineId;
use dwellmq_core::PackedMessage;

use super::disk::Taken;
use super::held::{ExchangeKey, Held};
use super::{id_of, key_of, DelayedId, DelayedMessageInfo, DelayedMessages, Entry, PURGE_CHUNK};

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

    /// Marks the exchange's messages as being dropped (every one numbered below the mark),
    /// then drops them: those in the far tier a chunk per lock hold (releases and publishers
    /// get the lock in between), those on disk, those in the wheel; frees them outside the
    /// lock.
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

    /// Drops what [`DelayedMessages::start_dropping`] marked; returns how many.
    pub(super) fn finish_dropping(&self, key: &ExchangeKey, dropping: Dropping) -> usize {
        let Dropping { beyond, mark, kept } = dropping;
        let mut dropped = 0;
        let mut beyond = beyond.into_iter();
        let mut chunk: Vec<Entry> = Vec::with_capacity(PURGE_CHUNK);
        let mut stored = Vec::new();
        loop {
            {
                let mut inner = self.scheduler.lock();
                for (due_ms, seq) in beyond.by_ref().take(PURGE_CHUNK) {
                    let id = id_of(DelayedId { due_ms, seq });
                    chunk.extend(inner.cancel_dropped(id, kept, &mut stored));
                }
            }
            if chunk.is_empty() {
                break;
            }
            dropped += chunk.len();
            self.discard_entries(&mut chunk);
        }
        dropped += self.drop_disk_held_by(key, mark, kept);
        // What already moved into the wheel: a second or so of messages.
        {
            let mut guard = self.scheduler.lock();
            let inner = &mut *guard;
            let stored_as = &inner.book.stored_as;
            let ids: Vec<DeadlineId> = inner
                .core
                .in_wheel()
                .filter_map(|(id, entry)| match entry {
                    Entry::Release(held) if held.belongs_to(key) => {
                        // A message caught up with after a restart is numbered by its store id.
                        let seq = stored_as.get(&id.seq).map_or(id.seq, |s| s.seq);
                        (seq < mark).then_some(id)
                    }
                    _ => None,
                })
                .collect();
            for id in ids {
                chunk.extend(inner.cancel_dropped(id, kept, &mut stored));
            }
            if inner.book.purging.get(key) == Some(&mark) {
                inner.book.purging.remove(key);
            }
        }
        self.release_stored(stored);
        dropped += chunk.len();
        self.discard_entries(&mut chunk);
        dropped
    }

    /// Sets the mark below which the exchange's messages are dropped, and takes its far-tier
    /// ids out of its index. `None` when it holds nothing.
    ///
    /// The mark is the scheduler's next number: a message published from now on is above
    /// it. Unless the exchange was deleted and the index already points at an exchange
    /// declared under its name since (a publish to it came between the deletion and this):
    /// then that exchange keeps its index and its messages, numbered from `since_seq` on.
    pub(super) fn start_dropping(&self, key: &ExchangeKey, deleted: bool) -> Option<Dropping> {
        loop {
            let target = Arc::clone(&self.scheduler.lock().book.exchanges.get(key)?.target);
            // Asked before the scheduler's lock is taken: the vhost's exchange table has its
            // own lock, never to be taken under this one.
            let taken_over = deleted && target.vhost.is_current(&target.exchange);
            let mut guard = self.scheduler.lock();
            let inner = &mut *guard;
            let next_seq = inner.core.next_seq();
            let index = inner.book.exchanges.get_mut(key)?;
            if !Arc::ptr_eq(&index.target, &target) {
                continue; // Changed meanwhile: ask again.
            }
            let dropping = if taken_over {
                let mark = index.since_seq;
                let mut old = Vec::new();
                index.beyond.retain(|&due_seq| {
                    let below = due_seq.1 < mark;
                    if below {
                        old.push(due_seq);
                    }
                    !below
                });
                Dropping {
                    beyond: old,
                    mark,
                    kept: true,
                }
            } else {
                let index = inner.book.exchanges.remove(key)?;
                Dropping {
                    beyond: index.beyond.into_iter().collect(),
                    mark: next_seq,
                    kept: false,
                }
            };
            let purging = inner.book.purging.entry(key.clone()).or_insert(0);
            *purging = (*purging).max(dropping.mark);
            return Some(dropping);
        }
    }

    /// Drops the exchange's messages numbered below `mark` held on disk: its pending ones
    /// (every hold below the mark is submitted by now), then the stored ones, [`PURGE_CHUNK`]
    /// per lock hold and per submitted removal (the per-exchange index is read a chunk at a
    /// time); returns how many. With `kept`, they are taken out of the exchange's counts.
    fn drop_disk_held_by(&self, key: &ExchangeKey, mark: u64, kept: bool) -> usize {
        let mut dropped = 0;
        let mut from = DeadlineId { due_ms: 0, seq: 0 };
        let mut pending_done = false;
        loop {
            let mut disk_guard = self.disk.lock();
            let Some(disk) = disk_guard.as_mut() else {
                return dropped;
            };
            disk.purge_round();
            // One snapshot per lock hold, for the pending ones and the page alike.
            let snapshot = match disk.store().snapshot() {
                Ok(snapshot) => snapshot,
                Err(e) => {
                    tracing::error!(error = %e, "dropping a delayed exchange's stored messages failed");
                    return dropped;
                }
            };
            let mut pending_held = Vec::new();
            if !pending_done {
                pending_done = true;
                let pending: Vec<DeadlineId> = disk
                    .pending_of(key)
                    .map(|(id, _)| id)
                    .filter(|id| id.seq < mark)
                    .collect();
                for id in pending {
                    if let Ok(Taken::Pending(held)) = disk.take(id, &snapshot) {
                        pending_held.push((id, held));
                    }
                }
            }
            let page = snapshot
                .delayed_ids_of(&key.0, &key.1, from, PURGE_CHUNK)
                .and_then(|ids| {
                    let mut taken = Vec::with_capacity(ids.len());
                    for &id in ids.iter().filter(|id| id.seq < mark) {
                        if !matches!(disk.take(id, &snapshot)?, Taken::No) {
                            taken.push(id);
                        }
                    }
                    Ok((ids.last().copied(), taken))
                });
            let (last, mut taken) = match page {
                Ok(page) => page,
                Err(e) => {
                    tracing::error!(error = %e, "dropping a delayed exchange's stored messages failed");
                    (None, Vec::new())
                }
            };
            if kept {
                let mut inner = self.scheduler.lock();
                for (_, held) in &pending_held {
                    inner.book.forget(held, None);
                }
                // Their sizes are not read back: the counts of an exchange that raced in
                // under a deleted one's name lose only the count.
                if !taken.is_empty() {
                    inner.book.forget_counts(key, taken.len(), 0);
                }
            }
            drop(disk_guard);
            taken.extend(pending_held.iter().map(|(id, _)| *id));
            dropped += taken.len();
            // A pending one's Hold was submitted first: its Release follows it.
            self.release_stored(taken);
            match last {
                Some(last) => from = successor(last),
                None => return dropped,
            }
        }
    }

    fn discard_entries(&self, entries: &mut Vec<Entry>) {
        for entry in entries.drain(..) {
            if let Entry::Release(held) = entry {
                self.discard(held.message);
            }
        }
    }

    /// Cancels one held message; false if it is unknown or already released.
    pub(crate) fn cancel(&self, id: DelayedId) -> bool {
        self.cancel_where(id, None)
    }

    /// Cancels one held message if the exchange holds it (the HTTP API addresses messages
    /// through their exchange); false if it does not, or the message is already released.
    pub(crate) fn cancel_held_by(&self, vhost: &str, exchange: &str, id: DelayedId) -> bool {
        let key = (ShortStr::from(vhost), ShortStr::from(exchange));
        self.cancel_where(id, Some(&key))
    }

    fn cancel_where(&self, id: DelayedId, of: Option<&ExchangeKey>) -> bool {
        let wanted = |held: &Held| of.is_none_or(|key| held.belongs_to(key));
        let mut disk_guard = self.disk.lock();
        let mut guard = self.scheduler.lock();
        let inner = &mut *guard;
        let deadline = id_of(id);
        if let Some(Entry::Release(held)) = inner.core.get(deadline) {
            if !wanted(held) {
                return false;
            }
            let far = inner.core.is_far(deadline);
            let Some(Entry::Release(held)) = inner.core.cancel(deadline) else {
                return false;
            };
            inner.book.forget(&held, far.then_some((id.due_ms, id.seq)));
            let stored = held.stored.then(|| inner.book.stored_id(deadline));
            drop(guard);
            drop(disk_guard);
            self.release_stored(stored.into_iter().collect());
            self.discard(held.message);
            return true;
        }
        // Held on disk?
        let Some(disk) = disk_guard.as_mut() else {
            return false;
        };
        if disk.pending(deadline).is_some_and(|held| !wanted(held)) {
            return false;
        }
        let found = disk.store().snapshot().and_then(|snapshot| {
            // (its exchange, its body octets), if committed.
            let stored = snapshot.delayed_message(deadline)?.map(|stored| {
                let key: ExchangeKey = (
                    ShortStr::from(stored.vhost.as_str()),
                    ShortStr::from(stored.exchange.as_str()),
                );
                (key, stored.message.body_len() as u64)
            });
            if let (Some(of), Some((key, _))) = (of, &stored) {
                if of != key {
                    return Ok(None);
                }
            }
            Ok(match disk.take(deadline, &snapshot)? {
                Taken::No => None,
                Taken::Pending(held) => {
                    Some((held.exchange_key().clone(), held.message.body_len() as u64))
                }
                Taken::Stored => stored,
            })
        });
        match found {
            Ok(Some((key, bytes))) => {
                inner.book.forget_counts(&key, 1, bytes);
                drop(guard);
                drop(disk_guard);
                self.release_stored(vec![deadline]);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::error!(error = %e, "cancelling a stored delayed message failed");
                false
            }
        }
    }

    /// (count, body bytes) held by one exchange.
    pub(crate) fn stats(&self, vhost: &str, exchange: &str) -> (usize, u64) {
        let inner = self.scheduler.lock();
        inner
            .book
            .exchanges
            .get(&(ShortStr::from(vhost), ShortStr::from(exchange)))
            .map(|i| (i.count, i.bytes))
            .unwrap_or((0, 0))
    }

    /// Up to `limit` held messages of one exchange, in due order.
    pub(crate) fn list(
        &self,
        vhost: &str,
        exchange: &str,
        limit: usize,
    ) -> Vec<DelayedMessageInfo> {
        let page = ListPage {
            after: None,
            due_from_ms: 0,
            due_until_ms: u64::MAX,
            limit,
        };
        self.list_page(vhost, exchange, &page)
    }

    /// Up to `limit` ids of the exchange's disk-held messages from `from` (inclusive) and due
    /// before `until_ms`, in due order, with their contents if they are still in RAM (pending).
    fn disk_ids_of(
        &self,
        key: &ExchangeKey,
        from: DeadlineId,
        until_ms: u64,
        limit: usize,
    ) -> Vec<(DeadlineId, Option<DelayedMessageInfo>)> {
        let disk_guard = self.disk.lock();
        let Some(disk) = disk_guard.as_ref() else {
            return Vec::new();
        };
        // Those leaving are skipped: read enough to fill the page all the same.
        let wanted = limit.saturating_add(disk.leaving_len());
        let stored = match disk
            .store()
            .snapshot()
            .and_then(|snapshot| snapshot.delayed_ids_of(&key.0, &key.1, from, wanted))
        {
            Ok(ids) => ids,
            Err(e) => {
                tracing::error!(error = %e, "reading a delayed exchange's stored messages failed");
                Vec::new()
            }
        };
        let mut out: Vec<(DeadlineId, Option<DelayedMessageInfo>)> = stored
            .into_iter()
            .filter(|&id| id.due_ms < until_ms && !disk.is_leaving(id))
            .map(|id| (id, None))
            .collect();
        out.extend(
            disk.pending_of(key)
                .filter(|&(id, _)| id >= from && id.due_ms < until_ms)
                .map(|(id, held)| {
                    let id = DelayedId {
                        due_ms: id.due_ms,
                        seq: id.seq,
                    };
                    (id_of(id), Some(info(id, held)))
                }),
        );
        out.sort_by_key(|(id, _)| *id);
        out.dedup_by_key(|(id, _)| *id);
        out.truncate(limit);
        out
    }

    /// Listing entries of disk-held messages, their contents read from the store.
    fn disk_infos(
        &self,
        ids: Vec<(DeadlineId, Option<DelayedMessageInfo>)>,
    ) -> Vec<DelayedMessageInfo> {
        let Some(store) = self
            .disk
            .lock()
            .as_ref()
            .map(|d| std::sync::Arc::clone(d.store()))
        else {
            return Vec::new();
        };
        let snapshot = match store.snapshot() {
            Ok(snapshot) => snapshot,
            Err(e) => {
                tracing::error!(error = %e, "reading stored delayed messages failed");
                return Vec::new();
            }
        };
        ids.into_iter()
            .filter_map(|(id, info)| {
                if info.is_some() {
                    return info;
                }
                let stored = snapshot.delayed_message(id).ok()??;
                Some(packed_info(
                    DelayedId {
                        due_ms: id.due_ms,
                        seq: id.seq,
                    },
                    &stored.message,
                ))
            })
            .collect()
    }

    /// Calls `found` with the id of each message of `key` in the timer wheel, taking the lock
    /// for [`SCAN_CHUNK`] wheel entries at a time: the wheel holds the next second of every
    /// exchange's messages, which under load is many, and releases must not wait for a scan.
    fn scan_wheel(&self, key: &ExchangeKey, mut found: impl FnMut(DelayedId)) {
        self.scan_wheel_all(|of, id| {
            if of == key {
                found(id)
            }
        });
    }

    /// The same for every exchange's messages, with their exchange.
    fn scan_wheel_all(&self, mut found: impl FnMut(&ExchangeKey, DelayedId)) {
        let mut cursor = 0;
        loop {
            let inner = self.scheduler.lock();
            let mut seen = 0;
            for (id, entry) in inner.core.in_wheel_from(cursor).take(SCAN_CHUNK) {
                seen += 1;
                cursor = id.seq.saturating_add(1);
                if let Entry::Release(held) = entry {
                    let id = DelayedId {
                        due_ms: id.due_ms,
                        seq: id.seq,
                    };
                    found(held.exchange_key(), id);
                }
            }
            if seen < SCAN_CHUNK {
                return;
            }
        }
    }

    /// When each exchange's next message is due, for every exchange holding any: one chunked
    /// pass over the wheel for all of them (what `/metrics` and the exchange list show).
    pub(crate) fn next_due_all(&self) -> BTreeMap<(ShortStr, ShortStr), u64> {
        let mut next: BTreeMap<ExchangeKey, u64> = BTreeMap::new();
        let mut earliest = |key: &ExchangeKey, due_ms: u64| match next.get_mut(key) {
            Some(due) => *due = (*due).min(due_ms),
            None => {
                next.insert(key.clone(), due_ms);
            }
        };
        self.scan_wheel_all(|key, id| earliest(key, id.due_ms));
        let inner = self.scheduler.lock();
        let keys: Vec<ExchangeKey> = inner.book.exchanges.keys().cloned().collect();
        for (key, index) in &inner.book.exchanges {
            if let Some(&(due_ms, _)) = index.beyond.first() {
                earliest(key, due_ms);
            }
        }
        drop(inner);
        for key in keys {
            if let Some((id, _)) = self
                .disk_ids_of(&key, DeadlineId { due_ms: 0, seq: 0 }, u64::MAX, 1)
                .first()
            {
                earliest(&key, id.due_ms);
            }
        }
        next
    }

    /// When the exchange's next message is due, if it holds any (read in chunks, as
    /// [`Self::scan_wheel`]).
    pub(crate) fn next_due(&self, vhost: &str, exchange: &str) -> Option<u64> {
        let key = (ShortStr::from(vhost), ShortStr::from(exchange));
        let mut next: Option<u64> = None;
        self.scan_wheel(&key, |id| {
            next = Some(next.map_or(id.due_ms, |n| n.min(id.due_ms)));
        });
        let inner = self.scheduler.lock();
        let beyond = inner
            .book
            .exchanges
            .get(&key)
            .and_then(|index| index.beyond.first())
            .map(|&(due_ms, _)| due_ms);
        drop(inner);
        let on_disk = self
            .disk_ids_of(&key, DeadlineId { due_ms: 0, seq: 0 }, u64::MAX, 1)
            .first()
            .map(|(id, _)| id.due_ms);
        [next, beyond, on_disk].into_iter().flatten().min()
    }

    /// One page of an exchange's held messages in due order: those after `page.after`, due in
    /// `[page.due_from_ms, page.due_until_ms)`, at most `page.limit`. Only the page is read
    /// from the ordered index, however many messages the exchange holds; the wheel (the next
    /// second) is scanned in chunks.
    pub(crate) fn list_page(
        &self,
        vhost: &str,
        exchange: &str,
        page: &ListPage,
    ) -> Vec<DelayedMessageInfo> {
        let key = (ShortStr::from(vhost), ShortStr::from(exchange));
        let start = match page.after {
            Some(after) => (page.due_from_ms, 0).max((after.due_ms, after.seq.saturating_add(1))),
            None => (page.due_from_ms, 0),
        };
        let mut ids: Vec<DelayedId> = Vec::new();
        self.scan_wheel(&key, |id| {
            if (id.due_ms, id.seq) >= start && id.due_ms < page.due_until_ms {
                ids.push(id);
            }
        });
        let inner = self.scheduler.lock();
        if let Some(index) = inner.book.exchanges.get(&key) {
            ids.extend(
                index
                    .beyond
                    .range(start..)
                    .take_while(|&&(due_ms, _)| due_ms < page.due_until_ms)
                    .take(page.limit)
                    .map(|&(due_ms, seq)| DelayedId { due_ms, seq }),
            );
        }
        ids.sort_unstable();
        ids.dedup();
        // Messages released since the scan are gone from both tiers and skipped here.
        let in_memory: Vec<DelayedMessageInfo> = ids
            .iter()
            .filter_map(|&id| match inner.core.get(id_of(id))? {
                Entry::Release(held) if held.belongs_to(&key) => Some(info(id, held)),
                _ => None,
            })
            .take(page.limit)
            .collect();
        drop(inner);
        let from = DeadlineId {
            due_ms: start.0,
            seq: start.1,
        };
        let on_disk = self.disk_ids_of(&key, from, page.due_until_ms, page.limit);
        let mut all = in_memory;
        all.extend(self.disk_infos(on_disk));
        all.sort_by_key(|info| info.id);
        all.dedup_by_key(|info| info.id);
        all.truncate(page.limit);
        all
    }

    /// How many of an exchange's held messages fall due in each of `buckets` consecutive
    /// intervals of `bucket_ms` from `from_ms` (what a timeline shows). The wheel and the
    /// ordered index are walked [`SCAN_CHUNK`] entries per lock hold, so a histogram over a
    /// million held messages never holds up a release for long; messages held or released
    /// meanwhile may be counted or not, as for any snapshot of a moving set.
    pub(crate) fn due_histogram(
        &self,
        vhost: &str,
        exchange: &str,
        from_ms: u64,
        bucket_ms: u64,
        buckets: usize,
    ) -> Vec<u64> {
        let key = (ShortStr::from(vhost), ShortStr::from(exchange));
        let bucket_ms = bucket_ms.max(1);
        let until_ms = from_ms.saturating_add(bucket_ms.saturating_mul(buckets as u64));
        let mut counts = vec![0u64; buckets];
        let mut count = |due_ms: u64| {
            if due_ms >= from_ms && due_ms < until_ms {
                let at = ((due_ms - from_ms) / bucket_ms) as usize;
                if let Some(slot) = counts.get_mut(at) {
                    *slot += 1;
                }
            }
        };
        self.scan_wheel(&key, |id| count(id.due_ms));
        let mut cursor = (from_ms, 0);
        loop {
            let inner = self.scheduler.lock();
            let Some(index) = inner.book.exchanges.get(&key) else {
                break;
            };
            let mut seen = 0;
            for &(due_ms, seq) in index.beyond.range(cursor..).take(SCAN_CHUNK) {
                if due_ms >= until_ms {
                    seen = 0;
                    break;
                }
                count(due_ms);
                cursor = (due_ms, seq.saturating_add(1));
                seen += 1;
            }
            if seen < SCAN_CHUNK {
                break;
            }
        }
        let mut from = DeadlineId {
            due_ms: from_ms,
            seq: 0,
        };
        loop {
            let ids = self.disk_ids_of(&key, from, until_ms, SCAN_CHUNK);
            let Some(&(last, _)) = ids.last() else {
                break;
            };
            for (id, _) in &ids {
                count(id.due_ms);
            }
            if ids.len() < SCAN_CHUNK {
                break;
            }
            from = successor(last);
        }
        counts
    }

    /// Held messages that found no route when released (dropped), since start.
    pub(crate) fn unroutable(&self) -> u64 {
        self.scheduler.lock().book.unroutable
    }

    /// Counts unroutable releases from zero again (a reset between tests).
    pub(crate) fn clear_unroutable(&self) {
        self.scheduler.lock().book.unroutable = 0;
    }

    /// Messages held by all delayed exchanges.
    pub(crate) fn len(&self) -> usize {
        self.scheduler
            .lock()
            .book
            .exchanges
            .values()
            .map(|i| i.count)
            .sum()
    }
}

/// Entries a scan (histogram, next due time, a page's wheel part) reads per lock hold.
const SCAN_CHUNK: usize = 4096;

/// Which held messages [`DelayedMessages::list_page`] returns.
pub(crate) struct ListPage {
    /// Start after this message (the last one of the previous page).
    pub(crate) after: Option<DelayedId>,
    /// Due at or after this time (ms since the Unix epoch).
    pub(crate) due_from_ms: u64,
    /// Due before this time.
    pub(crate) due_until_ms: u64,
    pub(crate) limit: usize,
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
    /// The exchange's messages in the far tier, as (due, seq).
    beyond: Vec<(u64, u64)>,
    /// Its messages are numbered below this.
    mark: u64,
    /// Its index stays (it holds an exchange declared under the name since): what is dropped
    /// is taken out of its counts.
    kept: bool,
}

/// The id after `id` in (due, seq) order.
fn successor(id: DeadlineId) -> DeadlineId {
    match id.seq.checked_add(1) {
        Some(seq) => DeadlineId { seq, ..id },
        None => DeadlineId {
            due_ms: id.due_ms.saturating_add(1),
            seq: 0,
        },
    }
}

fn packed_info(id: DelayedId, packed: &PackedMessage) -> DelayedMessageInfo {
    DelayedMessageInfo {
        id,
        due_ms: id.due_ms,
        routing_key: packed.routing_key().unwrap_or_default().to_string(),
        headers: packed.properties().and_then(|p| p.headers),
        body_size: packed.body_len(),
    }
}

fn info(id: DelayedId, held: &Held) -> DelayedMessageInfo {
    let (routing_key, headers) = held.message.key_and_headers();
    DelayedMessageInfo {
        id,
        due_ms: id.due_ms,
        routing_key: routing_key.to_string(),
        headers,
        body_size: held.message.body_len(),
    }
}
