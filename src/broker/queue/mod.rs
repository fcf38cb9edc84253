//! A queue in a vhost: its declaration, and core's queue state machine behind a lock.
//!
//! Every operation runs one command on [`QueueState`] with the current time (`run.rs`) and
//! carries out its effects (`apply.rs`): deliveries and store writes while the lock is still
//! held (so each consumer sees queue order, and the store a message's persist before its
//! removal), memory charges after each command. What lies beyond the queue (dead letters,
//! deadlines, `x-expires`) it hands to its [`QueueOwner`] once the lock is released
//! (`owner.rs`). The operations themselves are in `commands.rs`, paging reads in `paging.rs`,
//! what the API shows in `inspect.rs`, at-least-once dead letters in `kept_dead_letters.rs`.

use std::sync::{Arc, OnceLock};

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::arguments::{QueueArguments, QueueType};
use dwellmq_core::policy::PolicyDefinition;
use dwellmq_core::queue::{Effects, QueueSettings, QueueState, StoreProgress};
use dwellmq_core::{BrokerError, BrokerResult};
use parking_lot::Mutex;

use super::memory::BulkCharge;
use super::rates::QueueCounters;
use super::stats::DeliveryTotals;
use consumer::Consumer;
use kept_dead_letters::PendingDeadLetters;
pub(crate) use services::QueueServices;

mod apply;
mod commands;
pub(crate) mod consumer;
mod deadline;
mod inspect;
pub(crate) mod kept_dead_letters;
mod owner;
pub(crate) mod page_reader;
mod paging;
mod run;
mod services;
mod store_writes;
mod stored;

pub(crate) use inspect::QueueFigures;
pub(crate) use owner::{Aftermath, Died, QueueOwner};

/// Who owns an exclusive queue: the id of the connection that declared it.
pub(crate) type ConnectionId = u64;

struct Inner {
    state: QueueState<Arc<Consumer>>,
    /// Reused by every command.
    effects: Effects<Arc<Consumer>>,
    /// The packed ready messages' memory (`QueueState::packed_footprint`).
    packed: BulkCharge,
}

/// A queue in a vhost.
pub(crate) struct Queue {
    pub(crate) name: ShortStr,
    pub(crate) vhost: ShortStr,
    pub(crate) durable: bool,
    pub(crate) exclusive_owner: Option<ConnectionId>,
    pub(crate) auto_delete: bool,
    /// Arguments as declared (for equivalence checks on redeclare).
    pub(crate) arguments: FieldTable,
    pub(crate) config: QueueArguments,
    /// What it may touch beyond itself (clock, store, memory, counters, hooks).
    services: Arc<QueueServices>,
    /// The queue's id in the durable store: set for a durable, non-exclusive queue when the
    /// broker has a store; its persistent messages are stored under it.
    pub(crate) store_id: OnceLock<u64>,
    inner: Mutex<Inner>,
    /// Message counters for the management API's rates.
    pub(crate) counters: QueueCounters,
    /// Counters for the broker's global message totals (added to the services' at deletion).
    totals: DeliveryTotals,
    /// Dead-lettered messages not every target took yet (at-least-once dead-lettering).
    pending_dead_letters: PendingDeadLetters,
    /// Which of its store writes are committed, for a queue that pages (`None` otherwise).
    progress: Option<Arc<StoreProgress>>,
    /// Names its spilled records in the store (a queue that pages; 0 otherwise).
    spill_id: u64,
    /// A nudge (see `PageReader::nudge`) is asked for and has not run yet: one at a time.
    nudge_pending: std::sync::atomic::AtomicBool,
}

impl Queue {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: ShortStr,
        vhost: ShortStr,
        durable: bool,
        exclusive_owner: Option<ConnectionId>,
        auto_delete: bool,
        arguments: FieldTable,
        config: QueueArguments,
        services: Arc<QueueServices>,
        policy: Option<&PolicyDefinition>,
    ) -> Self {
        let settings = settings_for(&config, &arguments, durable, &services, policy);
        let now = services.clock.now_ms();
        let mut state = QueueState::new(settings, auto_delete, now);
        // With a store, a classic queue leaves what lies beyond its window there: a durable
        // one its persistent messages as they are committed, any one the rest under memory
        // pressure (spilled). A priority queue does not (its levels would each need a run),
        // nor does a quorum queue (its retries and kept dead letters live beside its ready
        // list).
        let pages = services.store.is_some()
            && config.queue_type == QueueType::Classic
            && state.settings().max_priority == 0;
        let stores_persistent = durable && exclusive_owner.is_none();
        let progress = pages.then(|| {
            if stores_persistent {
                state.enable_paging(services.paging);
            } else {
                state.enable_spill_paging(services.paging);
            }
            Arc::new(StoreProgress::default())
        });
        let spill_id = if pages { services.next_spill_id() } else { 0 };
        Queue {
            pending_dead_letters: PendingDeadLetters::default(),
            name,
            vhost,
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            config,
            progress,
            spill_id,
            nudge_pending: Default::default(),
            inner: Mutex::new(Inner {
                state,
                effects: Effects::new(),
                packed: BulkCharge::new(Arc::clone(&services.memory)),
            }),
            counters: QueueCounters::default(),
            totals: DeliveryTotals::default(),
            services,
            store_id: OnceLock::new(),
        }
    }

    /// Arms the queue's first deadline (`x-expires`) with its owner.
    pub(crate) fn start(self: &Arc<Self>, owner: &dyn QueueOwner) {
        self.run(owner, |state, now, fx| state.start(now, fx));
    }

    /// Whether deliveries are counted (a quorum queue): redeliveries then carry the counts.
    pub(crate) fn counts_deliveries(&self) -> bool {
        self.config.queue_type == QueueType::Quorum
    }

    /// Whether every message it takes is stored, persistent or not (a durable quorum queue).
    pub(crate) fn keeps_every_message(&self) -> bool {
        self.counts_deliveries() && self.store_id.get().is_some()
    }

    /// Whether the queue leaves messages beyond its window in the store.
    pub(crate) fn pages(&self) -> bool {
        self.progress.is_some()
    }

    /// `RESOURCE_LOCKED` unless `connection` may use this queue.
    pub(crate) fn check_exclusive(&self, connection: ConnectionId) -> BrokerResult<()> {
        match self.exclusive_owner {
            Some(owner) if owner != connection => Err(BrokerError::ResourceLocked(format!(
                "cannot obtain exclusive access to locked queue '{}' in vhost '{}'. It could be \
                 originally declared on another connection or the exclusive property value does \
                 not match that of the original declaration.",
                self.name, self.vhost
            ))),
            _ => Ok(()),
        }
    }

    /// Whether the queue has been deleted (its consumers were cancelled by the server).
    pub(crate) fn is_deleted(&self) -> bool {
        self.inner.lock().state.is_deleted()
    }

    /// A store group for what leaves this queue's store records together with copies
    /// written elsewhere (a dead-lettering), if the queue is in the store.
    fn store_group(&self) -> Option<dwellmq_store::Group<'_>> {
        match (self.store_id.get(), &self.services.store) {
            (Some(_), Some(store)) => Some(store.group()),
            _ => None,
        }
    }
}

/// A queue's settings: its arguments combined with the policy that applies.
fn settings_for(
    config: &QueueArguments,
    arguments: &FieldTable,
    durable: bool,
    services: &QueueServices,
    policy: Option<&PolicyDefinition>,
) -> QueueSettings {
    QueueSettings::effective(
        config,
        arguments.contains_key("x-overflow"),
        durable,
        services.expiry_mode,
        policy,
    )
}
