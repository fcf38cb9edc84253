//! What a queue may touch beyond itself, handed to it at declare: the clock, the store, memory
//! accounting, the broker's counters, the test hooks and the page reader. Not its owner: a
//! queue reaches its vhost only through the [`super::QueueOwner`] an operation is given.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dwellmq_core::paging::Paging;
use dwellmq_core::queue::ExpiryMode;
use dwellmq_store::Store;
use dwellmq_timer::SharedClock;

use super::page_reader::PageReader;
use crate::broker::memory::MemoryMonitor;
use crate::broker::stats::{DeathCounters, QueueTotals};
use crate::broker::test_hooks::TestHooks;

/// Shared by every queue of a broker.
pub(crate) struct QueueServices {
    pub(crate) clock: SharedClock,
    pub(crate) memory: Arc<MemoryMonitor>,
    /// The durable store (`--data-dir`), or `None` in memory: persistent messages on durable
    /// queues go there, and paging queues leave what lies beyond their window there.
    pub(crate) store: Option<Arc<Store>>,
    /// Per-message TTL on time or at the head only (`BrokerConfig::expiry_mode`).
    pub(crate) expiry_mode: ExpiryMode,
    /// How much of a paging queue stays in memory (`Limits::queue_window_*`).
    pub(crate) paging: Paging,
    /// The clock moves only when told (the test double): a read of a queue's run that a
    /// deadline asks for is done at once, so that advancing the clock plays out its expiry
    /// before it returns.
    pub(crate) manual_clock: bool,
    /// Reads paging queues' pages off their locks.
    pub(crate) page_reader: PageReader,
    /// Messages that left queues unconsumed, by reason.
    pub(crate) deaths: DeathCounters,
    /// Deliveries, gets and acks by queue type, and queue churn (for `/metrics`).
    pub(crate) queue_totals: QueueTotals,
    /// Faults a test injects, pause points, and counters for the test endpoints.
    pub(crate) hooks: Arc<TestHooks>,
    /// The last spill id given to a paging queue (names its spilled records; per process,
    /// as the spill table is dropped at start).
    spill_ids: AtomicU64,
}

impl QueueServices {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        clock: SharedClock,
        memory: Arc<MemoryMonitor>,
        store: Option<Arc<Store>>,
        expiry_mode: ExpiryMode,
        paging: Paging,
        manual_clock: bool,
        hooks: Arc<TestHooks>,
    ) -> Self {
        QueueServices {
            clock,
            memory,
            store,
            expiry_mode,
            paging,
            manual_clock,
            page_reader: PageReader::default(),
            deaths: DeathCounters::default(),
            queue_totals: QueueTotals::default(),
            hooks,
            spill_ids: AtomicU64::new(0),
        }
    }

    /// A new spill id (see `Queue::spill_id`).
    pub(crate) fn next_spill_id(&self) -> u64 {
        self.spill_ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// How many spill ids were given out (they run from 1 to this).
    pub(crate) fn spill_ids_issued(&self) -> u64 {
        self.spill_ids.load(Ordering::Relaxed)
    }
}
