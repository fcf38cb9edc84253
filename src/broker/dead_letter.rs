//! Routing dead messages: to the dead-letter exchange, with their `x-death` history, into every
//! queue that does not close a cycle.

use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::arguments::parse_x_delay;
use dwellmq_core::dead_letter::{dead_letter, is_cycle};
use dwellmq_core::queue::{DeadLetterTarget, DeathReason};
use dwellmq_core::Message;

use super::exchange::ExchangeKind;
use super::runtime::Runtime;
use super::vhost::VHost;

/// Dead-letters `message`, which died in `queue` for `reason`. A dead-letter exchange that does
/// not exist drops it, as in RabbitMQ.
pub(crate) fn route(
    vhost: &Arc<VHost>,
    runtime: &Runtime,
    queue: &ShortStr,
    target: &DeadLetterTarget,
    message: &Message,
    reason: DeathReason,
    now_ms: u64,
) {
    let Ok(exchange) = vhost.exchange(&target.exchange) else {
        tracing::debug!(%queue, exchange = %target.exchange, "dead-letter exchange missing; message dropped");
        return;
    };
    let guard = runtime.memory.charge(message.body_len());
    let dead = dead_letter(
        message,
        queue,
        reason,
        target,
        now_ms,
        Some(Box::new(guard)),
    );
    let headers = dead.message.properties.headers.as_ref();
    if let ExchangeKind::Delayed(_) = exchange.kind {
        // Delayed by its x-delay unless that was already negated by an earlier release.
        if let Ok(delay) = parse_x_delay(headers) {
            if delay > 0 {
                let due = now_ms.saturating_add(delay as u64);
                if runtime.delayed.hold(vhost, &exchange, dead.message, due) {
                    runtime.timer.wake();
                }
                return;
            }
        }
    }
    let mut scratch = Vec::new();
    let mut targets = Vec::new();
    for key in &dead.routing_keys {
        vhost.route(&exchange, key, headers, &mut scratch, &mut targets);
    }
    for target_queue in targets {
        if is_cycle(&dead.message.deaths, &target_queue.name) {
            tracing::debug!(%queue, target = %target_queue.name, "dead-letter cycle; message dropped");
            continue;
        }
        target_queue.publish(Arc::clone(&dead.message));
    }
}
