//! Broker-wide message counters, for `/metrics` and the management overview.
//!
//! Connections count in a plain struct of their own and add it here once per batch of frames:
//! a shared atomic touched by every publish on every core would cost more than the routing.

use std::sync::atomic::{AtomicU64, Ordering};

use dwellmq_core::arguments::QueueType;
use dwellmq_core::queue::DeathReason;

/// Upper bounds (bytes) of RabbitMQ 4's `rabbitmq_message_size_bytes` buckets; a ninth bucket
/// takes everything larger.
pub(crate) const MESSAGE_SIZE_BOUNDS: [u64; 8] = [
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
];

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
    /// Published on a channel in confirm mode.
    pub(crate) received_confirm: u64,
    /// Received message bodies by size: one count per bucket (not cumulative), the last for
    /// sizes past every bound.
    pub(crate) size_buckets: [u64; 9],
    /// Body bytes received.
    pub(crate) size_sum: u64,
    pub(crate) channels_opened: u64,
    pub(crate) channels_closed: u64,
    /// Channels that published for the first time, and publishing channels that closed
    /// (their difference is RabbitMQ's `publishers` gauge).
    pub(crate) publishers_started: u64,
    pub(crate) publishers_stopped: u64,
}

impl MessageCounts {
    /// A message received from a publisher (`confirm`: on a confirm-mode channel;
    /// `first_on_channel`: the channel had published nothing before).
    pub(crate) fn received(&mut self, confirm: bool, body_len: usize, first_on_channel: bool) {
        self.published += 1;
        self.received_confirm += u64::from(confirm);
        let size = body_len as u64;
        let bucket = MESSAGE_SIZE_BOUNDS
            .iter()
            .position(|bound| size <= *bound)
            .unwrap_or(MESSAGE_SIZE_BOUNDS.len());
        self.size_buckets[bucket] += 1;
        self.size_sum += size;
        self.publishers_started += u64::from(first_on_channel);
    }

    /// A channel closed (`published`: it had published, so it stops being a publisher).
    pub(crate) fn channel_closed(&mut self, published: bool) {
        self.channels_closed += 1;
        self.publishers_stopped += u64::from(published);
    }
}

/// Messages that left queues without being consumed, by reason.
#[derive(Debug, Default)]
pub(crate) struct DeathCounters {
    dead_lettered: [AtomicU64; 4],
    dropped: [AtomicU64; 4],
}

fn death_index(reason: DeathReason) -> usize {
    match reason {
        DeathReason::Rejected => 0,
        DeathReason::Expired => 1,
        DeathReason::Maxlen => 2,
        DeathReason::DeliveryLimit => 3,
    }
}

impl DeathCounters {
    pub(crate) fn dead_lettered(&self, reason: DeathReason) {
        self.dead_lettered[death_index(reason)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self, reason: DeathReason) {
        self.dropped[death_index(reason)].fetch_add(1, Ordering::Relaxed);
    }

    /// Back to zero (a reset between tests).
    pub(crate) fn clear(&self) {
        for counter in self.dead_lettered.iter().chain(&self.dropped) {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// (dead-lettered, dropped) for `reason` since start.
    pub(crate) fn get(&self, reason: DeathReason) -> (u64, u64) {
        let i = death_index(reason);
        (
            self.dead_lettered[i].load(Ordering::Relaxed),
            self.dropped[i].load(Ordering::Relaxed),
        )
    }
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
    received_confirm: AtomicU64,
    size_buckets: [AtomicU64; 9],
    size_sum: AtomicU64,
    channels_opened: AtomicU64,
    channels_closed: AtomicU64,
    publishers_started: AtomicU64,
    publishers_stopped: AtomicU64,
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
        add(&self.received_confirm, counts.received_confirm);
        for (total, n) in self.size_buckets.iter().zip(counts.size_buckets) {
            add(total, n);
        }
        add(&self.size_sum, counts.size_sum);
        add(&self.channels_opened, counts.channels_opened);
        add(&self.channels_closed, counts.channels_closed);
        add(&self.publishers_started, counts.publishers_started);
        add(&self.publishers_stopped, counts.publishers_stopped);
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
            received_confirm: self.received_confirm.load(Ordering::Relaxed),
            size_buckets: std::array::from_fn(|i| self.size_buckets[i].load(Ordering::Relaxed)),
            size_sum: self.size_sum.load(Ordering::Relaxed),
            channels_opened: self.channels_opened.load(Ordering::Relaxed),
            channels_closed: self.channels_closed.load(Ordering::Relaxed),
            publishers_started: self.publishers_started.load(Ordering::Relaxed),
            publishers_stopped: self.publishers_stopped.load(Ordering::Relaxed),
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
            &self.received_confirm,
            &self.size_sum,
            &self.channels_opened,
            &self.channels_closed,
            &self.publishers_started,
            &self.publishers_stopped,
        ]
        .into_iter()
        .chain(&self.size_buckets)
        {
            total.store(0, Ordering::Relaxed);
        }
    }
}

/// What queues count as messages leave them, per queue type, as RabbitMQ's global counters
/// (`rabbitmq_global_messages_delivered_*`, `_get_empty`, `_redelivered`, `_acknowledged`)
/// and its queue churn. Each queue counts in its own [`DeliveryTotals`] (shared atomics
/// written by every queue's thread cost 15% of the 4-to-4 throughput); this holds what deleted
/// queues had counted, and a scrape adds the live queues' counts to it.
#[derive(Debug, Default)]
pub(crate) struct QueueTotals {
    pub(crate) declared: AtomicU64,
    pub(crate) created: AtomicU64,
    pub(crate) deleted: AtomicU64,
    by_type: [DeliveryTotals; 2],
}

/// One queue type's delivery counters.
#[derive(Debug, Default)]
pub(crate) struct DeliveryTotals {
    pub(crate) consume_manual_ack: AtomicU64,
    pub(crate) consume_auto_ack: AtomicU64,
    pub(crate) get_manual_ack: AtomicU64,
    pub(crate) get_auto_ack: AtomicU64,
    pub(crate) get_empty: AtomicU64,
    pub(crate) redelivered: AtomicU64,
    pub(crate) acknowledged: AtomicU64,
}

impl DeliveryTotals {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// `delivered` messages went to consumers, `auto_ack` of them to no-ack consumers.
    pub(crate) fn delivered(&self, delivered: u64, auto_ack: u64) {
        Self::add(&self.consume_auto_ack, auto_ack);
        Self::add(&self.consume_manual_ack, delivered - auto_ack);
    }

