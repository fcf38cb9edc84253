//! Routing dead messages: to the dead-letter exchange, with their `x-death` history, into every
//! queue that does not close a cycle.

use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::arguments::parse_x_delay;
use dwellmq_core::dead_letter::dead_letter;
use dwellmq_core::queue::{DeadLetterTarget, DeathReason};
use dwellmq_core::Message;

use super::publish::{self, Outgoing};
use super::runtime::Runtime;
use super::vhost::{Routing, VHost};

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
    let guard = runtime.memory.charge_message(message.body_len());
    let dead = dead_letter(
        message,
        queue,
        reason,
        target,
        now_ms,
        Some(Box::new(guard)),
    );
    // A delayed exchange on the way holds it for its x-delay, unless an earlier release has
    // already negated that.
    let delay = parse_x_delay(dead.message.properties.headers.as_ref()).unwrap_or(0);
    let Some((key, extra_keys)) = dead.routing_keys.split_first() else {
        return;
    };
    let outgoing = Outgoing {
        exchange: &exchange,
        message: &dead.message,
        routing_key: key,
        extra_keys,
        bcc: None,
        hold_until: (delay > 0).then(|| now_ms.saturating_add(delay.unsigned_abs())),
        mandatory: false,
        dead_lettered: true,
    };
    // What the source queue's store group holds (see `Queue::run_with`): the copies commit
    // with the removal from the source.
    let mut routing = Routing::default();
    publish::route_and_enqueue(runtime, vhost, outgoing, &mut routing, None);
}
