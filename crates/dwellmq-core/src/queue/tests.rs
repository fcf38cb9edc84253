//! Scenario tests: declare, publish, advance time, assert the effects. No sockets.
//!
//! The scenarios are split by topic under `tests/`; the helpers they share are here.

mod consumers;
mod expiry;
mod limits;
mod persistence;
mod retries;

use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::{BasicProperties, ShortStr};

use super::*;
use crate::arguments::Overflow;

/// Consumers are named by a number in these tests.
type Q = QueueState<u32>;

fn message(body: &'static str, expiration: Option<&str>) -> Arc<Message> {
    Message::new(
        "ex".into(),
        "key".into(),
        BasicProperties {
            expiration: expiration.map(ShortStr::from),
            ..Default::default()
        },
        Bytes::from_static(body.as_bytes()).into(),
        None,
    )
}

fn dlx() -> Option<DeadLetterTarget> {
    Some(DeadLetterTarget {
        exchange: "dlx".into(),
        routing_key: None,
    })
}

fn channel() -> Arc<ChannelCredit> {
    Arc::new(ChannelCredit::new(Arc::new(Congestion::default())))
}

fn slot(id: u32, prefetch: u32) -> ConsumerSlot<u32> {
    ConsumerSlot {
        id: u64::from(id),
        handle: id,
        priority: 0,
        exclusive: false,
        credit: Arc::new(ConsumerCredit::new(channel(), prefetch, false)),
    }
}

/// A compact view of effects: ("deliver", consumer, body) / ("dead", reason, body) / ...
fn summary(fx: &mut Effects<u32>) -> Vec<String> {
    fx.drain()
        .map(|e| match e {
            Effect::Deliver {
                consumer,
                entry,
                forget,
            } => format!(
                "deliver {consumer} {}{}",
                body(&entry.message),
                if forget { " then forget" } else { "" }
            ),
            Effect::DeadLetter { message, reason } => {
                format!("dead {} {}", reason.name(), body(&message))
            }
            Effect::Dropped { reason } => format!("dropped {}", reason.name()),
            Effect::Arm { at_ms } => format!("arm {at_ms}"),
            Effect::Expire => "expire".into(),
            Effect::Persist { seq, delivered, .. } => {
                format!("persist {seq}{}", if delivered { " delivered" } else { "" })
            }
            Effect::SetState { seq, state } => format!(
                "state {seq} redelivered={} count={} acquired={} ready_at={:?}",
                state.redelivered, state.delivery_count, state.acquired_count, state.ready_at
            ),
            Effect::Forget { seq } => format!("forget {seq}"),
            Effect::ForgetRun { from_seq, end_seq } => format!("forget run {from_seq}..{end_seq}"),
            Effect::Spill { seq, .. } => format!("spill {seq}"),
            Effect::Unspill { from_seq, end_seq } => format!("unspill {from_seq}..{end_seq}"),
            Effect::Rewrite { seq, .. } => format!("rewrite {seq}"),
            Effect::RemovalsMark { mark } => format!("removals {mark}"),
        })
        .collect()
}

fn body(m: &Message) -> String {
    String::from_utf8_lossy(&m.body.chunks()[0]).into_owned()
}

fn persistent(body: &'static str) -> Arc<Message> {
    Message::new(
        "".into(),
        "q".into(),
        BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        },
        Bytes::from_static(body.as_bytes()).into(),
        None,
    )
}

fn quorum(retry: crate::arguments::DelayedRetry, limit: Option<u64>) -> Q {
    Q::new(
        QueueSettings {
            queue_type: crate::arguments::QueueType::Quorum,
            delivery_limit: limit,
            delayed_retry: retry,
            dead_letter: dlx(),
            durable: true,
            ..Default::default()
        },
        false,
        0,
    )
}

fn retry(
    kind: crate::arguments::RetryKind,
    min_ms: u64,
    max_ms: u64,
) -> crate::arguments::DelayedRetry {
    crate::arguments::DelayedRetry {
        kind,
        min_ms,
        max_ms,
    }
}
