//! The disk alarm: publishers are blocked while the store cannot keep up, as RabbitMQ blocks
//! them on its free-disk-space alarm (`connection.blocked` with reason `low on disk`).
//!
//! Two conditions of the store's writer raise it (`dwellmq_store::StoreAlarm`): commits are
//! failing (write error, failed fsync, full disk; cleared by the writer's next successful
//! commit, which it probes for by itself), or the writer's backlog is over
//! `Limits::store_backlog_bytes` (cleared when it is down to half). So does free space on the
//! data directory's file system below `Limits::disk_free_limit` (`free_space.rs`). Connection
//! tasks watch it next to the memory alarm (`server::connection`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dwellmq_store::{AlarmHook, StoreAlarm};
use tokio::sync::watch;

/// Whether publishers must be blocked because of the store.
pub(crate) struct DiskAlarm {
    writes_failing: AtomicBool,
    backlog: AtomicBool,
    free_space_low: AtomicBool,
    /// The free disk space limit in octets (0 without a data directory).
    free_space_limit: std::sync::atomic::AtomicU64,
    blocked: watch::Sender<bool>,
}

impl DiskAlarm {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(DiskAlarm {
            writes_failing: AtomicBool::new(false),
            backlog: AtomicBool::new(false),
            free_space_low: AtomicBool::new(false),
            free_space_limit: std::sync::atomic::AtomicU64::new(0),
            blocked: watch::channel(false).0,
        })
    }

    /// What the store calls when one of its alarms changes (on its writer thread or a
    /// submitter's; the store orders the calls).
    pub(crate) fn hook(self: &Arc<Self>) -> AlarmHook {
        let alarm = Arc::clone(self);
        Arc::new(move |which, on| alarm.set(which, on))
    }

    fn set(&self, which: StoreAlarm, on: bool) {
        match which {
            StoreAlarm::WritesFailing => self.writes_failing.store(on, Ordering::Release),
            StoreAlarm::Backlog => self.backlog.store(on, Ordering::Release),
        }
        self.update();
    }

    /// Free space on the data directory's file system went below the limit (`true`) or back
    /// above it.
    pub(crate) fn set_free_space_low(&self, low: bool) {
        self.free_space_low.store(low, Ordering::Release);
        self.update();
    }

    fn update(&self) {
        let blocked = self.writes_failing.load(Ordering::Acquire)
            || self.backlog.load(Ordering::Acquire)
            || self.free_space_low.load(Ordering::Acquire);
        self.blocked.send_if_modified(|current| {
            let changed = *current != blocked;
            *current = blocked;
            changed
        });
    }

    /// The free disk space limit in effect, in octets (0: none, in memory).
    pub(crate) fn free_space_limit(&self) -> u64 {
        self.free_space_limit.load(Ordering::Relaxed)
    }

    pub(crate) fn set_free_space_limit(&self, octets: u64) {
        self.free_space_limit.store(octets, Ordering::Relaxed);
    }

    /// Whether free disk space is below the limit.
    pub(crate) fn free_space_low(&self) -> bool {
        self.free_space_low.load(Ordering::Acquire)
    }

    /// Watches the alarm: `true` while publishers must be blocked.
    pub(crate) fn subscribe(&self) -> watch::Receiver<bool> {
        self.blocked.subscribe()
    }

    /// Whether the alarm is on.
    pub(crate) fn is_on(&self) -> bool {
        *self.blocked.borrow()
    }
}
