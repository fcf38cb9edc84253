//! Holding a published message: in the scheduler (the wheel, or the far tier), or, for a
//! durable exchange's message due beyond the horizon when the broker has a data directory, on
//! disk only. A durable exchange's message is written to the store before its publisher's
//! confirm.

use std::sync::Arc;

use dwellmq_core::schedule::{DeadlineId, HORIZON_MS};
use dwellmq_core::Message;
use parking_lot::Mutex;

use super::disk::DiskTier;
use super::held::{Held, Kept};
use super::{DelayedMessages, Locked, Scheduler};
use crate::broker::exchange::Exchange;
use crate::broker::persist::PublishTicket;
use crate::broker::scheduler::Entry;
use crate::broker::vhost::VHost;

/// Where [`DelayedMessages::place`] put a held message.
pub(super) struct Placed {
    /// Its id (in the store too, for a stored one).
    pub(super) id: DeadlineId,
    /// Whether the timer thread must wake sooner than it planned.
    pub(super) wake: bool,
    /// Whether only the disk holds it.
    pub(super) on_disk: bool,
}

impl DelayedMessages {
    /// Holds `message` until `due_ms`; a durable exchange's message is written to the store
    /// (its commit counts on `ticket`, which holds the publisher's confirm). One due beyond
    /// the horizon is then held on disk only (its body in RAM only until its commit).
    pub(crate) fn hold_confirmed(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<Message>,
        due_ms: u64,
        ticket: Option<&Arc<PublishTicket>>,
    ) {
        // Woken once the locks are released.
        if self.hold_locked(vhost, exchange, message, due_ms, ticket) {
            self.scheduler.wake();
        }
    }

    /// As `hold_confirmed`; true when the timer thread must wake sooner than it planned.
    fn hold_locked(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<Message>,
        due_ms: u64,
        ticket: Option<&Arc<PublishTicket>>,
    ) -> bool {
        let store = self.store.get().filter(|_| exchange.durable);
        let original = store.is_some().then(|| Arc::clone(&message));
        // Packed outside the lock; the published message (and its charge) goes away.
        let message = Kept::new(message);
        let body_len = message.body_len() as u64;
        let mut disk_guard = store.map(|_| self.disk.lock());
        let mut guard = self.scheduler.lock();
        let inner = &mut *guard;
        // The scheduler's now, for the store's bucketing of the due time.
        let held_at_ms = inner.core.horizon_ms().saturating_sub(HORIZON_MS);
        let Some(index) = inner.index_for(vhost, exchange) else {
            // Deleted since it was routed to: the message goes with it.
            return false;
        };
        index.count += 1;
        index.bytes += body_len;
        let held = Held {
            target: Arc::clone(&index.target),
            message,
            stored: store.is_some(),
        };
        let incarnation = held.incarnation();
        let disk = disk_guard.as_mut().and_then(|d| d.as_mut());
        let placed = self.place(disk, inner, held, due_ms, false);
        let (Some(store), Some(original)) = (store, original) else {
            return placed.wake;
        };
        // Under the disk tier's lock: the hold reaches the store (and its index) before any
        // release of it can, and before a refill can miss it.
        let failed = placed.on_disk.then(|| FailedHold {
            disk: Arc::clone(&self.disk),
            scheduler: Arc::clone(&self.scheduler),
            incarnation,
            bytes: body_len,
        });
        let id = placed.id;
        let op = dwellmq_store::Op::Hold {
            id,
            held_at_ms,
            vhost: vhost.name.to_string(),
            exchange: exchange.name.to_string(),
            message: dwellmq_store::Payload::Message(original),
        };
        crate::broker::persist::submit_counted(store, vec![op], ticket, move |outcome| {
            if let Err(e) = outcome {
                tracing::warn!(error = %e, "storing a delayed message failed");
                if let Some(failed) = failed {
                    failed.correct(id);
                }
            }
        });
        placed.wake
    }

    /// Puts `held` (counted in its exchange's book already) at `due_ms`: in the scheduler,
    /// its memory charged unless `charged` already; or, for a stored message due beyond the
    /// horizon while messages are held on disk, on disk only, its contents gone from RAM (the
    /// caller submits its `Hold` under the disk tier's lock).
    pub(super) fn place(
        &self,
        disk: Option<&mut DiskTier>,
        inner: &mut Locked,
        held: Held,
        due_ms: u64,
        charged: bool,
    ) -> Placed {
        let far = inner.core.horizon_ms() < due_ms;
        let disk = disk.filter(|_| held.stored);
        match disk {
            Some(disk) if far => {
                if charged {
                    self.discard(held.message);
                }
                // Only the store keeps it (its index shows it from the submission on).
                let id = inner.core.allocate(due_ms);
                disk.hold(id);
                let wake = self.arm_disk_move(inner, due_ms.saturating_sub(HORIZON_MS));
                Placed {
                    id,
                    wake,
                    on_disk: true,
                }
            }
            disk => {
                if !charged {
                    self.memory.charge_bytes(held.message.charged_by_holder());
                }
                let incarnation = held.incarnation();
                let (id, wake) = inner.core.schedule(due_ms, Entry::Held(held));
                if let Some(disk) = disk {
                    // In the wheel: a refill reading its hold must not bring it out again.
                    disk.held_in_wheel(id);
                }
                if inner.core.is_far(id) {
                    inner.book.note_beyond(incarnation, None, Some(id));
                }
                Placed {
                    id,
                    wake,
                    on_disk: false,
                }
            }
        }
    }
}

/// A hold on disk whose commit failed: what its completion needs to take it out of its
/// exchange's counts, if the disk tier still held it.
struct FailedHold {
    disk: Arc<Mutex<Option<DiskTier>>>,
    scheduler: Arc<Scheduler>,
    incarnation: u64,
    bytes: u64,
}

impl FailedHold {
    /// On the writer thread, after the failed commit (locks in the usual order).
    fn correct(self, id: DeadlineId) {
        let mut disk = self.disk.lock();
        if disk.as_mut().is_some_and(|disk| disk.hold_failed(id)) {
            self.scheduler
                .lock()
                .book
                .forget_counts(self.incarnation, 1, self.bytes);
        }
    }
}
