//! The broker's shared state: vhosts with their exchanges and queues, consumers, accounting.
//! `BrokerState` builds the parts and wires them; the map of the modules, and which may import
//! which, is in ARCHITECTURE.md ("`src/broker/`, bottom to top").
//!
//! Everything here is reached from connection tasks through `Arc`s and short locks; there is no
//! broker-wide task or channel hop on the publish → deliver path.

pub(crate) mod access;
pub(crate) mod available_memory;
pub(crate) mod connections;
pub(crate) mod delayed;
pub(crate) mod disk_alarm;
pub(crate) mod effects;
pub(crate) mod exchange;
pub(crate) mod free_space;
pub(crate) mod memory;
pub(crate) mod names;
pub(crate) mod persist;
pub(crate) mod publish;
pub(crate) mod queue;
pub(crate) mod rates;
pub(crate) mod reply_to;
pub(crate) mod restore;
pub(crate) mod runtime;
pub(crate) mod scheduler;
pub(crate) mod stats;
pub(crate) mod test_hooks;
pub(crate) mod tickets;
pub(crate) mod timer_thread;
pub(crate) mod vhost;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use dwellmq_timer::{ManualClock, SharedClock, SystemClock};

use crate::config::{BrokerConfig, ClockConfig};
use delayed::DelayedMessages;
use memory::MemoryMonitor;
use runtime::Runtime;
use vhost::VHost;

/// State shared by every connection of one broker.
pub(crate) struct BrokerState {
    pub(crate) config: BrokerConfig,
    /// Users and permissions (changed at runtime over HTTP).
    pub(crate) access: access::Access,
    /// The configured vhosts and those added at runtime (HTTP, definitions, the store).
    vhosts: parking_lot::RwLock<HashMap<String, Arc<VHost>>>,
    pub(crate) memory: Arc<MemoryMonitor>,
    /// The store cannot keep up (writes failing, or too much queued for it): publishers are
    /// blocked as for the memory alarm.
    pub(crate) disk: Arc<disk_alarm::DiskAlarm>,
    pub(crate) clock: SharedClock,
    pub(crate) manual_clock: Option<Arc<ManualClock>>,
    /// Messages held by delayed exchanges.
    pub(crate) delayed: Arc<DelayedMessages>,
    /// What vhosts and the publish pipeline share: the queues' services, the scheduler, names,
    /// reply consumers, the definitions store, what the restore kept.
    pub(crate) runtime: Arc<Runtime>,
    /// Direct reply-to consumers, by reply address.
    pub(crate) reply_consumers: Arc<reply_to::ReplyConsumers>,
    /// Wakes the timer thread when an earlier deadline appears.
    pub(crate) timer: Arc<timer_thread::TimerControl>,
    next_connection_id: AtomicU64,
    pub(crate) open_connections: AtomicUsize,
    /// Message counters (for `/metrics`).
    pub(crate) stats: stats::Stats,
    /// Message rates, sampled every few seconds while HTTP is on.
    pub(crate) rates: rates::Rates,
    /// Open AMQP connections (for the management API).
    pub(crate) connections: connections::Connections,
    /// Outbound buffers of open connections (for `BrokerHandle::settle`).
    pub(crate) outbounds: parking_lot::Mutex<Vec<std::sync::Weak<dyn IdleProbe>>>,
    /// A test asked (over HTTP) for a restart on the same data; the binary's main loop
    /// carries it out (a broker cannot restart itself from inside one of its requests).
    pub(crate) restart: tokio::sync::Notify,
    /// How many restarts led to this broker (the test double's `GET /test/restart`).
    pub(crate) restarts: AtomicU64,
    /// Stored definitions the last restore could not bring back (kept on disk untouched):
    /// what and why, for `GET /api/health/checks/definitions`.
    pub(crate) unrestored: parking_lot::Mutex<Vec<String>>,
    /// Itself, for what the store's writer takes back after a failed write (a vhost added).
    me: std::sync::Weak<BrokerState>,
}

/// One connection's output that was not yet written to its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnwrittenOutput {
    /// Octets queued and not yet handed to the socket.
    pub queued_bytes: usize,
    /// Whether the connection's writer was in the middle of a write (whose octets are not
    /// counted in `queued_bytes`): the socket did not take them yet.
    pub writing: bool,
}

/// Whether a connection has written everything queued for it (`BrokerHandle::settle`).
pub(crate) trait IdleProbe: Send + Sync {
    /// What is still waiting to be written, or `None` when nothing is.
    fn unwritten(&self) -> Option<UnwrittenOutput>;
    /// Octets buffered for output and not yet taken by the socket.
    fn buffered(&self) -> usize;
}

