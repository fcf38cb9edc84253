//! Acks, nacks, rejects and `basic.recover`: settling delivered messages.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use dwellmq_codec::Method;
use dwellmq_core::{BrokerError, BrokerResult};

use super::publish::PublishMode;
use super::{Channel, ConnContext};
use crate::broker::delivery::Unacked;

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
    },
}

impl Channel {
    pub(super) fn settle_or_buffer(&mut self, settlement: Settlement) -> BrokerResult<()> {
        if let PublishMode::Transactional { settlements, .. } = &mut self.mode {
            settlements.push(settlement);
            return Ok(());
        }
        self.settle(settlement)
    }

    pub(super) fn settle(&mut self, settlement: Settlement) -> BrokerResult<()> {
        let (tag, multiple, requeue) = match settlement {
            Settlement::Ack { tag, multiple } => (tag, multiple, None),
            Settlement::Reject {
                tag,
                multiple,
                requeue,
            } => (tag, multiple, Some(requeue)),
        };
        let mut settled = std::mem::take(&mut self.settle_scratch);
        if self.delivery.settle(tag, multiple, &mut settled).is_none() {
            self.settle_scratch = settled;
            return Err(BrokerError::PreconditionFailed(format!(
                "unknown delivery tag {tag}"
            )));
        }
        let requeue = requeue == Some(true);
        self.return_to_queues(&mut settled, requeue);
        self.settle_scratch = settled;
        if self.delivery.global_prefetch.load(Ordering::Relaxed) != 0 {
            self.drain_consumed_queues();
        }
        Ok(())
    }

    /// Hands settled messages back to their queues, grouped by queue: requeued, or done.
    pub(super) fn return_to_queues(&self, settled: &mut Vec<Unacked>, requeue: bool) {
        for unacked in settled.iter() {
            if let Some(consumer) = &unacked.consumer {
                consumer.unacked.fetch_sub(1, Ordering::Relaxed);
            }
        }
        let mut rest = &settled[..];
        while let Some(first) = rest.first() {
            let run = rest
                .iter()
                .take_while(|u| Arc::ptr_eq(&u.queue, &first.queue))
                .count();
            let queue = Arc::clone(&first.queue);
            if requeue {
                queue.requeue(rest[..run].iter().map(|u| u.entry.clone()));
            } else {
                queue.settled(run);
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
        self.requeue_all_unacked();
        Ok(())
    }

    pub(super) fn requeue_all_unacked(&mut self) {
        let mut all = std::mem::take(&mut self.settle_scratch);
        self.delivery.take_all(&mut all);
        self.return_to_queues(&mut all, true);
        self.settle_scratch = all;
    }
}
