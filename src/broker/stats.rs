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
}

/// The broker's totals since start.
#[derive(Default)]
pub(crate) struct Stats {
    published: AtomicU64,
    unroutable_dropped: AtomicU64,
    unroutable_returned: AtomicU64,
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
        *counts = MessageCounts::default();
    }

    /// The totals now.
    pub(crate) fn totals(&self) -> MessageCounts {
        MessageCounts {
            published: self.published.load(Ordering::Relaxed),
            unroutable_dropped: self.unroutable_dropped.load(Ordering::Relaxed),
            unroutable_returned: self.unroutable_returned.load(Ordering::Relaxed),
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
            unroutable_returned: 0,
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
                unroutable_returned: 0
            }
        );
    }
}
