//! What an operator sees of held messages: counts, pages in due order (filterable by due
//! time), next due times and histograms, read a chunk or a page at a time from the wheel, the
//! far tier's order and the disk tier's index, so that a look at a million held messages never
//! holds up a release for long.

use std::collections::BTreeMap;

use dwellmq_codec::ShortStr;
use dwellmq_core::schedule::DeadlineId;
use dwellmq_core::PackedMessage;

use super::held::{ExchangeKey, Held};
use super::{id_of, successor, DelayedId, DelayedMessageInfo, DelayedMessages};
use crate::broker::scheduler::Entry;

impl DelayedMessages {
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
                    Entry::Held(held) if held.target.is_current() => {
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
                Entry::Held(held) if held.belongs_to(&key) && held.target.is_current() => {
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
