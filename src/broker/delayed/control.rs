//! Inspection and operator control of held messages: counts, listing, cancel, purge.

use std::collections::BTreeMap;
use std::time::Instant;

use dwellmq_codec::ShortStr;

use super::held::{ExchangeKey, Held};
use super::{id_of, key_of, DelayedId, DelayedMessageInfo, DelayedMessages, Entry, PURGE_CHUNK};

impl DelayedMessages {
    /// Drops every message held for `exchange` in `vhost` (the exchange was deleted, or an
    /// operator purged it); returns how many.
    pub(crate) fn purge_exchange(&self, vhost: &ShortStr, exchange: &ShortStr) -> usize {
        let started = Instant::now();
        let dropped = self.drop_held_by(vhost, exchange);
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

    /// Removes the exchange's index, then its messages a chunk per lock hold (releases and
    /// publishers get the lock in between), and frees them outside the lock.
    fn drop_held_by(&self, vhost: &ShortStr, exchange: &ShortStr) -> usize {
        let key = key_of(vhost, exchange);
        let Some(index) = self.inner.lock().exchanges.remove(&key) else {
            return 0;
        };
        let mut dropped = 0;
        let mut beyond = index.beyond.into_iter();
        let mut chunk: Vec<Entry> = Vec::with_capacity(PURGE_CHUNK);
        let mut stored = Vec::new();
        loop {
            {
                let mut inner = self.inner.lock();
                for (due_ms, seq) in beyond.by_ref().take(PURGE_CHUNK) {
                    let id = id_of(DelayedId { due_ms, seq });
                    if let Some(entry) = inner.scheduler.cancel(id) {
                        if let Entry::Release(held) = &entry {
                            stored.extend(held.stored.id(id));
                        }
                        chunk.push(entry);
                    }
                }
            }
            if chunk.is_empty() {
                break;
            }
            dropped += chunk.len();
            self.discard_entries(&mut chunk);
        }
        // What already moved into the wheel: a second or so of messages.
        {
            let mut inner = self.inner.lock();
            stored.extend(
                inner
                    .scheduler
                    .in_wheel()
                    .filter_map(|(id, entry)| match entry {
                        Entry::Release(held) if held.belongs_to(&key) => held.stored.id(id),
                        _ => None,
                    }),
            );
            inner.scheduler.drain_wheel_where(
                |entry| matches!(entry, Entry::Release(held) if held.belongs_to(&key)),
                &mut chunk,
            );
        }
        self.release_stored(stored);
        dropped += chunk.len();
        self.discard_entries(&mut chunk);
        dropped
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
        self.cancel_where(id, |_| true)
    }

    /// Cancels one held message if the exchange holds it (the HTTP API addresses messages
    /// through their exchange); false if it does not, or the message is already released.
    pub(crate) fn cancel_held_by(&self, vhost: &str, exchange: &str, id: DelayedId) -> bool {
        let key = (ShortStr::from(vhost), ShortStr::from(exchange));
        self.cancel_where(id, |held| held.belongs_to(&key))
    }

    fn cancel_where(&self, id: DelayedId, wanted: impl Fn(&Held) -> bool) -> bool {
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let deadline = id_of(id);
        if !matches!(inner.scheduler.get(deadline), Some(Entry::Release(held)) if wanted(held)) {
            return false;
        }
        let far = inner.scheduler.is_far(deadline);
        let Some(Entry::Release(held)) = inner.scheduler.cancel(deadline) else {
            return false;
        };
        inner.forget(&held, far.then_some((id.due_ms, id.seq)));
        drop(guard);
        if let Some(id) = held.stored.id(deadline) {
            self.release_stored(vec![id]);
        }
        self.discard(held.message);
        true
    }

    /// (count, body bytes) held by one exchange.
    pub(crate) fn stats(&self, vhost: &str, exchange: &str) -> (usize, u64) {
        let inner = self.inner.lock();
        inner
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
        let key = (ShortStr::from(vhost), ShortStr::from(exchange));
        let inner = self.inner.lock();
        let Some(index) = inner.exchanges.get(&key) else {
            return Vec::new();
        };
        let mut in_wheel: Vec<(DelayedId, &Held)> = inner
            .scheduler
            .in_wheel()
            .filter_map(|(id, entry)| match entry {
                Entry::Release(held) if held.belongs_to(&key) => Some((
                    DelayedId {
                        due_ms: id.due_ms,
                        seq: id.seq,
                    },
                    held,
                )),
                _ => None,
            })
            .collect();
        in_wheel.sort_by_key(|(id, _)| *id);
        let beyond = index.beyond.iter().filter_map(|&(due_ms, seq)| {
            let id = DelayedId { due_ms, seq };
            match inner.scheduler.get(id_of(id))? {
                Entry::Release(held) => Some((id, held)),
                Entry::Tick(_) | Entry::Deliver(_) => None,
            }
        });
        in_wheel
            .into_iter()
            .chain(beyond)
            .take(limit)
            .map(|(id, held)| info(id, held))
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
            let inner = self.inner.lock();
            let mut seen = 0;
            for (id, entry) in inner.scheduler.in_wheel_from(cursor).take(SCAN_CHUNK) {
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
        let inner = self.inner.lock();
        for (key, index) in &inner.exchanges {
            if let Some(&(due_ms, _)) = index.beyond.first() {
                earliest(key, due_ms);
            }
        }
        drop(inner);
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
        let inner = self.inner.lock();
        let beyond = inner
            .exchanges
            .get(&key)
            .and_then(|index| index.beyond.first())
            .map(|&(due_ms, _)| due_ms);
        match (next, beyond) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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
        let inner = self.inner.lock();
        if let Some(index) = inner.exchanges.get(&key) {
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
        ids.iter()
            .filter_map(|&id| match inner.scheduler.get(id_of(id))? {
                Entry::Release(held) if held.belongs_to(&key) => Some(info(id, held)),
                _ => None,
            })
            .take(page.limit)
            .collect()
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
            let inner = self.inner.lock();
            let Some(index) = inner.exchanges.get(&key) else {
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
        counts
    }

    /// Held messages that found no route when released (dropped), since start.
    pub(crate) fn unroutable(&self) -> u64 {
        self.inner.lock().unroutable
    }

    /// Counts unroutable releases from zero again (a reset between tests).
    pub(crate) fn clear_unroutable(&self) {
        self.inner.lock().unroutable = 0;
    }

    /// Messages held by all delayed exchanges.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().exchanges.values().map(|i| i.count).sum()
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
