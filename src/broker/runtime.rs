//! What a vhost and the publish pipeline share with the rest of the broker: the services every
//! queue is given, the one deadline scheduler, server-generated names, the direct reply-to
//! consumers, and what the last restore kept on disk. The delayed exchanges' holder is not
//! here: a vhost reaches it through `vhost::HeldMessages`.

use std::sync::Arc;

use super::delayed::DelayedMessages;
use super::names::NameGenerator;
use super::persist::kept::{Kept, KeptExchange, KeptQueue};
use super::persist::Definitions;
use super::queue::QueueServices;
use super::reply_to::ReplyConsumers;
use super::scheduler::Scheduler;

/// Shared by every vhost of a broker.
pub(crate) struct Runtime {
    /// Given to every queue: clock, store, memory, counters, test hooks, page reader.
    pub(crate) queues: Arc<QueueServices>,
    /// Every deadline: queue ticks, delayed releases, the test double's delayed deliveries.
    pub(crate) scheduler: Arc<Scheduler<DelayedMessages>>,
    /// Server-generated names (queues, consumer tags, reply addresses).
    pub(crate) names: Arc<NameGenerator>,
    /// Direct reply-to consumers by reply address: the publish pipeline delivers replies.
    pub(crate) reply_consumers: Arc<ReplyConsumers>,
    /// Where durable definitions are written (nowhere in memory, nor while restoring).
    pub(crate) definitions: Definitions,
    /// Stored queues the restore kept on disk, for a declare to take back.
    pub(crate) kept_queues: Kept<KeptQueue>,
    /// Exchanges the last restore kept on disk, until a declare takes them back.
    pub(crate) kept_exchanges: Kept<KeptExchange>,
}

impl Runtime {
    pub(crate) fn new(
        queues: Arc<QueueServices>,
        scheduler: Arc<Scheduler<DelayedMessages>>,
        names: Arc<NameGenerator>,
    ) -> Arc<Self> {
        Arc::new(Runtime {
            definitions: Definitions::new(queues.store.clone()),
            queues,
            scheduler,
            reply_consumers: Arc::new(ReplyConsumers::new(Arc::clone(&names))),
            names,
            kept_queues: Kept::default(),
            kept_exchanges: Kept::default(),
        })
    }
}

#[cfg(test)]
impl Runtime {
    /// A runtime on the system clock with no memory limit and no store (unit tests).
    pub(crate) fn standalone() -> Arc<Self> {
        let clock: dwellmq_timer::SharedClock = Arc::new(dwellmq_timer::SystemClock::new());
        let timer = Arc::new(super::timer_thread::TimerControl::default());
        let scheduler = Arc::new(Scheduler::new(clock.now_ms(), timer));
        let queues = QueueServices::new(
            clock,
            super::memory::MemoryMonitor::new(u64::MAX),
            None,
            dwellmq_core::queue::ExpiryMode::OnTime,
            dwellmq_core::paging::Paging::DEFAULT,
            false,
            Arc::default(),
        );
        Self::new(
            Arc::new(queues),
            scheduler,
            Arc::new(NameGenerator::new(None)),
        )
    }
}
