//! Direct reply-to: RabbitMQ's `amq.rabbitmq.reply-to` pseudo-queue for RPC replies.
//!
//! A client consumes (no-ack) from `amq.rabbitmq.reply-to` on a channel; a request it publishes
//! on that channel with `reply_to = amq.rabbitmq.reply-to` leaves with `reply_to` rewritten to
//! `amq.rabbitmq.reply-to.<token>`; whoever publishes the reply to the default exchange with
//! that routing key reaches the consumer directly, with no queue in between. Tokens come from
//! the OS's CSPRNG (see `names`) so that one client cannot guess another's reply address.

use std::collections::HashMap;
use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::{BrokerResult, Message};
use parking_lot::Mutex;

use super::names::NameGenerator;
use super::queue::consumer::DeliverySink;

/// The pseudo-queue a reply consumer consumes from.
pub(crate) const REPLY_QUEUE: &str = "amq.rabbitmq.reply-to";

/// The prefix of every reply address.
pub(crate) const REPLY_PREFIX: &str = "amq.rabbitmq.reply-to.";

/// Whether `name` is the pseudo-queue or a reply address.
pub(crate) fn is_reply_name(name: &str) -> bool {
    name == REPLY_QUEUE || name.starts_with(REPLY_PREFIX)
}

struct ReplyConsumer {
    channel: Arc<dyn DeliverySink>,
    tag: ShortStr,
}

/// Every reply consumer of the broker, by reply address.
pub(crate) struct ReplyConsumers {
    by_address: Mutex<HashMap<ShortStr, ReplyConsumer>>,
    names: Arc<NameGenerator>,
}

impl ReplyConsumers {
    pub(crate) fn new(names: Arc<NameGenerator>) -> Self {
        ReplyConsumers {
            by_address: Mutex::default(),
            names,
        }
    }

    /// Registers a reply consumer; returns its reply address.
    pub(crate) fn register(
        &self,
        channel: Arc<dyn DeliverySink>,
        tag: ShortStr,
    ) -> BrokerResult<ShortStr> {
        let address = ShortStr::from(self.names.generate(REPLY_PREFIX)?);
        self.by_address
            .lock()
            .insert(address.clone(), ReplyConsumer { channel, tag });
        Ok(address)
    }

    /// Forgets a reply consumer (cancelled, or its channel closed).
    pub(crate) fn unregister(&self, address: &ShortStr) {
        self.by_address.lock().remove(address);
    }

    /// Whether `address` (the pseudo-queue itself, or a reply address) has a consumer.
    pub(crate) fn exists(&self, address: &str) -> bool {
        address == REPLY_QUEUE || self.by_address.lock().contains_key(address)
    }

    /// Delivers a reply published to `address`; false if nobody consumes there.
    pub(crate) fn deliver(&self, address: &str, message: &Message) -> bool {
        let consumers = self.by_address.lock();
        match consumers.get(address) {
            Some(consumer) => consumer.channel.deliver_reply(&consumer.tag, message),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_names() {
        assert!(is_reply_name("amq.rabbitmq.reply-to"));
        assert!(is_reply_name("amq.rabbitmq.reply-to.abc"));
        assert!(!is_reply_name("amq.rabbitmq.reply-toX"));
        assert!(!is_reply_name("orders"));
    }
}
