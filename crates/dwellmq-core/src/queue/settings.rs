//! The settings a queue's behaviour depends on, from its arguments (and, later, policies).

use dwellmq_codec::ShortStr;

use crate::arguments::{DelayedRetry, Overflow, QueueArguments, QueueType};

/// When expired messages leave a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExpiryMode {
    /// At their deadline, wherever they are in the queue (dwellmq's default).
    #[default]
    OnTime,
    /// Only from the head of the queue, as RabbitMQ's classic queues do: a message waits behind
    /// an earlier one with a longer TTL (the "head-of-queue trap"), for exact fidelity.
    HeadOnly,
}

/// Where dead messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterTarget {
    /// `x-dead-letter-exchange` ("" is the default exchange).
    pub exchange: ShortStr,
    /// `x-dead-letter-routing-key`; `None` keeps the message's own routing keys.
    pub routing_key: Option<ShortStr>,
}

/// A queue's effective settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueSettings {
    /// `x-message-ttl`, milliseconds.
    pub message_ttl: Option<u64>,
    /// `x-expires`, milliseconds.
    pub expires: Option<u64>,
    /// `x-max-length`: ready messages.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes`: body bytes of ready messages.
    pub max_length_bytes: Option<u64>,
    /// `x-overflow`.
    pub overflow: Overflow,
    /// `x-dead-letter-exchange` and `-routing-key`.
    pub dead_letter: Option<DeadLetterTarget>,
    /// The broker's expiry mode.
    pub expiry_mode: ExpiryMode,
    /// `x-max-priority`.
    pub max_priority: u8,
    /// Whether the queue survives a restart (persistent messages then need the store).
    pub durable: bool,
    /// `x-queue-type`: quorum queues count deliveries, limit them and retry with a delay.
    pub queue_type: QueueType,
    /// Failed deliveries after which a message is dead-lettered (`delivery_limit`); quorum only.
    pub delivery_limit: Option<u64>,
    /// Linear delayed retries; quorum only.
    pub delayed_retry: DelayedRetry,
}

impl QueueSettings {
    /// Whether deliveries are counted (quorum queues).
    pub fn counts_deliveries(&self) -> bool {
        self.queue_type == QueueType::Quorum
    }
}

impl QueueSettings {
    /// Settings from validated arguments.
    pub fn from_arguments(args: &QueueArguments, durable: bool, expiry_mode: ExpiryMode) -> Self {
        QueueSettings {
            message_ttl: args.message_ttl,
            expires: args.expires,
            max_length: args.max_length,
            max_length_bytes: args.max_length_bytes,
            overflow: args.overflow,
            dead_letter: args
                .dead_letter_exchange
                .as_ref()
                .map(|exchange| DeadLetterTarget {
                    exchange: exchange.clone(),
                    routing_key: args.dead_letter_routing_key.clone(),
                }),
            expiry_mode,
            max_priority: args.max_priority.unwrap_or(0),
            durable,
            queue_type: args.queue_type,
            delivery_limit: args.effective_delivery_limit(None),
            delayed_retry: args.delayed_retry,
        }
    }
}
