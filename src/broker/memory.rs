//! Memory accounting for the high watermark that blocks publishers.
//!
//! What is counted is what messages hold, where that is cheap to know exactly or to estimate
//! well: each body, plus [`MESSAGE_MEMORY_OVERHEAD`] per message as published (passing
//! through, unacknowledged), what a packed one holds while it waits in a queue
//! ([`queued_message_footprint`], charged by the queue in bulk) or is held by a delayed
//! exchange, and output buffered for a client until its socket takes it
//! (bounded per connection besides). Not counted: connections, channels, queues and exchanges
//! themselves.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// The memory a message is counted to hold beyond its body while it is as published: passing
/// through, unacknowledged, or waiting in a queue unpacked (a large body, `BCC` keys): the
/// message itself (names and decoded properties inline), its shared pointer's counts, one
/// queue entry, and an allowance for the rest: its encoded properties (32), its boxed charge
/// (16), allocator rounding (the message's 592 octets take 640) and its share of the read
/// buffer its slices keep alive (the ~76 octets its publish took on the wire). 832 octets; 836
/// beyond the body were measured per waiting 16-octet message before queues packed them
/// (`dwellmq-load fill`, 1,000,000 persistent messages, in memory). Headers beyond the
/// allowance are not counted. A small message that waits in a queue is packed and counted by
/// [`queued_message_footprint`] instead.
pub const MESSAGE_MEMORY_OVERHEAD: usize = std::mem::size_of::<dwellmq_core::Message>()
    + 2 * std::mem::size_of::<usize>()
    + std::mem::size_of::<dwellmq_core::QueueEntry>()
    + 192;

/// Octets a message is counted to hold while it waits packed in a queue's ready list (a body
/// up to [`dwellmq_core::PACK_BODY_LIMIT`]): its packed buffer (names, encoded properties and
/// body) and its place in the list. The queue charges these in bulk; the message is charged
/// [`MESSAGE_MEMORY_OVERHEAD`] again from its delivery. 96 octets for a 16-octet persistent
/// message routed by a 12-octet key, as measured (see docs/design-notes.md, Memory).
pub fn queued_message_footprint(
    exchange: &str,
    routing_key: &str,
    properties: &dwellmq_codec::BasicProperties,
    body_len: usize,
) -> usize {
    let mut encoded = bytes::BytesMut::new();
    properties.encode(&mut encoded);
    let packed_len = 2 + exchange.len() + 2 + routing_key.len() + 4 + encoded.len() + body_len;
    dwellmq_core::packed_footprint(packed_len) as usize
}

/// The same for a small message held by a delayed exchange, which keeps it packed (names,
/// encoded properties and body in one buffer): the packed header, its place in the scheduler
/// and its exchange's index, and allocator rounding. Measured: about 175 octets of RSS per
/// held message with a small body (see docs/design-notes.md, Memory).
pub const HELD_MESSAGE_MEMORY_OVERHEAD: usize = 160;

// A held message grows into a queued one at release, never shrinks.
const _: () = assert!(MESSAGE_MEMORY_OVERHEAD >= HELD_MESSAGE_MEMORY_OVERHEAD);

/// Octets a message with a body of `body_len` octets is counted to hold while queued.
pub(crate) const fn message_footprint(body_len: usize) -> usize {
    body_len.saturating_add(MESSAGE_MEMORY_OVERHEAD)
}

/// Octets a packed message held by a delayed exchange is counted to hold.
pub(crate) const fn held_footprint(body_len: usize) -> usize {
    body_len.saturating_add(HELD_MESSAGE_MEMORY_OVERHEAD)
}

/// Octets counted as held for messages, and whether publishers are blocked.
pub(crate) struct MemoryMonitor {
    used: AtomicI64,
    high_watermark: i64,
    /// Above this, queues page to disk what lies beyond their window (transient messages
    /// included): memory pressure, before the alarm.
    paging_threshold: i64,
    blocked: watch::Sender<bool>,
}

impl MemoryMonitor {
    /// A monitor whose alarm goes off above `high_watermark` octets; a watermark of 0 keeps
    /// it on for good (RabbitMQ's way to stop all publishing).
    #[cfg(test)]
    pub(crate) fn new(high_watermark: u64) -> Arc<Self> {
        Self::with_paging_ratio(high_watermark, 0.5)
    }

    /// As [`MemoryMonitor::new`], with memory pressure from `paging_ratio` of the watermark.
    pub(crate) fn with_paging_ratio(high_watermark: u64, paging_ratio: f64) -> Arc<Self> {
        let threshold = (high_watermark as f64 * paging_ratio.max(0.0)) as u64;
        Arc::new(MemoryMonitor {
            used: AtomicI64::new(0),
            paging_threshold: i64::try_from(threshold).unwrap_or(i64::MAX),
            high_watermark: i64::try_from(high_watermark).unwrap_or(i64::MAX),
            blocked: watch::channel(high_watermark == 0).0,
        })
    }

    /// Whether memory is under pressure: more counted than the paging threshold.
    pub(crate) fn pressed(&self) -> bool {
        self.used.load(Ordering::Relaxed) > self.paging_threshold
    }

