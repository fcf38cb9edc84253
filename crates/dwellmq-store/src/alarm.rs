//! The writer's two alarms, for the broker to block publishers on: writes are failing (until a
//! commit succeeds again), or more is queued for the writer than it should take in (until the
//! backlog drains below a low mark).
//!
//! The submit channel itself is unbounded (a submitter must never block, least of all a
//! connection task); these alarms are the bound: the broker stops reading publishes while one
//! is on, as it does for its memory alarm.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::ops::Op;
use crate::records::Payload;

/// Which alarm changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreAlarm {
    /// A commit failed (write error, failed fsync, full disk, a reopen that failed); cleared by
    /// the next commit that succeeds (the writer probes with an empty commit at a backoff, so
    /// this clears without new submissions).
    WritesFailing,
    /// The octets queued for the writer and not yet committed went above
    /// [`crate::StoreOptions::backlog_high`]; cleared once they are at or below
    /// [`crate::StoreOptions::backlog_low`].
    Backlog,
}

/// Called with an alarm and whether it is now on. Runs on whichever thread changed it (a
/// submitter or the writer), under a lock that orders the calls: keep it short.
pub type AlarmHook = Arc<dyn Fn(StoreAlarm, bool) + Send + Sync>;

/// What an op is counted to weigh in the backlog: its message (packed size), plus a fixed
/// allowance for the op itself, so that a flood of tiny messages is bounded too.
pub(crate) const OP_OVERHEAD: u64 = 64;

pub(crate) fn weight(ops: &[Op]) -> u64 {
    ops.iter()
        .map(|op| {
            let payload = match op {
                Op::Persist { message, .. }
                | Op::Hold { message, .. }
                | Op::Spill { message, .. }
                | Op::StreamAppend { message, .. } => message,
                _ => return OP_OVERHEAD,
            };
            OP_OVERHEAD + payload_len(payload)
        })
        .sum()
}

fn payload_len(payload: &Payload) -> u64 {
    payload.packed_len() as u64
}

/// The alarms' state, shared by the store handle (submissions) and the writer (commits).
pub(crate) struct Alarms {
    hook: Option<AlarmHook>,
    high: u64,
    low: u64,
    backlog: AtomicU64,
    failing: AtomicBool,
    backlogged: AtomicBool,
    // Orders the hook's calls with the flags they report.
    changes: Mutex<()>,
}

impl Alarms {
    pub(crate) fn new(hook: Option<AlarmHook>, high: u64, low: u64) -> Self {
        Alarms {
            hook,
            high,
            low: low.min(high),
            backlog: AtomicU64::new(0),
            failing: AtomicBool::new(false),
            backlogged: AtomicBool::new(false),
            changes: Mutex::new(()),
        }
    }

    /// A submission of `weight` octets was queued.
    pub(crate) fn queued(&self, weight: u64) {
        let now = self.backlog.fetch_add(weight, Ordering::AcqRel) + weight;
        if now > self.high {
            self.set(StoreAlarm::Backlog, true);
        }
    }

    /// Submissions of `weight` octets in all were committed (or failed).
    pub(crate) fn drained(&self, weight: u64) {
        let now = self.backlog.fetch_sub(weight, Ordering::AcqRel) - weight;
        if now <= self.low {
            self.set(StoreAlarm::Backlog, false);
        }
    }

    /// Octets queued and not yet committed.
    pub(crate) fn backlog(&self) -> u64 {
        self.backlog.load(Ordering::Acquire)
    }

    /// Whether the last commit failed.
    pub(crate) fn failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    pub(crate) fn set(&self, alarm: StoreAlarm, on: bool) {
        let flag = match alarm {
            StoreAlarm::WritesFailing => &self.failing,
            StoreAlarm::Backlog => &self.backlogged,
        };
        // The common case (no change) costs one load.
        if flag.load(Ordering::Acquire) == on {
            return;
        }
        let _order = self.changes.lock();
        if flag.swap(on, Ordering::AcqRel) == on {
            return;
        }
        match (alarm, on) {
            (StoreAlarm::WritesFailing, true) => tracing::warn!("store writes failing"),
            (StoreAlarm::WritesFailing, false) => tracing::info!("store writes succeed again"),
            (StoreAlarm::Backlog, true) => {
                tracing::warn!(
                    backlog = self.backlog(),
                    high = self.high,
                    "store backlog over its limit"
                )
            }
            (StoreAlarm::Backlog, false) => {
                tracing::info!(backlog = self.backlog(), "store backlog drained")
            }
        }
        if let Some(hook) = &self.hook {
            hook(alarm, on);
        }
    }
}
