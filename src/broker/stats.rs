//! Broker-wide message counters, for `/metrics` and the management overview.
//!
//! Connections count in a plain struct of their own and add it here once per batch of frames:
//! a shared atomic touched by every publish on every core would cost more than the routing.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counts gathered by one connection since its last flush.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MessageCounts {
    /// Messages published (`basic.publish` complete, or a publish over HTTP).
    pub(crate) published: u64,
    /// Published messages no queue took, dropped (not mandatory).
    pub(crate) unroutable_dropped: u64,
    /// Published messages no queue took, returned to a mandatory publisher.
    pub(crate) unroutable_returned: u64,
    /// Published messages that found a queue or a delayed exchange.
    pub(crate) routed: u64,
    /// Publishes confirmed with `basic.ack`.
    pub(crate) confirmed: u64,
    /// Publishes answered with `basic.nack`.
    pub(crate) nacked: u64,
}

/// The broker's totals since start.
#[derive(Default)]
pub(crate) struct Stats {
    published: AtomicU64,
    unroutable_dropped: AtomicU64,
    unroutable_returned: AtomicU64,
    routed: AtomicU64,
    confirmed: AtomicU64,
    nacked: AtomicU64,
}

impl Stats {
    /// Adds `counts` to the totals and resets them.
    pub(crate) fn flush(&self, counts: &mut MessageCounts) {
        if *counts == MessageCounts::default() {
            return;
        }
        let add = |total: &AtomicU64, n: u64| {
            if n > 0 {
                total.fetch_add(n, Ordering::Relaxed);
            }
        };
        add(&self.published, counts.published);
        add(&self.unroutable_dropped, counts.unroutable_dropped);
        add(&self.unroutable_returned, counts.unroutable_returned);
        add(&self.routed, counts.routed);
        add(&self.confirmed, counts.confirmed);
        add(&self.nacked, counts.nacked);
        *counts = MessageCounts::default();
    }

    /// The totals now.
    pub(crate) fn totals(&self) -> MessageCounts {
        MessageCounts {
            published: self.published.load(Ordering::Relaxed),
            unroutable_dropped: self.unroutable_dropped.load(Ordering::Relaxed),
            unroutable_returned: self.unroutable_returned.load(Ordering::Relaxed),
            routed: self.routed.load(Ordering::Relaxed),
            confirmed: self.confirmed.load(Ordering::Relaxed),
            nacked: self.nacked.load(Ordering::Relaxed),
        }
    }

    /// Back to zero (a reset between tests).
    pub(crate) fn clear(&self) {
        for total in [
            &self.published,
            &self.unroutable_dropped,
            &self.unroutable_returned,
            &self.routed,
            &self.confirmed,
            &self.nacked,
        ] {
            total.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushing_adds_and_resets() {
        let stats = Stats::default();
        let mut counts = MessageCounts {
            published: 3,
            unroutable_dropped: 1,
            ..MessageCounts::default()
        };
        stats.flush(&mut counts);
        assert_eq!(counts, MessageCounts::default());
        counts.published = 2;
        stats.flush(&mut counts);
        assert_eq!(
            stats.totals(),
            MessageCounts {
                published: 5,
                unroutable_dropped: 1,
                ..MessageCounts::default()
            }
        );
    }
}
