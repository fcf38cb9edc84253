//! Routing dead messages: to the dead-letter exchange, with their `x-death` history, into every
//! queue that does not close a cycle. At-least-once dead-lettering keeps in its source what not
//! every target took ([`pending`]).

pub(crate) mod pending;

use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::arguments::parse_x_delay;
use dwellmq_core::dead_letter::dead_letter;
use dwellmq_core::queue::{DeadLetterTarget, DeathReason};
use dwellmq_core::Message;

use super::publish::{self, Outgoing};
use super::runtime::Runtime;
use super::vhost::{Routing, VHost};

/// A message that died in `queue` for `reason` at `at_ms`, and where it goes.
pub(crate) struct Death<'a> {
    pub(crate) vhost: &'a Arc<VHost>,
    pub(crate) runtime: &'a Runtime,
    pub(crate) queue: &'a ShortStr,
    pub(crate) target: &'a DeadLetterTarget,
    pub(crate) message: &'a Message,
    pub(crate) reason: DeathReason,
    pub(crate) at_ms: u64,
}

/// Dead-letters a message. A dead-letter exchange that does not exist drops it, as in
/// RabbitMQ.
pub(crate) fn route(death: Death<'_>) {
    attempt(death, None);
}

/// An at-least-once dead-lettering's attempt: as [`route`], skipping the queues in `taken` (which
/// took it at an earlier attempt) and adding those that take it now. Returns whether it got
/// through: no target refused it and a queue (or a delayed exchange) has it, or every queue it
/// would reach closes a cycle (dropped, as RabbitMQ's dead-letter worker drops it). A missing
/// dead-letter exchange, or one that routes it nowhere, means a retry.
pub(crate) fn attempt_once_each(death: Death<'_>, taken: &mut Vec<ShortStr>) -> bool {
    let taken_before = taken.len();
    let Some(outcome) = attempt(death, Some(taken)) else {
        return false;
    };
    !outcome.rejected && (outcome.routed || outcome.cycled || taken_before > 0)
}

/// Routes the dead copy of the message; `None` when the dead-letter exchange is missing.
fn attempt(death: Death<'_>, taken: Option<&mut Vec<ShortStr>>) -> Option<publish::Outcome> {
    let Death {
        vhost,
        runtime,
        queue,
        target,
        message,
        reason,
        at_ms: now_ms,
    } = death;
    let Ok(exchange) = vhost.exchange(&target.exchange) else {
        tracing::debug!(%queue, exchange = %target.exchange, "dead-letter exchange missing");
        return None;
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
        // No key to route by: no retry could place it either.
        return Some(publish::Outcome {
            cycled: true,
            ..publish::Outcome::default()
        });
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
    Some(match taken {
        None => publish::route_and_enqueue(runtime, vhost, outgoing, &mut routing, None),
        Some(taken) => {
            publish::route_and_enqueue_once_each(runtime, vhost, outgoing, &mut routing, taken)
        }
    })
}
