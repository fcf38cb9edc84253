//! Routing dead messages: to the dead-letter exchange, with their `x-death` history, into every
//! queue that does not close a cycle, through the one publish pipeline. With at-least-once
//! dead-lettering the source queue keeps what not every target took
//! (`queue::kept_dead_letters`), and a retry skips the targets that took it already.

use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::arguments::parse_x_delay;
use dwellmq_core::dead_letter::dead_letter;
use dwellmq_core::queue::{DeadLetterTarget, DeathReason};
use dwellmq_core::Message;

use crate::broker::publish::{self, Outgoing};
use crate::broker::queue::kept_dead_letters::{Attempts, PendingDeadLetter};
use crate::broker::queue::{Died, Queue, QueueOwner};
use crate::broker::vhost::{Routing as Routed, VHost};

/// Dead letters of one queue, on their way to its dead-letter target at `now_ms`.
pub(super) struct Routing<'a> {
    pub(super) vhost: &'a VHost,
    pub(super) queue: &'a Arc<Queue>,
    pub(super) target: &'a DeadLetterTarget,
    pub(super) now_ms: u64,
}

impl Routing<'_> {
    /// Routes the messages that died in a command: once each (a dead-letter exchange that
    /// does not exist drops them, as in RabbitMQ), or at least once.
    pub(super) fn dead(&self, dead: Vec<Died>, at_least_once: bool) {
        let Some(vhost) = self.vhost.me().upgrade() else {
            return;
        };
        let deaths = &self.vhost.runtime().queues.deaths;
        if at_least_once {
            let pending = dead
                .into_iter()
                .map(|died| {
                    deaths.dead_lettered(died.reason);
                    PendingDeadLetter {
                        message: died.message,
                        reason: died.reason,
                        died_at_ms: self.now_ms,
                        seq: died.seq,
                        taken_by: Vec::new(),
                    }
                })
                .collect();
            self.attempt_at_least_once(pending, true);
            return;
        }
        for Died {
            message, reason, ..
        } in dead
        {
            deaths.dead_lettered(reason);
            attempt(self.death(&vhost, &message, reason, self.now_ms), None);
        }
    }

    /// Routes dead letters at least once (`first`: at their death; otherwise kept ones
    /// retried): each skips the targets that took it already; the queue keeps what not every
    /// target took, and a retry is armed when none was.
    pub(super) fn attempt_at_least_once(&self, pending: Vec<PendingDeadLetter>, first: bool) {
        let Some(vhost) = self.vhost.me().upgrade() else {
            return;
        };
        let mut attempts = Attempts {
            first,
            ..Attempts::default()
        };
        for mut p in pending {
            let death = self.death(&vhost, &p.message, p.reason, p.died_at_ms);
            if attempt_once_each(death, &mut p.taken_by) {
                attempts.through.extend(p.seq);
            } else {
                attempts.kept.push(p);
            }
        }
        let queue = self.queue;
        if let Some(at_ms) = queue.settle_dead_letter_attempts(attempts, self.now_ms) {
            self.vhost.note_keeping_dead_letters(queue);
            // The scheduler wakes its timer itself when this is its earliest deadline.
            let scheduler = &self.vhost.runtime().scheduler;
            queue.arm(scheduler, QueueOwner::weak(self.vhost), at_ms);
        }
    }

    fn death<'a>(
        &'a self,
        vhost: &'a Arc<VHost>,
        message: &'a Message,
        reason: DeathReason,
        at_ms: u64,
    ) -> Death<'a> {
        Death {
            vhost,
            queue: &self.queue.name,
            target: self.target,
            message,
            reason,
            at_ms,
        }
    }
}

/// A message that died in `queue` for `reason` at `at_ms`, and where it goes.
struct Death<'a> {
    vhost: &'a Arc<VHost>,
    queue: &'a ShortStr,
    target: &'a DeadLetterTarget,
    message: &'a Message,
    reason: DeathReason,
    at_ms: u64,
}

/// An at-least-once dead-lettering's attempt: as [`attempt`], skipping the queues in `taken`
/// (which took it at an earlier attempt) and adding those that take it now. Returns whether
/// it got through: no target refused it and a queue (or a delayed exchange) has it, or every
/// queue it would reach closes a cycle (dropped, as RabbitMQ's dead-letter worker drops it).
/// A missing dead-letter exchange, or one that routes it nowhere, means a retry.
fn attempt_once_each(death: Death<'_>, taken: &mut Vec<ShortStr>) -> bool {
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
    let guard = vhost
        .runtime()
        .queues
        .memory
        .charge_message(message.body_len());
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
    // What the source queue's store group holds (see `Aftermath::group`): the copies commit
    // with the removal from the source.
    let mut routing = Routed::default();
    Some(match taken {
        None => publish::route_and_enqueue(vhost, outgoing, &mut routing, None),
        Some(taken) => publish::route_and_enqueue_once_each(vhost, outgoing, &mut routing, taken),
    })
}
