//! Memory accounting for the high watermark that blocks publishers.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

/// Bytes of message bodies the broker holds, and whether publishers are blocked.
pub(crate) struct MemoryMonitor {
    used: AtomicI64,
    high_watermark: i64,
    blocked: watch::Sender<bool>,
}

impl MemoryMonitor {
    pub(crate) fn new(high_watermark: u64) -> Arc<Self> {
        Arc::new(MemoryMonitor {
            used: AtomicI64::new(0),
            high_watermark: i64::try_from(high_watermark).unwrap_or(i64::MAX),
            blocked: watch::channel(false).0,
        })
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
        if used <= self.high_watermark && *self.blocked.borrow() {
            tracing::info!(used, "memory alarm cleared: unblocking publishers");
            self.blocked.send_replace(false);
        }
    }

    /// Bytes currently held.
    pub(crate) fn used(&self) -> i64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Watches the alarm: `true` while publishers must be blocked.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.blocked.subscribe()
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
