//! The delivery side of a channel: delivery tags, unacknowledged messages and prefetch.
//!
//! Shared (`Arc`) between the connection task, which handles acks, and the queues, which
//! deliver to the channel's consumers from whichever task published. Lock order is always
//! queue → channel → outbound; the channel lock is never held while a queue lock is taken.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use dwellmq_codec::methods::{BasicDeliver, BasicGetOk};
use dwellmq_codec::{Method, ShortStr};
use dwellmq_core::{Message, QueueEntry};
use parking_lot::Mutex;

use super::queue::Queue;
use crate::server::outbound::Outbound;

/// A consumer: one `basic.consume` on one queue.
pub(crate) struct Consumer {
    pub(crate) tag: ShortStr,
    pub(crate) channel: Arc<DeliveryChannel>,
    pub(crate) no_ack: bool,
    pub(crate) exclusive: bool,
    /// `x-priority`: higher-priority consumers are served first while they have credit.
    pub(crate) priority: i64,
    /// Per-consumer prefetch (`basic.qos` with global=false); 0 = unlimited.
    pub(crate) prefetch: u32,
    pub(crate) unacked: AtomicU32,
    /// The client understands a server-sent `basic.cancel` (capability `consumer_cancel_notify`).
    pub(crate) cancel_notify: bool,
}

impl Consumer {
    fn has_credit(&self) -> bool {
        self.prefetch == 0 || self.unacked.load(Ordering::Relaxed) < self.prefetch
    }
}

/// A delivered message awaiting ack, nack or reject.
pub(crate) struct Unacked {
    pub(crate) tag: u64,
    pub(crate) queue: Arc<Queue>,
    pub(crate) entry: QueueEntry,
    pub(crate) consumer: Option<Arc<Consumer>>,
}

struct Ledger {
    next_tag: u64,
    unacked: VecDeque<Unacked>,
}

/// The part of a channel that queues deliver into.
pub(crate) struct DeliveryChannel {
    pub(crate) id: u16,
    pub(crate) outbound: Arc<Outbound>,
    pub(crate) frame_max: u32,
    /// Channel-wide prefetch (`basic.qos` with global=true); 0 = unlimited.
    pub(crate) global_prefetch: AtomicU32,
    /// `channel.flow`: false stops deliveries.
    pub(crate) flow_active: AtomicBool,
    closed: AtomicBool,
    ledger: Mutex<Ledger>,
}

impl DeliveryChannel {
    pub(crate) fn new(id: u16, outbound: Arc<Outbound>, frame_max: u32) -> Self {
        DeliveryChannel {
            id,
            outbound,
            frame_max,
            global_prefetch: AtomicU32::new(0),
            flow_active: AtomicBool::new(true),
            closed: AtomicBool::new(false),
            ledger: Mutex::new(Ledger {
                next_tag: 1,
                unacked: VecDeque::new(),
            }),
        }
    }

    /// Delivers `entry` to `consumer` if prefetch, flow and the socket allow; otherwise hands
    /// the entry back. Called with the queue's lock held.
    pub(crate) fn try_deliver(
        &self,
        consumer: &Arc<Consumer>,
        queue: &Arc<Queue>,
        entry: QueueEntry,
    ) -> Result<(), QueueEntry> {
        if !self.flow_active.load(Ordering::Relaxed)
            || !consumer.has_credit()
            || self.outbound.is_congested()
        {
            return Err(entry);
        }
        let mut ledger = self.ledger.lock();
        // Checked under the ledger lock: once `close` has taken the ledger, nothing more may
        // enter it, or that message would never be requeued.
        if self.closed.load(Ordering::Relaxed) {
            return Err(entry);
        }
        let global = self.global_prefetch.load(Ordering::Relaxed);
        if !consumer.no_ack && global != 0 && ledger.unacked.len() as u32 >= global {
            return Err(entry);
        }
        let tag = ledger.next_tag;
        ledger.next_tag += 1;
        let deliver = Method::BasicDeliver(BasicDeliver {
            consumer_tag: consumer.tag.clone(),
            delivery_tag: tag,
            redelivered: entry.redelivered,
            exchange: entry.message.exchange.clone(),
            routing_key: entry.message.routing_key.clone(),
        });
        self.outbound.with(|sink| {
            sink.method(self.id, &deliver);
            sink.content(self.id, &entry.message, self.frame_max);
        });
        if !consumer.no_ack {
            consumer.unacked.fetch_add(1, Ordering::Relaxed);
            ledger.unacked.push_back(Unacked {
                tag,
                queue: Arc::clone(queue),
                entry,
                consumer: Some(Arc::clone(consumer)),
            });
        }
        Ok(())
    }