impl BrokerState {
    #[allow(dead_code)]
    pub(crate) fn new(config: BrokerConfig, access: access::Access) -> Arc<Self> {
        Self::with_store(config, access, None, disk_alarm::DiskAlarm::new())
    }

    /// A broker whose durable objects and persistent messages go to `store` (`None`: in
    /// memory), which reports its alarms to `disk`.
    pub(crate) fn with_store(
        config: BrokerConfig,
        access: access::Access,
        store: Option<Arc<dwellmq_store::Store>>,
        disk: Arc<disk_alarm::DiskAlarm>,
    ) -> Arc<Self> {
        let (clock, manual_clock): (SharedClock, _) = match config.clock {
            ClockConfig::System => (Arc::new(SystemClock::new()), None),
            ClockConfig::SystemWithTestWall(wall) => {
                (Arc::new(SystemClock::anchored_to(wall)), None)
            }
            ClockConfig::Manual { start_ms } => {
                let manual = Arc::new(ManualClock::new(start_ms));
                (manual.clone(), Some(manual))
            }
        };
        let memory = MemoryMonitor::with_paging_ratio(
            high_watermark(&config),
            config.limits.memory_paging_ratio,
        );
        let queues = Arc::new(queue::QueueServices::new(
            clock.clone(),
            Arc::clone(&memory),
            store.clone(),
            config.expiry_mode,
            dwellmq_core::paging::Paging {
                window_messages: config.limits.queue_window_messages.max(1),
                window_bytes: config.limits.queue_window_bytes.max(1),
            },
            manual_clock.is_some(),
            Arc::default(),
        ));
        let timer = Arc::new(timer_thread::TimerControl::default());
        let scheduler = Arc::new(scheduler::Scheduler::new(
            clock.now_ms(),
            Arc::clone(&timer),
        ));
        let delayed = DelayedMessages::with_scheduler(Arc::clone(&scheduler), Arc::clone(&memory));
        if let Some(store) = &store {
            delayed.set_store(Arc::clone(store));
        }
        let names = Arc::new(names::NameGenerator::new(config.name_seed));
        let runtime = Runtime::new(queues, scheduler, names);
        let mut vhosts: HashMap<String, Arc<VHost>> = HashMap::new();
        for name in std::iter::once("/").chain(config.vhosts.iter().map(String::as_str)) {
            vhosts.entry(name.to_string()).or_insert_with(|| {
                VHost::shared(name.into(), Arc::clone(&runtime), delayed.clone())
            });
        }
        Arc::new_cyclic(|me| BrokerState {
            me: me.clone(),
            delayed,
            timer,
            reply_consumers: Arc::clone(&runtime.reply_consumers),
            runtime,
            memory,
            disk,
            config,
            access,
            vhosts: parking_lot::RwLock::new(vhosts),
            clock,
            manual_clock,
            next_connection_id: AtomicU64::new(1),
            open_connections: AtomicUsize::new(0),
            outbounds: parking_lot::Mutex::new(Vec::new()),
            connections: connections::Connections::default(),
            stats: stats::Stats::default(),
            rates: rates::Rates::default(),
            restart: tokio::sync::Notify::new(),
            restarts: AtomicU64::new(0),
            unrestored: parking_lot::Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    /// Every vhost, sorted by name.
    pub(crate) fn all_vhosts(&self) -> Vec<Arc<VHost>> {
        let mut all: Vec<Arc<VHost>> = self.vhosts.read().values().cloned().collect();
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Adds a vhost (as RabbitMQ's `PUT /api/vhosts/{name}` or a definitions import does),
    /// written to the store when there is one (reported to `writes`); false if it existed
    /// already.
    pub(crate) fn add_vhost(&self, name: &str, writes: persist::DefinitionWrites<'_>) -> bool {
        let mut vhosts = self.vhosts.write();
        if vhosts.contains_key(name) {
            return false;
        }
        let vhost = VHost::shared(name.into(), Arc::clone(&self.runtime), self.delayed.clone());
        let added = Arc::downgrade(&vhost);
        vhosts.insert(name.to_string(), vhost);
        drop(vhosts);
        let me = self.me.clone();
        let definitions = &self.runtime.definitions;
        definitions.vhost_added(name, writes, move || {
            if let (Some(state), Some(added)) = (me.upgrade(), added.upgrade()) {
                state.undo_vhost_add(&added);
            }
        });
        true
    }

    /// Writing an added vhost failed: it is deleted again, with whatever was declared in it
    /// meanwhile, as if it had never been added (unless it was deleted and added again since).
    fn undo_vhost_add(&self, added: &Arc<VHost>) {
        tracing::warn!(vhost = %added.name, "the vhost's definition could not be written: it is taken back");
        let mut vhosts = self.vhosts.write();
        if !vhosts
            .get(added.name.as_str())
            .is_some_and(|current| Arc::ptr_eq(current, added))
        {
            return;
        }
        vhosts.remove(added.name.as_str());
        drop(vhosts);
        self.tear_down_vhost(added, persist::DefinitionWrites::UNAWAITED);
    }

    /// Takes vhost `name` out of the broker (`DELETE /api/vhosts/{name}`); the caller deletes
    /// what it held and closes its connections.
    /// Deletes a vhost with everything in it, as RabbitMQ does (false if there is none): its
    /// connections are closed (CONNECTION_FORCED), its queues go with their messages (their
    /// consumers told), its delayed exchanges with what they hold, the permissions granted in
    /// it, and last the store drops whatever is left under it. Its writes report to `writes`.
    pub(crate) fn delete_vhost(&self, name: &str, writes: persist::DefinitionWrites<'_>) -> bool {
        let Some(vhost) = self.vhosts.write().remove(name) else {
            return false;
        };
        self.tear_down_vhost(&vhost, writes);
        true
    }

    /// What deleting vhost `vhost`, already out of the broker's map, leaves to do.
    fn tear_down_vhost(&self, vhost: &Arc<VHost>, writes: persist::DefinitionWrites<'_>) {
        let name = vhost.name.as_str();
        let reason = format!("vhost '{name}' is deleted");
        for connection in self.connections.list().iter().filter(|c| c.vhost == name) {
            connection.close(reason.clone());
        }
        vhost.tear_down(writes);
        for (granted_in, user, _) in self.access.permissions() {
            if granted_in == name {
                let _ = self.access.clear_permission(&granted_in, &user);
            }
        }
        self.runtime.definitions.vhost_deleted(name, writes);
    }

    pub(crate) fn user(&self, name: &str) -> Option<Arc<access::User>> {
        self.access.user(name)
    }

    pub(crate) fn next_connection_id(&self) -> u64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// The configured watermark in octets, for the memory this process may use.
fn high_watermark(config: &BrokerConfig) -> u64 {
    let watermark = config.limits.memory_high_watermark;
    let available = available_memory::detect();
    if available.source == available_memory::MemorySource::Unknown {
        tracing::warn!(
            assumed = available.bytes,
            "cannot tell the memory available to this process; assuming 1 GiB"
        );
    }
    let octets = available.watermark(watermark);
    tracing::info!(
        "memory high watermark set to {} MiB ({octets} octets, {watermark}) of {} MiB ({} octets, from {}) available",
        octets >> 20,
        available.bytes >> 20,
        available.bytes,
        available.source,
    );
    octets
}

impl BrokerState {
    /// The durable store (`--data-dir`), or `None` in memory.
    pub(crate) fn store(&self) -> Option<&Arc<dwellmq_store::Store>> {
        self.runtime.queues.store.as_ref()
    }

    /// What every queue is given: clock, store, memory, counters, test hooks.
    pub(crate) fn queue_services(&self) -> &queue::QueueServices {
        &self.runtime.queues
    }

    /// Faults a test injects, pause points, and counters for the test endpoints.
    pub(crate) fn hooks(&self) -> &test_hooks::TestHooks {
        &self.runtime.queues.hooks
    }

    /// The earliest moment the timer must act: a delayed release or move-in, or a queue tick.
    pub(crate) fn next_wake(&self) -> Option<u64> {
        self.delayed.next_wake()
    }

    /// The test double's fault: the store's next `n` commits carrying a message write fail
    /// (see [`dwellmq_store::Store::fail_next_commits`]). Nothing without a store.
    pub(crate) fn fail_next_writes(&self, n: u64) {
        if let Some(store) = self.store() {
            store.fail_next_commits(n);
        }
    }

    /// Failing commits still to come.
    pub(crate) fn writes_to_fail(&self) -> u64 {
        self.store().map_or(0, |store| store.commits_to_fail())
    }
}

/// Vhosts and the publish pipeline reach the delayed exchanges' holder through
/// [`vhost::HeldMessages`], so that the vhost module does not depend on it.
impl vhost::HeldMessages for DelayedMessages {
    fn hold(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<exchange::Exchange>,
        message: Arc<dwellmq_core::Message>,
        due_ms: u64,
        ticket: Option<&Arc<tickets::PublishTicket>>,
    ) {
        self.hold_confirmed(vhost, exchange, message, due_ms, ticket);
    }

    fn forget_exchange(&self, vhost: &dwellmq_codec::ShortStr, exchange: &dwellmq_codec::ShortStr) {
        DelayedMessages::forget_exchange(self, vhost, exchange);
    }

    fn reattach_kept(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<exchange::Exchange>,
        held: (u64, u64),
        now_ms: u64,
    ) {
        DelayedMessages::reattach_kept(self, vhost, exchange, held, now_ms);
    }
}
