//! The settings a queue's behaviour depends on, from its arguments (and, later, policies).

use dwellmq_codec::ShortStr;

use crate::arguments::{
    DeadLetterStrategy, DelayedRetry, Overflow, QueueArguments, QueueType, RetryKind,
};
use crate::policy::PolicyDefinition;

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
    /// Dead-lettering at least once: a quorum queue with a dead-letter exchange, overflow
    /// `reject-publish` and `dead-letter-strategy` `at-least-once` (RabbitMQ's `dlh/5`; any
    /// other combination dead-letters at most once).
    pub dead_letter_at_least_once: bool,
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
    /// `x-single-active-consumer`: only the longest-subscribed consumer receives messages.
    pub single_active_consumer: bool,
}

impl QueueSettings {
    /// Whether `message` is kept in the store while it is in this queue: a persistent message
    /// in a durable queue, and every message in a quorum queue (RabbitMQ's quorum queues keep
    /// every message, whatever its delivery mode).
    pub fn persists(&self, message: &crate::Message) -> bool {
        self.durable && (message.is_persistent() || self.queue_type == QueueType::Quorum)
    }

    /// Whether deliveries are counted (quorum queues).
    pub fn counts_deliveries(&self) -> bool {
        self.queue_type == QueueType::Quorum
    }
}

fn lower(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl QueueSettings {
    /// Settings from validated arguments and the policy that applies, combined as RabbitMQ
    /// does: the lower of argument and policy for TTLs, expiry, length limits and retry
    /// delays; the argument first for the dead-letter target and strategy, and for a classic
    /// queue's overflow mode; the policy first for a quorum queue's overflow mode and the retry
    /// type; RabbitMQ's rule for the delivery limit. `overflow_given` says whether
    /// `x-overflow` was among the arguments (its parsed value has a default).
    pub fn effective(
        args: &QueueArguments,
        overflow_given: bool,
        durable: bool,
        expiry_mode: ExpiryMode,
        policy: Option<&PolicyDefinition>,
    ) -> Self {
        let mut s = Self::from_arguments(args, durable, expiry_mode);
        let Some(p) = policy else {
            return s;
        };
        s.message_ttl = lower(s.message_ttl, p.message_ttl);
        s.expires = lower(s.expires, p.expires);
        s.max_length = lower(s.max_length, p.max_length);
        s.max_length_bytes = lower(s.max_length_bytes, p.max_length_bytes);
        match (s.queue_type, p.overflow) {
            // A quorum queue takes the policy's overflow over its argument, and refuses
            // `reject-publish-dlx` for the default (RabbitMQ's `policy_has_precedence` and
            // `overflow/3`).
            (QueueType::Quorum, Some(Overflow::RejectPublishDlx)) => {
                s.overflow = Overflow::DropHead
            }
            (QueueType::Quorum, Some(overflow)) => s.overflow = overflow,
            (QueueType::Classic, Some(overflow)) if !overflow_given => s.overflow = overflow,
            _ => {}
        }
        if args.dead_letter_exchange.is_none() {
            s.dead_letter = p
                .dead_letter_exchange
                .as_ref()
                .map(|exchange| DeadLetterTarget {
                    exchange: exchange.clone(),
                    routing_key: p.dead_letter_routing_key.clone(),
                });
        } else if let Some(target) = &mut s.dead_letter {
            if target.routing_key.is_none() {
                target.routing_key = p.dead_letter_routing_key.clone();
            }
        }
        s.dead_letter_at_least_once =
            s.dead_letters_at_least_once(args.dead_letter_strategy.or(p.dead_letter_strategy));
        s.delivery_limit = args.effective_delivery_limit(p.delivery_limit);
        let arg = args.delayed_retry;
        let arg_min = (arg.min_ms > 0).then_some(arg.min_ms);
        let arg_max = arg_min.map(|_| arg.max_ms);
        let kind = p.delayed_retry_type.unwrap_or(arg.kind);
        let min_ms = lower(arg_min, p.delayed_retry_min).unwrap_or(0);
        let max_ms = lower(arg_max, p.delayed_retry_max)
            .unwrap_or(min_ms)
            .max(min_ms);
        s.delayed_retry = DelayedRetry {
            kind: if min_ms == 0 {
                RetryKind::Disabled
            } else {
                kind
            },
            min_ms,
            max_ms,
        };
        s
    }

    /// Settings from validated arguments.
    pub fn from_arguments(args: &QueueArguments, durable: bool, expiry_mode: ExpiryMode) -> Self {
        let mut s = QueueSettings {
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
            single_active_consumer: args.single_active_consumer,
            dead_letter_at_least_once: false,
        };
        s.dead_letter_at_least_once = s.dead_letters_at_least_once(args.dead_letter_strategy);
        s
    }

    /// Whether `strategy` (the argument's, else the policy's) dead-letters at least once with
    /// the rest of these settings.
    fn dead_letters_at_least_once(&self, strategy: Option<DeadLetterStrategy>) -> bool {
        self.queue_type == QueueType::Quorum
            && self.dead_letter.is_some()
            && self.overflow == Overflow::RejectPublish
            && strategy == Some(DeadLetterStrategy::AtLeastOnce)
    }
}

#[cfg(test)]
mod tests {
    use dwellmq_codec::{FieldTable, FieldValue};

    use super::*;
    use crate::arguments::parse_queue_arguments;

    fn settings(args: &[(&str, &str)], policy: &[(&str, &str)]) -> QueueSettings {
        let mut table = FieldTable::default();
        table.insert("x-queue-type", "quorum");
        for (key, value) in args {
            table.insert(*key, FieldValue::LongStr(value.as_bytes().to_vec().into()));
        }
        let parsed = parse_queue_arguments("q", "/", &table, true, false, false).unwrap();
        let policy = PolicyDefinition::from_entries(
            policy
                .iter()
                .map(|(k, v)| (*k, crate::policy::PolicyValue::Text((*v).into()))),
        )
        .unwrap();
        QueueSettings::effective(
            &parsed,
            table.contains_key("x-overflow"),
            true,
            ExpiryMode::OnTime,
            Some(&policy),
        )
    }

    #[test]
    fn a_quorum_queue_takes_the_policys_overflow_over_its_argument() {
        let s = settings(
            &[("x-overflow", "drop-head")],
            &[("overflow", "reject-publish")],
        );
        assert_eq!(s.overflow, Overflow::RejectPublish);
        let s = settings(
            &[("x-overflow", "reject-publish")],
            &[("overflow", "reject-publish-dlx")],
        );
        assert_eq!(s.overflow, Overflow::DropHead, "not a quorum queue's mode");
    }

    #[test]
    fn at_least_once_needs_a_dead_letter_exchange_reject_publish_and_the_strategy() {
        let all = [
            ("dead-letter-exchange", "dlx"),
            ("overflow", "reject-publish"),
            ("dead-letter-strategy", "at-least-once"),
        ];
        assert!(settings(&[], &all).dead_letter_at_least_once);
        for missing in 0..all.len() {
            let mut some = all.to_vec();
            some.remove(missing);
            assert!(!settings(&[], &some).dead_letter_at_least_once, "{some:?}");
        }
        // The argument's strategy wins over the policy's.
        let s = settings(&[("x-dead-letter-strategy", "at-most-once")], &all);
        assert!(!s.dead_letter_at_least_once);
        let s = settings(&[("x-dead-letter-strategy", "at-least-once")], &all[..2]);
        assert!(s.dead_letter_at_least_once);
    }
}
