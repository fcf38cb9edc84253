//! A queue: ready messages, consumers, and the delivery loop that joins them.

use std::sync::Arc;

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::arguments::QueueArguments;
use dwellmq_core::{BrokerError, BrokerResult, Message, QueueEntry, QueueMessages};
use parking_lot::Mutex;

use super::delivery::{Consumer, DeliveryChannel};

/// Who owns an exclusive queue: the id of the connection that declared it.
pub(crate) type ConnectionId = u64;

struct QueueInner {
    messages: QueueMessages,
    /// Highest `x-priority` first; equal priorities in subscription order.
    consumers: Vec<Arc<Consumer>>,
    /// Round-robin cursor within a priority group.
    next_consumer: usize,
    /// Delivered and not yet settled.
    unacked: usize,
    deleted: bool,
    /// An auto-delete queue is deleted when its last consumer goes, once it has had one.
    had_consumer: bool,
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
    #[allow(dead_code)] // read by TTL, length limits and dead-lettering
    pub(crate) config: QueueArguments,
    inner: Mutex<QueueInner>,
}

/// What removing a consumer left behind.
pub(crate) struct ConsumerRemoved {
    /// The queue is auto-delete and has just lost its last consumer.
    pub(crate) should_auto_delete: bool,
}

impl Queue {
    pub(crate) fn new(
        name: ShortStr,
        vhost: ShortStr,
        durable: bool,
        exclusive_owner: Option<ConnectionId>,
        auto_delete: bool,
        arguments: FieldTable,
        config: QueueArguments,
    ) -> Self {
        let messages = QueueMessages::with_max_priority(config.max_priority.unwrap_or(0));
        Queue {
            name,
            vhost,
            durable,
            exclusive_owner,
            auto_delete,
            arguments,
            config,
            inner: Mutex::new(QueueInner {
                messages,
                consumers: Vec::new(),
                next_consumer: 0,
                unacked: 0,
                deleted: false,
                had_consumer: false,
            }),
        }
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

    /// Enqueues a routed message and delivers what consumers can take.
    pub(crate) fn publish(self: &Arc<Self>, message: Arc<Message>) {
        let mut inner = self.inner.lock();
        if inner.deleted {
            return;
        }
        inner.messages.push(message);
        self.deliver_ready(&mut inner);
    }

    /// Delivers ready messages to consumers with credit, until either runs out: the highest
    /// priority group that can take a message gets it, round-robin within the group (RabbitMQ's
    /// consumer priorities; with equal priorities this is plain round-robin).
    fn deliver_ready(self: &Arc<Self>, inner: &mut QueueInner) {
        'messages: while !inner.messages.is_empty() && !inner.consumers.is_empty() {
            let mut group_start = 0;
            while group_start < inner.consumers.len() {
                let priority = inner.consumers[group_start].priority;
                let group_len = inner.consumers[group_start..]
                    .iter()
                    .take_while(|c| c.priority == priority)
                    .count();
                for attempt in 0..group_len {
                    let index = group_start + (inner.next_consumer + attempt) % group_len;
                    let Some(entry) = inner.messages.pop() else {
                        break 'messages;
                    };
                    let consumer = Arc::clone(&inner.consumers[index]);
                    match consumer.channel.try_deliver(&consumer, self, entry) {
                        Ok(()) => {
                            if !consumer.no_ack {
                                inner.unacked += 1;
                            }
                            inner.next_consumer = index - group_start + 1;
                            continue 'messages;
                        }
                        Err(entry) => inner.messages.requeue(entry),
                    }
                }
                group_start += group_len;
            }
            break;
        }
    }

    /// Tries to deliver again (after an ack, a qos or flow change, or a drained socket).
    pub(crate) fn drain(self: &Arc<Self>) {
        let mut inner = self.inner.lock();
        self.deliver_ready(&mut inner);
    }

    /// `count` delivered messages were acked or dropped.
    pub(crate) fn settled(self: &Arc<Self>, count: usize) {
        let mut inner = self.inner.lock();
        inner.unacked = inner.unacked.saturating_sub(count);
        self.deliver_ready(&mut inner);
    }

    /// Puts delivered messages back, marked redelivered, at their original positions.
    pub(crate) fn requeue(self: &Arc<Self>, entries: impl IntoIterator<Item = QueueEntry>) {
        let mut inner = self.inner.lock();
        for mut entry in entries {
            inner.unacked = inner.unacked.saturating_sub(1);
            if inner.deleted {
                continue;
            }
            entry.redelivered = true;
            entry.acquired_count += 1;
            inner.messages.requeue(entry);
        }
        self.deliver_ready(&mut inner);
    }

