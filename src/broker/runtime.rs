//! What every queue needs from its broker: the clock, the one deadline scheduler and the
//! delayed exchanges' holder (a dead-letter exchange may be a delayed one), memory accounting
//! and counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dwellmq_core::queue::{DeathReason, ExpiryMode};
use dwellmq_store::Store;
use dwellmq_timer::SharedClock;

use super::delayed::DelayedMessages;
use super::memory::MemoryMonitor;
use super::names::NameGenerator;
use super::scheduler::Scheduler;
use super::timer_thread::TimerControl;

/// Messages that left queues without being consumed, by reason.
#[derive(Debug, Default)]
pub(crate) struct DeathCounters {
    dead_lettered: [AtomicU64; 4],
    dropped: [AtomicU64; 4],
}

fn index(reason: DeathReason) -> usize {
    match reason {
        DeathReason::Rejected => 0,
        DeathReason::Expired => 1,
        DeathReason::Maxlen => 2,
        DeathReason::DeliveryLimit => 3,
    }
}

impl DeathCounters {
    pub(crate) fn dead_lettered(&self, reason: DeathReason) {
        self.dead_lettered[index(reason)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self, reason: DeathReason) {
        self.dropped[index(reason)].fetch_add(1, Ordering::Relaxed);
    }

    /// Back to zero (a reset between tests).
    pub(crate) fn clear(&self) {
        for counter in self.dead_lettered.iter().chain(&self.dropped) {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// (dead-lettered, dropped) for `reason` since start.
    pub(crate) fn get(&self, reason: DeathReason) -> (u64, u64) {
        let i = index(reason);
        (
            self.dead_lettered[i].load(Ordering::Relaxed),
            self.dropped[i].load(Ordering::Relaxed),
        )
    }
}

/// Shared by the broker and every queue.
pub(crate) struct Runtime {
    pub(crate) clock: SharedClock,
    pub(crate) memory: Arc<MemoryMonitor>,
    /// Every deadline: queue ticks, delayed releases, the test double's delayed deliveries.
    pub(crate) scheduler: Arc<Scheduler<DelayedMessages>>,
    /// Messages held by delayed exchanges (a client of `scheduler`).
    pub(crate) delayed: Arc<DelayedMessages>,
    pub(crate) timer: Arc<TimerControl>,
    pub(crate) expiry_mode: ExpiryMode,
    pub(crate) deaths: DeathCounters,
    /// Deliveries, gets and acks by queue type, and queue churn (for `/metrics`).
    pub(crate) queue_totals: super::stats::QueueTotals,
    /// Server-generated names (queues, consumer tags, reply addresses).
    pub(crate) names: Arc<NameGenerator>,
    /// The durable store (`--data-dir`), or `None` in memory: durable definitions and
    /// persistent messages on durable queues go there (`super::persist`).
    pub(crate) store: Option<Arc<Store>>,
    /// Set while the broker restores what the store holds at start: nothing is written back.
    pub(crate) restoring: std::sync::atomic::AtomicBool,
    /// Faults a test injects, and counters for the test endpoints.
    pub(crate) hooks: super::test_hooks::TestHooks,
    /// Direct reply-to consumers by reply address: the publish pipeline delivers replies.
    pub(crate) reply_consumers: Arc<super::reply_to::ReplyConsumers>,
    /// Stored queues the restore kept on disk, for a declare to take back.
    pub(crate) kept_queues: super::persist::kept::KeptQueues,
    /// Exchanges the last restore kept on disk, until a declare takes them back.
    pub(crate) kept_exchanges: super::persist::kept_exchanges::KeptExchanges,
    /// How much of a paging queue stays in memory (`Limits::queue_window_*`).
    pub(crate) paging: dwellmq_core::paging::Paging,
    /// Reads paging queues' pages off their locks.
    pub(crate) page_reader: super::queue::page_reader::PageReader,
    /// The clock moves only when told (the test double): a read of a queue's run that a
    /// deadline asks for is done at once, so that advancing the clock plays out its expiry
    /// before it returns.
    pub(crate) manual_clock: bool,
    /// The last spill id given to a paging queue (names its spilled records; per process,
    /// as the spill table is dropped at start).
    spill_ids: std::sync::atomic::AtomicU64,
}

impl Runtime {
    pub(crate) fn new(
        clock: SharedClock,
        memory: Arc<MemoryMonitor>,
        expiry_mode: ExpiryMode,
        name_seed: Option<u64>,
        store: Option<Arc<Store>>,
        paging: dwellmq_core::paging::Paging,
        manual_clock: bool,
    ) -> Arc<Self> {
        let now = clock.now_ms();
        let names = Arc::new(NameGenerator::new(name_seed));
        let timer = Arc::new(TimerControl::default());
        let scheduler = Arc::new(Scheduler::new(now, Arc::clone(&timer)));
        let delayed = DelayedMessages::with_scheduler(Arc::clone(&scheduler), Arc::clone(&memory));
        if let Some(store) = &store {
            delayed.set_store(Arc::clone(store));
        }
        Arc::new(Runtime {
            scheduler,
            delayed,
            clock,
            memory,
            timer,
            expiry_mode,
            deaths: DeathCounters::default(),
            queue_totals: Default::default(),
            store,
            restoring: std::sync::atomic::AtomicBool::new(false),
            hooks: Default::default(),
            kept_queues: Default::default(),
            kept_exchanges: Default::default(),
            paging,
            page_reader: Default::default(),
            manual_clock,
            spill_ids: Default::default(),
            reply_consumers: Arc::new(super::reply_to::ReplyConsumers::new(Arc::clone(&names))),
            names,
        })
    }

    /// A runtime on the system clock with no memory limit (unit tests of the broker layer).
    #[cfg(test)]
    pub(crate) fn standalone() -> Arc<Self> {
        Self::new(
            Arc::new(dwellmq_timer::SystemClock::new()),
            MemoryMonitor::new(u64::MAX),
            ExpiryMode::OnTime,
            None,
            None,
            dwellmq_core::paging::Paging::DEFAULT,
            false,
        )
    }

    /// A new spill id (see `Queue::spill_id`).
    pub(crate) fn next_spill_id(&self) -> u64 {
        self.spill_ids
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// The earliest moment the timer must act: a delayed release or move-in, or a queue tick.
    pub(crate) fn next_wake(&self) -> Option<u64> {
        self.delayed.next_wake()
    }
}
