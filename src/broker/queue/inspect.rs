//! What the management API, `/metrics` and the test double read of a queue.

use std::sync::Arc;

use dwellmq_core::QueueEntry;

use super::consumer::Consumer;
use super::owner::QueueOwner;
use super::Queue;

/// A queue's contents at one instant (`Queue::figures`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueFigures {
    pub(crate) ready: usize,
    /// Body bytes of the ready messages.
    pub(crate) ready_bytes: u64,
    pub(crate) unacked: usize,
    /// Body bytes of the unacked messages.
    pub(crate) unacked_bytes: u64,
    /// Waiting for a delayed retry (quorum queues).
    pub(crate) retrying: usize,
    /// When the first of those is ready again (ms on the broker's clock).
    pub(crate) next_retry_at: Option<u64>,
    pub(crate) consumers: usize,
    /// Dead-lettered and kept until every target takes them (at-least-once dead-lettering),
    /// and their body bytes.
    pub(crate) dead_lettered: usize,
    pub(crate) dead_lettered_bytes: u64,
    /// Ready messages whose TTL is pending, and when the first expires.
    pub(crate) expiring: usize,
    pub(crate) next_expiry_at: Option<u64>,
    /// Ready messages left in the store only (counted in `ready`), and their body bytes.
    pub(crate) paged_out: u64,
    pub(crate) paged_out_bytes: u64,
}

impl Queue {
    /// This queue's delivery counters, read (see [`crate::broker::stats::DeliveryTotals::read`]).
    pub(crate) fn delivery_totals(&self) -> [u64; 7] {
        self.totals.read()
    }

    /// Ready messages (what `queue.declare-ok` reports), once expired ones are gone.
    pub(crate) fn message_count(self: &Arc<Self>, owner: &dyn QueueOwner) -> usize {
        self.run(owner, |state, now, fx| {
            state.tick(now, fx);
            state.ready()
        })
    }

    /// What the management API and `/metrics` show of the contents, read under one lock (once
    /// expired messages are gone).
    pub(crate) fn figures(self: &Arc<Self>, owner: &dyn QueueOwner) -> QueueFigures {
        self.run(owner, |state, now, fx| {
            state.tick(now, fx);
            let (expiring, next_expiry_at) = state.expiring();
            let (dead_lettered, dead_lettered_bytes) = self.pending_dead_letters.figures();
            let (paged_out, paged_out_bytes) = state.paged_out();
            QueueFigures {
                paged_out,
                paged_out_bytes,
                dead_lettered,
                dead_lettered_bytes,
                expiring,
                next_expiry_at,
                ready: state.ready(),
                ready_bytes: state.ready_bytes(),
                unacked: state.unacked(),
                unacked_bytes: state.unacked_bytes(),
                retrying: state.retrying(),
                next_retry_at: state.next_retry_at(),
                consumers: state.consumer_count(),
            }
        })
    }

    /// Ready messages the store holds a copy of, and their body bytes (none unless the queue
    /// is in the store). One pass over the ready messages: for the management API, not for
    /// every scrape.
    pub(crate) fn persisted_ready(&self) -> (usize, u64) {
        if self.store_id.get().is_none() {
            return (0, 0);
        }
        let inner = self.inner.lock();
        let (paged, paged_bytes) = inner.state.paged_out();
        inner
            .state
            .ready_entries()
            .filter(|e| e.is_persistent())
            .fold((paged as usize, paged_bytes), |(n, bytes), e| {
                (n + 1, bytes + e.body_len() as u64)
            })
    }

    /// Messages waiting for a delayed retry: (ready again at, the entry), in that order.
    pub(crate) fn retrying(&self) -> Vec<(u64, QueueEntry)> {
        let guard = self.inner.lock();
        guard
            .state
            .retrying_entries()
            .map(|(at, entry)| (at, entry.clone()))
            .collect()
    }

    /// Delivered and not yet settled.
    pub(crate) fn unacked_count(&self) -> usize {
        self.inner.lock().state.unacked()
    }

    /// Consumers attached.
    pub(crate) fn consumer_count(&self) -> usize {
        self.inner.lock().state.consumer_count()
    }

    /// The consumers attached, in delivery priority order (the management API lists them).
    pub(crate) fn consumers(&self) -> Vec<Arc<Consumer>> {
        self.inner
            .lock()
            .state
            .consumer_handles()
            .cloned()
            .collect()
    }

    /// Up to `limit` ready messages from the head, left in place (the test endpoints' peek),
    /// those left in the store read from it.
    pub(crate) fn peek(&self, limit: usize) -> Vec<QueueEntry> {
        let inner = self.inner.lock();
        let mut ready: Vec<QueueEntry> =
            inner.state.ready_entries().map(|e| e.to_entry()).collect();
        if let Some(run) = inner.state.paged_run() {
            ready.extend(
                self.read_run(run, limit)
                    .into_iter()
                    .filter(|e| inner.state.in_paged_run(e.seq)),
            );
        }
        // By position (queue order, except that a priority queue serves higher levels first).
        ready.sort_by_key(|e| e.seq);
        ready.truncate(limit);
        ready
    }

    /// Expiry times of the ready messages that have one, soonest first (at most `limit`).
    pub(crate) fn expiring(&self, limit: usize) -> (usize, Vec<u64>) {
        let inner = self.inner.lock();
        let mut all: Vec<u64> = inner
            .state
            .ready_entries()
            .filter_map(|e| e.expires_at())
            .collect();
        all.sort_unstable();
        let count = all.len();
        all.truncate(limit);
        (count, all)
    }
}
