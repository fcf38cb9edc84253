//! Inspection and operator control of held messages: counts, listing, cancel, purge.

use std::collections::BTreeMap;
use std::time::Instant;

use dwellmq_codec::ShortStr;

use dwellmq_core::schedule::DeadlineId;
use dwellmq_core::PackedMessage;

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
        let mut chunk: Vec<Entry> = Vec::with_capacity(PURGE_CHUNK);
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
                    Entry::Release(held) if dropped_incarnation(held.incarnation()) => Some(id),
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
        let found = disk.view().and_then(|view| {
            // (its exchange, its body octets), if held.
            let stored = view.delayed_message(deadline)?.map(|stored| {
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
            // (its incarnation if known, its body octets).
            let Some((key, bytes)) = stored else {
                return Ok(None);
            };
            if inner.book.kept.contains(&key) {
                // Its exchange's definition was kept on disk: what it holds stays with it,
                // for the declare that takes it back (a restore never deletes).
                return Ok(None);
            }
            if !disk.take(deadline, &view)? {
                return Ok(None);
            }
            Ok(Some((
                inner.book.stored_incarnation(&key, deadline.seq),
                bytes,
            )))
        });
        match found {
            Ok(Some((incarnation, bytes))) => {
                if let Some(incarnation) = incarnation {
                    inner.book.forget_counts(incarnation, 1, bytes);
                }
                drop(guard);
                // Under the disk tier's lock: no refill may find it before the index hides it.
                self.release_stored(vec![deadline]);
                drop(disk_guard);
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
            .current(&(ShortStr::from(vhost), ShortStr::from(exchange)))
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
        self.list_page(vhost, exchange, &page).unwrap_or_else(|e| {
            tracing::error!(error = %e, "reading a delayed exchange's stored messages failed");
            Vec::new()
        })
    }

    /// Up to `limit` ids of the exchange's disk-held messages from `from` (inclusive) and due
    /// before `until_ms`, in due order.
    fn disk_ids_of(
        &self,
        key: &ExchangeKey,
        from: DeadlineId,
        until_ms: u64,
        limit: usize,
    ) -> Vec<DeadlineId> {
        self.try_disk_ids_of(key, from, until_ms, limit)
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "reading a delayed exchange's stored messages failed");
                Vec::new()
            })
    }

    /// As `disk_ids_of`; an unreadable store is an error, not an empty tier.
    fn try_disk_ids_of(
        &self,
        key: &ExchangeKey,
        from: DeadlineId,
        until_ms: u64,
        limit: usize,
    ) -> Result<Vec<DeadlineId>, dwellmq_store::StoreError> {
        let disk_guard = self.disk.lock();
        let Some(disk) = disk_guard.as_ref() else {
            return Ok(Vec::new());
        };
        // The store keeps the exchange's messages by name: those of an incarnation being
        // dropped (a purge under way) are not its own, and skipped along with those moved
        // into the wheel (listed from there); pages are read until the listing is full.
        let mut out: Vec<DeadlineId> = Vec::new();
        let wanted = limit.saturating_add(disk.moved_out_len()).max(1);
        let mut page_from = from;
        while out.len() < limit {
            let ids = disk
                .view()
                .and_then(|view| view.delayed_ids_of(&key.0, &key.1, page_from, wanted))?;
            let inner = self.scheduler.lock();
            let current = inner
                .book
                .current(key)
                .map(|index| index.target.incarnation);
            let theirs = |id: &DeadlineId| {
                let incarnation = inner.book.stored_incarnation(key, id.seq);
                current.is_some() && incarnation == current
            };
            out.extend(
                ids.iter()
                    .filter(|&&id| id.due_ms < until_ms && !disk.is_moved_out(id) && theirs(&id)),
            );
            drop(inner);
            match ids.last() {
                Some(&last) if ids.len() == wanted && last.due_ms < until_ms => {
                    page_from = successor(last);
                }
                _ => break,
            }
        }
        out.truncate(limit);
        Ok(out)
    }

    /// Listing entries of disk-held messages, their contents read from the store's index.
    fn disk_infos(
        &self,
        ids: Vec<DeadlineId>,
    ) -> Result<Vec<DelayedMessageInfo>, dwellmq_store::StoreError> {
        let Some(store) = self
            .disk
            .lock()
            .as_ref()
            .map(|d| std::sync::Arc::clone(d.store()))
        else {
            return Ok(Vec::new());
        };
        let view = store.held_view()?;
        Ok(ids
            .into_iter()
            .filter_map(|id| {
                let stored = view.delayed_message(id).ok()??;
                Some(packed_info(
                    DelayedId {
                        due_ms: id.due_ms,
                        seq: id.seq,
                    },
                    &stored.message,
                ))
            })
            .collect())
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

    /// The same for every exchange's messages, with their exchange (those of an incarnation
    /// being dropped are not the exchange's any more, and skipped).
    fn scan_wheel_all(&self, mut found: impl FnMut(&ExchangeKey, DelayedId)) {
        let mut cursor = 0;
        loop {
            let inner = self.scheduler.lock();
            let mut seen = 0;
            for (id, entry) in inner.core.in_wheel_from(cursor).take(SCAN_CHUNK) {
                seen += 1;
                cursor = id.seq.saturating_add(1);
                match entry {
                    Entry::Release(held) if held.target.is_current() => {
                        let id = DelayedId {
                            due_ms: id.due_ms,
                            seq: id.seq,
                        };
                        found(held.exchange_key(), id);
                    }
                    _ => {}
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
        let current = || {
            let all = inner.book.exchanges.values();
            all.filter(|index| index.target.is_current())
        };
        let keys: Vec<ExchangeKey> = current().map(|i| i.target.key.clone()).collect();
        for index in current() {
            if let Some(&(due_ms, _)) = index.beyond.first() {
                earliest(&index.target.key, due_ms);
            }
        }
        drop(inner);
        for key in keys {
            if let Some(id) = self
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
            .current(&key)
            .and_then(|index| index.beyond.first())
            .map(|&(due_ms, _)| due_ms);
        drop(inner);
        let on_disk = self
            .disk_ids_of(&key, DeadlineId { due_ms: 0, seq: 0 }, u64::MAX, 1)
            .first()
            .map(|id| id.due_ms);
        [next, beyond, on_disk].into_iter().flatten().min()
    }

    /// One page of an exchange's held messages in due order: those after `page.after`, due in
    /// `[page.due_from_ms, page.due_until_ms)`, at most `page.limit`. Only the page is read
    /// from the ordered index, however many messages the exchange holds; the wheel (the next
    /// second) is scanned in chunks. Fails when the store cannot be read (reopening after a
    /// failed fsync): a page without the disk-held messages would be wrong, not short.
    pub(crate) fn list_page(
        &self,
        vhost: &str,
        exchange: &str,
        page: &ListPage,
    ) -> Result<Vec<DelayedMessageInfo>, dwellmq_store::StoreError> {
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
        if let Some(index) = inner.book.current(&key) {
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
                Entry::Release(held) if held.belongs_to(&key) && held.target.is_current() => {
                    Some(info(id, held))
                }
                _ => None,
            })
            .take(page.limit)
            .collect();
        drop(inner);
        let from = DeadlineId {
            due_ms: start.0,
            seq: start.1,
        };
        let on_disk = self.try_disk_ids_of(&key, from, page.due_until_ms, page.limit)?;
        let mut all = in_memory;
        all.extend(self.disk_infos(on_disk)?);
        all.sort_by_key(|info| info.id);
        all.dedup_by_key(|info| info.id);
        all.truncate(page.limit);
        Ok(all)
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
            let Some(index) = inner.book.current(&key) else {
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
            let Some(&last) = ids.last() else {
                break;
            };
            for id in &ids {
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
    /// The incarnations' messages in the far tier, as (due, seq).
    beyond: Vec<(u64, u64)>,
    /// The incarnations taken, each with the first sequence number of its stored messages.
    incarnations: Vec<(u64, u64)>,
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
