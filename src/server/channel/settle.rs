//! Acks, nacks, rejects and `basic.recover`: settling delivered messages.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use dwellmq_codec::Method;
use dwellmq_core::queue::ReturnCause;
use dwellmq_core::{BrokerError, BrokerResult};

use super::publish::PublishMode;
use super::{Channel, ConnContext};
use crate::broker::vhost::VHost;
use crate::server::delivery::Unacked;

/// Where settled messages go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Return {
    /// Acked: done.
    Ack,
    /// Back to the queue, marked redelivered.
    Requeue(ReturnCause),
    /// Rejected without requeue: dead-lettered (or dropped).
    Reject,
}

/// An ack-family operation buffered by a transaction.
pub(super) enum Settlement {
    Ack {
        tag: u64,
        multiple: bool,
    },
    Reject {
        tag: u64,
        multiple: bool,
        requeue: bool,
        /// `basic.reject` (a failed attempt for quorum queues), not `basic.nack`.
        failed: bool,
    },
}

impl Channel {
    pub(super) fn settle_or_buffer(
        &mut self,
        vhost: &VHost,
        settlement: Settlement,
    ) -> BrokerResult<()> {
        if let PublishMode::Transactional { settlements, .. } = &mut self.mode {
            settlements.push(settlement);
            return Ok(());
        }
        self.settle(vhost, settlement)
    }

    /// Settles delivered messages with their queues (in `vhost`).
    pub(super) fn settle(&mut self, vhost: &VHost, settlement: Settlement) -> BrokerResult<()> {
        let (tag, multiple, how) = match settlement {
            Settlement::Ack { tag, multiple } => (tag, multiple, Return::Ack),
            Settlement::Reject {
                tag,
                multiple,
                requeue,
                failed,
            } => (
                tag,
                multiple,
                match (requeue, failed) {
                    (true, true) => Return::Requeue(ReturnCause::Rejected),
                    (true, false) => Return::Requeue(ReturnCause::Nacked),
                    (false, _) => Return::Reject,
                },
            ),
        };
        let mut settled = std::mem::take(&mut self.settle_scratch);
        if self.delivery.settle(tag, multiple, &mut settled).is_none() {
            self.settle_scratch = settled;
            return Err(BrokerError::PreconditionFailed(format!(
                "unknown delivery tag {tag}"
            )));
        }
        self.return_to_queues(vhost, &mut settled, how);
        self.settle_scratch = settled;
        if self.delivery.credit.global_prefetch.load(Ordering::Relaxed) != 0 {
            self.drain_consumed_queues(vhost);
        }
        Ok(())
    }

    /// Hands settled messages back to their queues, grouped by queue.
    pub(super) fn return_to_queues(&self, vhost: &VHost, settled: &mut Vec<Unacked>, how: Return) {
        for unacked in settled.iter() {
            unacked.release_credit(&self.delivery.credit);
        }
        let mut rest = &settled[..];
        while let Some(first) = rest.first() {
            let run = rest
                .iter()
                .take_while(|u| Arc::ptr_eq(&u.queue, &first.queue))
                .count();
            let queue = Arc::clone(&first.queue);
            let entries = &rest[..run];
            match how {
                Return::Ack => {
                    self.counters.acked(entries.len() as u64);
                    queue.ack(vhost, entries.iter().map(|u| &u.entry))
                }
                Return::Requeue(cause) => {
                    queue.requeue(vhost, entries.iter().map(|u| u.entry.clone()), cause)
                }
                Return::Reject => queue.reject(vhost, entries.iter().map(|u| u.entry.clone())),
            }
            rest = &rest[run..];
        }
        settled.clear();
    }

    /// `basic.recover`: every unacked message goes back to its queue, marked redelivered.
    pub(super) fn recover(
        &mut self,
        cx: &ConnContext<'_>,
        requeue: bool,
        reply: bool,
    ) -> BrokerResult<()> {
        if !requeue {
            return Err(BrokerError::NotImplemented("requeue=false".into()));
        }
        // recover-ok goes first: the requeued messages may be redelivered to this very channel
        // at once, and clients drop deliveries that precede recover-ok.
        if reply {
            self.reply(cx, Method::BasicRecoverOk);
        }
        self.requeue_all_unacked(cx.vhost);
        Ok(())
    }

    pub(super) fn requeue_all_unacked(&mut self, vhost: &VHost) {
        let mut all = std::mem::take(&mut self.settle_scratch);
        self.delivery.take_all(&mut all);
        self.return_to_queues(vhost, &mut all, Return::Requeue(ReturnCause::Nacked));
        self.settle_scratch = all;
    }
}
