//! The delivery side of a channel: delivery tags, the unacknowledged ledger, and writing
//! deliveries as frames. Queues reach it through [`DeliverySink`].
//!
//! Shared (`Arc`) between the connection task, which handles acks, and the queues, which
//! deliver to the channel's consumers from whichever task published. Lock order is always
//! queue → channel ledger → outbound; the ledger lock is never held while a queue lock is taken.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use dwellmq_codec::methods::{BasicCancel, BasicDeliver, BasicGetOk};
use dwellmq_codec::{Method, ShortStr};
use dwellmq_core::queue::{delivery_reservation, redelivery_properties, ChannelCredit};
use dwellmq_core::{Message, QueueEntry};
use parking_lot::Mutex;

use super::outbound::{FrameSink, Outbound};
use crate::broker::queue::consumer::{Consumer, DeliverySink};
use crate::broker::queue::Queue;

/// A delivered message awaiting ack, nack or reject.
pub(crate) struct Unacked {
    pub(crate) tag: u64,
    pub(crate) queue: Arc<Queue>,
    pub(crate) entry: QueueEntry,
    /// `None` for a `basic.get`.
    pub(crate) consumer: Option<Arc<Consumer>>,
}

impl Unacked {
    /// Gives the credit this message took back to its consumer and channel.
    pub(crate) fn release_credit(&self, channel: &ChannelCredit) {
        match &self.consumer {
            Some(consumer) => consumer.credit.settled(1),
            None => channel.settled(1),
        }
    }
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
    /// Prefetch, flow and closed state, read by queues.
    pub(crate) credit: Arc<ChannelCredit>,
    ledger: Mutex<Ledger>,
}

impl DeliveryChannel {
    pub(crate) fn new(id: u16, outbound: Arc<Outbound>, frame_max: u32) -> Self {
        let credit = Arc::new(ChannelCredit::new(outbound.congestion()));
        DeliveryChannel {
            id,
            outbound,
            frame_max,
            credit,
            ledger: Mutex::new(Ledger {
                next_tag: 1,
                unacked: VecDeque::new(),
            }),
        }
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
            write_content(sink, self.id, queue, &entry, self.frame_max);
        });
        if !no_ack {
            self.credit.unacked.fetch_add(1, Ordering::Relaxed);
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

    /// Deliveries and gets on this channel so far (each took a delivery tag).
    pub(crate) fn delivered_count(&self) -> u64 {
        self.ledger.lock().next_tag - 1
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
        self.credit.closed.store(true, Ordering::Relaxed);
        out.extend(ledger.unacked.drain(..));
    }
}

/// A delivery's content: as published, or for a quorum queue's redelivery with its counts.
fn write_content(
    sink: &mut FrameSink<'_>,
    channel: u16,
    queue: &Queue,
    entry: &QueueEntry,
    frame_max: u32,
) {
    match queue
        .counts_deliveries()
        .then(|| redelivery_properties(entry))
        .flatten()
    {
        Some(properties) => sink.content_with(channel, &entry.message, &properties, frame_max),
        None => sink.content(channel, &entry.message, frame_max),
    }
}

impl DeliverySink for DeliveryChannel {
    fn deliver(
        &self,
        queue: &Arc<Queue>,
        consumer: &Arc<Consumer>,
        entry: QueueEntry,
    ) -> Result<(), QueueEntry> {
        // The queue reserved this delivery against the output bound when it decided it; from
        // here on the outbound buffer counts it (or it goes back to the queue).
        let congestion = &self.credit.congestion;
        congestion.unreserve(delivery_reservation(entry.message.body.len()));
        let mut ledger = self.ledger.lock();
        // Checked under the ledger lock: once `close` has taken the ledger, nothing more may
        // enter it, or that message would never be requeued.
        if self.credit.closed.load(Ordering::Relaxed) {
            // Nothing is buffered for it, so no write will come to lift a stop it caused.
            if congestion.relieve() {
                self.outbound.wake_queues();
            }
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
            write_content(sink, self.id, queue, &entry, self.frame_max);
        });
        if !consumer.credit.no_ack {
            ledger.unacked.push_back(Unacked {
                tag,
                queue: Arc::clone(queue),
                entry,
                consumer: Some(Arc::clone(consumer)),
            });
        }
        Ok(())
    }

    fn deliver_reply(&self, tag: &ShortStr, message: &Message) -> bool {
        let mut ledger = self.ledger.lock();
        if self.credit.closed.load(Ordering::Relaxed) {
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

    fn cancelled(&self, tag: &ShortStr) {
        self.outbound.send_method(
            self.id,
            &Method::BasicCancel(BasicCancel {
                consumer_tag: tag.clone(),
                no_wait: true,
            }),
        );
    }
}
