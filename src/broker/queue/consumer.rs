//! A consumer as the broker sees it, and the seam to the server that writes its deliveries.
//!
//! Queues hand deliveries to a [`DeliverySink`]; the server's channels implement it (frames,
//! delivery tags, the unacked ledger). So nothing under `broker/` knows about sockets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::queue::ConsumerCredit;
use dwellmq_core::{Message, QueueEntry};

use super::{ConnectionId, Queue};

/// Where a channel's deliveries go.
pub(crate) trait DeliverySink: Send + Sync {
    /// Writes `entry` to `consumer`, tracking it for ack unless the consumer is no-ack. Hands the
    /// entry back if the channel has closed meanwhile. Called with the queue's lock held, so
    /// that a consumer sees its queue's order.
    fn deliver(
        &self,
        queue: &Arc<Queue>,
        consumer: &Arc<Consumer>,
        entry: QueueEntry,
    ) -> Result<(), QueueEntry>;

    /// Delivers a direct reply-to message to the channel's reply consumer `tag` (no-ack).
    /// False once the channel is closed.
    fn deliver_reply(&self, tag: &ShortStr, message: &Message) -> bool;

    /// Tells the client that the server cancelled consumer `tag` (`basic.cancel`).
    fn cancelled(&self, tag: &ShortStr);
}

/// A consumer: one `basic.consume` on one queue.
pub(crate) struct Consumer {
    /// Unique in the broker.
    pub(crate) id: u64,
    pub(crate) tag: ShortStr,
    /// The connection and channel it consumes on (the management API shows them).
    pub(crate) connection: ConnectionId,
    pub(crate) channel: u16,
    /// `exclusive` and `x-priority` as subscribed (shown by the management API).
    pub(crate) exclusive: bool,
    pub(crate) priority: i64,
    pub(crate) credit: Arc<ConsumerCredit>,
    pub(crate) sink: Arc<dyn DeliverySink>,
    /// The client understands a server-sent `basic.cancel` (capability `consumer_cancel_notify`).
    pub(crate) cancel_notify: bool,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("id", &self.id)
            .field("tag", &self.tag)
            .finish()
    }
}

/// A broker-wide unique consumer id.
pub(crate) fn next_consumer_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Tells consumers of a deleted queue that they are gone (`basic.cancel` from the server).
pub(crate) fn notify_cancelled(consumers: &[Arc<Consumer>]) {
    for consumer in consumers {
        if consumer.cancel_notify {
            consumer.sink.cancelled(&consumer.tag);
        }
    }
}