    /// Whether more is counted than the watermark (the alarm is, or is about to be, on).
    pub(crate) fn over_watermark(&self) -> bool {
        self.high_watermark > 0 && self.used.load(Ordering::Relaxed) > self.high_watermark
    }

    /// Charges one message with a body of `body_len` octets (see [`message_footprint`]); the
    /// returned guard gives it back when dropped.
    pub(crate) fn charge_message(self: &Arc<Self>, body_len: usize) -> MemoryCharge {
        self.charge(message_footprint(body_len))
    }

    /// Charges `bytes`; the returned guard gives them back when dropped.
    pub(crate) fn charge(self: &Arc<Self>, bytes: usize) -> MemoryCharge {
        self.charge_bytes(bytes);
        MemoryCharge {
            monitor: Arc::clone(self),
            bytes: bytes as i64,
        }
    }

    /// Charges `bytes` without a guard: for holders that account in bulk (one guard per held
    /// message would cost more than some messages) and call [`MemoryMonitor::release_bytes`].
    pub(crate) fn charge_bytes(&self, bytes: usize) {
        let bytes = bytes as i64;
        let used = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if used > self.high_watermark && !*self.blocked.borrow() {
            tracing::warn!(
                used,
                high_watermark = self.high_watermark,
                "memory alarm set: blocking publishers"
            );
            self.blocked.send_replace(true);
        }
    }

    /// Turns bytes already charged with [`MemoryMonitor::charge_bytes`] into a guard that gives
    /// them back when dropped (a held message's share of a bulk charge, handed to the message).
    pub(crate) fn adopt(self: &Arc<Self>, bytes: usize) -> MemoryCharge {
        MemoryCharge {
            monitor: Arc::clone(self),
            bytes: bytes as i64,
        }
    }

    /// Gives back bytes charged with [`MemoryMonitor::charge_bytes`].
    pub(crate) fn release_bytes(&self, bytes: usize) {
        self.release(bytes as i64);
    }

    fn release(&self, bytes: i64) {
        let used = self.used.fetch_sub(bytes, Ordering::Relaxed) - bytes;
        if used <= self.high_watermark && self.high_watermark > 0 && *self.blocked.borrow() {
            tracing::info!(used, "memory alarm cleared: unblocking publishers");
            self.blocked.send_replace(false);
        }
    }

    /// Octets currently counted as held.
    pub(crate) fn used(&self) -> i64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Above this, publishers are blocked.
    pub(crate) fn high_watermark(&self) -> u64 {
        self.high_watermark.max(0) as u64
    }

    /// Watches the alarm: `true` while publishers must be blocked.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.blocked.subscribe()
    }
}

/// Memory charged in bulk for what one holder keeps without a charge of its own (a queue's
/// packed ready messages), brought up to date after each change; given back when dropped.
pub(crate) struct BulkCharge {
    monitor: Arc<MemoryMonitor>,
    bytes: u64,
}

impl BulkCharge {
    /// Nothing charged yet.
    pub(crate) fn new(monitor: Arc<MemoryMonitor>) -> Self {
        BulkCharge { monitor, bytes: 0 }
    }

    /// Charges or gives back the difference, so that `bytes` are charged.
    pub(crate) fn set(&mut self, bytes: u64) {
        match bytes.cmp(&self.bytes) {
            std::cmp::Ordering::Greater => self.monitor.charge_bytes((bytes - self.bytes) as usize),
            std::cmp::Ordering::Less => self.monitor.release_bytes((self.bytes - bytes) as usize),
            std::cmp::Ordering::Equal => return,
        }
        self.bytes = bytes;
    }
}

impl Drop for BulkCharge {
    fn drop(&mut self) {
        self.set(0);
    }
}

/// Memory held on behalf of one message; released on drop.
pub(crate) struct MemoryCharge {
    monitor: Arc<MemoryMonitor>,
    bytes: i64,
}

impl Drop for MemoryCharge {
    fn drop(&mut self) {
        self.monitor.release(self.bytes);
    }
}

impl std::fmt::Debug for MemoryCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryCharge({})", self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alarm_goes_off_above_the_watermark_and_clears_at_it() {
        let monitor = MemoryMonitor::new(2 * message_footprint(10) as u64);
        let alarm = monitor.subscribe();
        let a = monitor.charge_message(10);
        let b = monitor.charge_message(10);
        assert!(!*alarm.borrow(), "at the watermark, not above it");
        let c = monitor.charge_message(0);
        assert!(*alarm.borrow());
        drop(a);
        assert!(!*alarm.borrow());
        drop((b, c));
        assert_eq!(monitor.used(), 0);
    }

    // What the charges are against what messages hold on the heap is measured by
    // tests/queues/memory_charges.rs (a counting allocator, in a process of its own).

    #[test]
    fn a_zero_watermark_keeps_the_alarm_on() {
        let monitor = MemoryMonitor::new(0);
        assert!(*monitor.subscribe().borrow());
        drop(monitor.charge_message(1));
        assert!(*monitor.subscribe().borrow());
    }
}