    /// Delivers a direct reply-to message to the channel's reply consumer `tag` (no-ack: nothing
    /// to track). False once the channel is closed.
    pub(crate) fn deliver_reply(&self, tag: &ShortStr, message: &Message) -> bool {
        let mut ledger = self.ledger.lock();
        if self.closed.load(Ordering::Relaxed) {
            return false;
        }
        let delivery_tag = ledger.next_tag;
        ledger.next_tag += 1;
        let deliver = Method::BasicDeliver(BasicDeliver {
            consumer_tag: tag.clone(),
            delivery_tag,
            redelivered: false,
            exchange: message.exchange.clone(),
            routing_key: message.routing_key.clone(),
        });
        self.outbound
            .with(|sink| {
                sink.method(self.id, &deliver);
                sink.content(self.id, message, self.frame_max);
            })
            .is_some()
    }

    /// Sends `basic.get-ok` for `entry`; tracks it unless `no_ack`.
    pub(crate) fn deliver_get(
        &self,
        queue: &Arc<Queue>,
        entry: QueueEntry,
        no_ack: bool,
        message_count: u32,
    ) {
        let mut ledger = self.ledger.lock();
        let tag = ledger.next_tag;
        ledger.next_tag += 1;
        let get_ok = Method::BasicGetOk(BasicGetOk {
            delivery_tag: tag,
            redelivered: entry.redelivered,
            exchange: entry.message.exchange.clone(),
            routing_key: entry.message.routing_key.clone(),
            message_count,
        });
        self.outbound.with(|sink| {
            sink.method(self.id, &get_ok);
            sink.content(self.id, &entry.message, self.frame_max);
        });
        if !no_ack {
            ledger.unacked.push_back(Unacked {
                tag,
                queue: Arc::clone(queue),
                entry,
                consumer: None,
            });
        }
    }

    /// Removes the unacked messages that `delivery_tag`/`multiple` name, appending them to
    /// `out`. `None` when a named tag is unknown (RabbitMQ: 406 unknown delivery tag).
    pub(crate) fn settle(
        &self,
        delivery_tag: u64,
        multiple: bool,
        out: &mut Vec<Unacked>,
    ) -> Option<()> {
        let mut ledger = self.ledger.lock();
        if multiple {
            if delivery_tag == 0 {
                out.extend(ledger.unacked.drain(..));
                return Some(());
            }
            // As RabbitMQ: the named tag itself must be outstanding.
            ledger
                .unacked
                .binary_search_by_key(&delivery_tag, |u| u.tag)
                .ok()?;
            while ledger
                .unacked
                .front()
                .is_some_and(|u| u.tag <= delivery_tag)
            {
                out.extend(ledger.unacked.pop_front());
            }
            Some(())
        } else {
            let at = ledger
                .unacked
                .binary_search_by_key(&delivery_tag, |u| u.tag)
                .ok()?;
            out.extend(ledger.unacked.remove(at));
            Some(())
        }
    }

    /// Delivered on this channel and not yet settled (the management API shows it).
    pub(crate) fn unacked_count(&self) -> usize {
        self.ledger.lock().unacked.len()
    }

    /// Takes every unacked message (channel closing, or `basic.recover`).
    pub(crate) fn take_all(&self, out: &mut Vec<Unacked>) {
        out.extend(self.ledger.lock().unacked.drain(..));
    }

    /// Marks the channel closed (queues stop delivering to it) and takes every unacked message.
    pub(crate) fn close(&self, out: &mut Vec<Unacked>) {
        let mut ledger = self.ledger.lock();
        self.closed.store(true, Ordering::Relaxed);
        out.extend(ledger.unacked.drain(..));
    }
}