    /// Adds a consumer; `ACCESS_REFUSED` if exclusivity forbids it. `on_added` runs once the
    /// consumer is accepted and before anything is delivered to it (to send `consume-ok`).
    pub(crate) fn add_consumer(
        self: &Arc<Self>,
        consumer: Arc<Consumer>,
        on_added: impl FnOnce(),
    ) -> BrokerResult<()> {
        let mut inner = self.inner.lock();
        if inner.deleted {
            return Err(BrokerError::NotFound(format!(
                "no queue '{}' in vhost '{}'",
                self.name, self.vhost
            )));
        }
        let exclusive_held = inner.consumers.iter().any(|c| c.exclusive);
        if exclusive_held || (consumer.exclusive && !inner.consumers.is_empty()) {
            return Err(BrokerError::AccessRefused(format!(
                "queue '{}' in vhost '{}' in exclusive use",
                self.name, self.vhost
            )));
        }
        on_added();
        let at = inner
            .consumers
            .iter()
            .position(|c| c.priority < consumer.priority)
            .unwrap_or(inner.consumers.len());
        inner.consumers.insert(at, consumer);
        inner.had_consumer = true;
        self.deliver_ready(&mut inner);
        Ok(())
    }

    /// Removes the consumer `tag` of `channel`.
    pub(crate) fn remove_consumer(
        &self,
        channel: &DeliveryChannel,
        tag: &ShortStr,
    ) -> ConsumerRemoved {
        let mut inner = self.inner.lock();
        let before = inner.consumers.len();
        inner
            .consumers
            .retain(|c| !(std::ptr::eq(&*c.channel, channel) && c.tag == *tag));
        let removed = inner.consumers.len() != before;
        ConsumerRemoved {
            should_auto_delete: removed
                && self.auto_delete
                && inner.had_consumer
                && inner.consumers.is_empty()
                && !inner.deleted,
        }
    }

    /// `basic.get`: hands the head message to `channel`; false when the queue is empty.
    pub(crate) fn get(self: &Arc<Self>, channel: &DeliveryChannel, no_ack: bool) -> bool {
        let mut inner = self.inner.lock();
        let Some(entry) = inner.messages.pop() else {
            return false;
        };
        let remaining = inner.messages.len() as u32;
        if !no_ack {
            inner.unacked += 1;
        }
        channel.deliver_get(self, entry, no_ack, remaining);
        true
    }

    /// Drops every ready message; returns how many.
    pub(crate) fn purge(&self) -> usize {
        self.inner.lock().messages.purge()
    }

    /// Ready messages (what `queue.declare-ok` reports).
    pub(crate) fn message_count(&self) -> usize {
        self.inner.lock().messages.len()
    }

    /// Consumers attached.
    pub(crate) fn consumer_count(&self) -> usize {
        self.inner.lock().consumers.len()
    }

    /// The consumers attached, in delivery priority order (the management API lists them).
    pub(crate) fn consumers(&self) -> Vec<Arc<Consumer>> {
        self.inner.lock().consumers.clone()
    }

    /// Delivered and not yet settled (the management API's `messages_unacknowledged`).
    pub(crate) fn unacked_count(&self) -> usize {
        self.inner.lock().unacked
    }

    /// The management API's get: takes up to `count` ready messages from the head, each with
    /// the number of ready messages left behind it, and with `requeue` puts them all back
    /// afterwards, marked redelivered, at their places (what RabbitMQ does: `basic.get` then
    /// `basic.reject` with requeue). Consumers are not involved and nothing stays unacked.
    pub(crate) fn take_for_inspection(
        self: &Arc<Self>,
        count: usize,
        requeue: bool,
    ) -> Vec<(QueueEntry, usize)> {
        let mut inner = self.inner.lock();
        let mut taken = Vec::new();
        while taken.len() < count {
            let Some(entry) = inner.messages.pop() else {
                break;
            };
            taken.push((entry, inner.messages.len()));
        }
        if requeue && !inner.deleted {
            for (entry, _) in &taken {
                let mut back = entry.clone();
                back.redelivered = true;
                back.acquired_count += 1;
                inner.messages.requeue(back);
            }
            self.deliver_ready(&mut inner);
        }
        taken
    }

    /// Whether the queue has been deleted (its consumers were cancelled by the server).
    pub(crate) fn is_deleted(&self) -> bool {
        self.inner.lock().deleted
    }

    /// Marks the queue deleted, drops its messages, and returns its consumers (to notify them).
    pub(crate) fn mark_deleted(&self) -> (usize, Vec<Arc<Consumer>>) {
        let mut inner = self.inner.lock();
        inner.deleted = true;
        let count = inner.messages.purge();
        (count, std::mem::take(&mut inner.consumers))
    }
}