    /// A `basic.get` answered with `got` (`None`: get-empty).
    pub(crate) fn got(&self, got: Option<&dwellmq_core::QueueEntry>, no_ack: bool) {
        let counter = match (got, no_ack) {
            (None, _) => &self.get_empty,
            (Some(_), true) => &self.get_auto_ack,
            (Some(_), false) => &self.get_manual_ack,
        };
        Self::add(counter, 1);
        if got.is_some_and(|entry| entry.redelivered) {
            Self::add(&self.redelivered, 1);
        }
    }

    /// Adds `other`'s counts to these (a deleted queue's, kept in the broker's totals).
    pub(crate) fn absorb(&self, other: &DeliveryTotals) {
        let counters = [
            (&self.consume_manual_ack, &other.consume_manual_ack),
            (&self.consume_auto_ack, &other.consume_auto_ack),
            (&self.get_manual_ack, &other.get_manual_ack),
            (&self.get_auto_ack, &other.get_auto_ack),
            (&self.get_empty, &other.get_empty),
            (&self.redelivered, &other.redelivered),
            (&self.acknowledged, &other.acknowledged),
        ];
        for (mine, theirs) in counters {
            Self::add(mine, theirs.load(Ordering::Relaxed));
        }
    }

    /// (consume manual, consume auto, get manual, get auto, get empty, redelivered, acked).
    pub(crate) fn read(&self) -> [u64; 7] {
        [
            &self.consume_manual_ack,
            &self.consume_auto_ack,
            &self.get_manual_ack,
            &self.get_auto_ack,
            &self.get_empty,
            &self.redelivered,
            &self.acknowledged,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }

    fn clear(&self) {
        for counter in [
            &self.consume_manual_ack,
            &self.consume_auto_ack,
            &self.get_manual_ack,
            &self.get_auto_ack,
            &self.get_empty,
            &self.redelivered,
            &self.acknowledged,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }
}

impl QueueTotals {
    /// The delivery counters of queues of type `queue_type`.
    pub(crate) fn of(&self, queue_type: QueueType) -> &DeliveryTotals {
        match queue_type {
            QueueType::Classic => &self.by_type[0],
            QueueType::Quorum => &self.by_type[1],
        }
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Back to zero (a reset between tests).
    pub(crate) fn clear(&self) {
        for counter in [&self.declared, &self.created, &self.deleted] {
            counter.store(0, Ordering::Relaxed);
        }
        self.by_type.iter().for_each(DeliveryTotals::clear);
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

    #[test]
    fn received_messages_fall_in_rabbitmqs_size_buckets() {
        let mut counts = MessageCounts::default();
        for (size, first) in [(0, true), (100, false), (101, false), (200_000_000, false)] {
            counts.received(size == 101, size, first);
        }
        assert_eq!(counts.published, 4);
        assert_eq!(counts.received_confirm, 1);
        assert_eq!(counts.size_buckets, [2, 1, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(counts.size_sum, 200_000_201);
        assert_eq!(counts.publishers_started, 1);
        counts.channel_closed(true);
        assert_eq!((counts.channels_closed, counts.publishers_stopped), (1, 1));
    }
}
