//! Inspection and operator control of held messages: counts, listing, cancel, purge.

use std::time::Instant;

use dwellmq_codec::ShortStr;

use super::held::Held;
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
        loop {
            {
                let mut inner = self.inner.lock();
                for (due_ms, seq) in beyond.by_ref().take(PURGE_CHUNK) {
                    let id = id_of(DelayedId { due_ms, seq });
                    chunk.extend(inner.scheduler.cancel(id));
                }
            }
            if chunk.is_empty() {
                break;
            }
            dropped += chunk.len();
            self.discard_entries(&mut chunk);
        }
        // What already moved into the wheel: a second or so of messages.
        self.inner.lock().scheduler.drain_wheel_where(
            |entry| matches!(entry, Entry::Release(held) if held.belongs_to(&key)),
            &mut chunk,
        );
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
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let deadline = id_of(id);
        if !matches!(inner.scheduler.get(deadline), Some(Entry::Release(_))) {
            return false;
        }
        let far = inner.scheduler.is_far(deadline);
        let Some(Entry::Release(held)) = inner.scheduler.cancel(deadline) else {
            return false;
        };
        inner.forget(&held, far.then_some((id.due_ms, id.seq)));
        drop(guard);
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
                Entry::Tick(_) => None,
            }
        });
        in_wheel
            .into_iter()
            .chain(beyond)
            .take(limit)
            .map(|(id, held)| {
                let (routing_key, headers) = held.message.key_and_headers();
                DelayedMessageInfo {
                    id,
                    due_ms: id.due_ms,
                    routing_key: routing_key.to_string(),
                    headers,
                    body_size: held.message.body_len(),
                }
            })
            .collect()
    }

    /// Held messages that found no route when released (dropped), since start.
    pub(crate) fn unroutable(&self) -> u64 {
        self.inner.lock().unroutable
    }

    /// Messages held by all delayed exchanges.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().exchanges.values().map(|i| i.count).sum()
    }
}
