//! One publish pipeline, whoever publishes (`basic.publish` on a channel, `POST
//! /api/exchanges/.../publish` over HTTP, a queue dead-lettering, a delayed exchange
//! releasing).
//!
//! Before routing, a publish from a client (`basic.publish` or HTTP) takes the same steps,
//! written once in [`accept`] (and [`check_size`], which a channel applies to the content
//! header before the body arrives): the size limit, the exchange may be published to, the
//! properties are the publisher's own, a direct reply-to request gets the publisher's reply
//! address, the delay is read as the exchange reads it, the `CC` and `BCC` headers give extra
//! routing keys and `BCC` leaves the message, and a copy that a delayed exchange holds keeps
//! `BCC` to route by it at release. Then [`route_and_enqueue`] is the one way on for every
//! caller: route (core's walk of the exchange graph), a mandatory message no queue would take
//! returned, hold at the delayed exchanges on the way, enqueue, the store ticket that holds a
//! confirm until the stored copies commit.

use std::sync::Arc;

use dwellmq_codec::{BasicProperties, FieldValue, ShortStr};
use dwellmq_core::dead_letter::is_cycle;
use dwellmq_core::routing::{bcc_keys, extra_routing_keys, BCC};
use dwellmq_core::{arguments, Body, BrokerError, BrokerResult, Message};

use dwellmq_core::queue::PublishOutcome;

use super::exchange::{Exchange, ExchangeKind};
use super::memory::MemoryMonitor;
use super::queue::QueueOwner;
use super::reply_to::{REPLY_PREFIX, REPLY_QUEUE};
use super::tickets::PublishTicket;
use super::vhost::{Routing, VHost};

/// A publish ready to route.
pub(crate) struct Prepared {
    /// The message as queues get it (without `BCC`).
    pub(crate) message: Arc<Message>,
    /// Milliseconds a delayed exchange on the message's way holds it (0 = route now).
    pub(crate) delay_ms: u64,
    /// Routing keys from the `CC` and `BCC` headers.
    pub(crate) extra_keys: Vec<ShortStr>,
    /// The `BCC` header, taken off `message`.
    pub(crate) bcc: Option<FieldValue>,
}

/// What a client publishes, before the broker's checks.
pub(crate) struct Submitted<'a> {
    /// The exchange's name as published.
    pub(crate) exchange: ShortStr,
    pub(crate) routing_key: ShortStr,
    pub(crate) properties: BasicProperties,
    pub(crate) body: Body,
    /// The authenticated user (`user_id` must be theirs).
    pub(crate) user: &'a str,
    /// The publisher's direct reply-to address: a channel's, if it consumes from
    /// `amq.rabbitmq.reply-to`; never one over HTTP.
    pub(crate) reply_address: Option<&'a ShortStr>,
}

/// The size limit (`Limits::max_message_size`): `size` octets of body may be published. A
/// channel applies it to the content header, before the body arrives; HTTP to the body.
pub(crate) fn check_size(size: u64, max: u64) -> BrokerResult<()> {
    if size > max {
        return Err(BrokerError::PreconditionFailed(format!(
            "message size {size} is larger than configured max size {max}"
        )));
    }
    Ok(())
}

/// The steps every publish from a client takes before routing, its size checked already (see
/// the module's text): returns the exchange it enters by and the message ready to route.
pub(crate) fn accept(
    vhost: &VHost,
    submitted: Submitted<'_>,
) -> BrokerResult<(Arc<Exchange>, Prepared)> {
    let Submitted {
        exchange,
        routing_key,
        mut properties,
        body,
        user,
        reply_address,
    } = submitted;
    let target = target(vhost, &exchange)?;
    check_properties(&properties, user)?;
    resolve_reply_to(&mut properties, reply_address)?;
    let memory = &vhost.runtime().queues.memory;
    let prepared = prepare(memory, &target, exchange, routing_key, properties, body)?;
    Ok((target, prepared))
}

/// The exchange to publish to: it must exist and not be internal.
fn target(vhost: &VHost, exchange: &str) -> BrokerResult<Arc<Exchange>> {
    let target = vhost.exchange(exchange)?;
    if target.internal {
        return Err(BrokerError::AccessRefused(format!(
            "cannot publish to internal exchange '{}' in vhost '{}'",
            target.name, vhost.name
        )));
    }
    Ok(target)
}

/// The properties RabbitMQ checks: `user_id` must be the publisher's, `expiration` must be a
/// TTL.
fn check_properties(properties: &BasicProperties, user: &str) -> BrokerResult<()> {
    if let Some(user_id) = &properties.user_id {
        if user_id.as_str() != user {
            return Err(BrokerError::PreconditionFailed(format!(
                "user_id property set to '{user_id}' but authenticated user was '{user}'"
            )));
        }
    }
    if let Some(expiration) = &properties.expiration {
        arguments::parse_expiration(expiration)?;
    }
    Ok(())
}

/// Direct reply-to, the request's side: `reply_to = amq.rabbitmq.reply-to` becomes the
/// publisher's reply address, which only a channel consuming from the pseudo-queue has (over
/// HTTP there is none); without one the publish is refused, as RabbitMQ refuses it.
fn resolve_reply_to(
    properties: &mut BasicProperties,
    reply_address: Option<&ShortStr>,
) -> BrokerResult<()> {
    if properties.reply_to.as_deref() != Some(REPLY_QUEUE) {
        return Ok(());
    }
    let address = reply_address.ok_or_else(|| {
        BrokerError::PreconditionFailed("fast reply consumer does not exist".into())
    })?;
    properties.reply_to = Some(address.clone());
    Ok(())
}

/// Builds the message of a publish to `exchange` (named `exchange_name` as published). A
/// delayed exchange refuses an `x-delay` it cannot read; any other exchange ignores one (a
/// delayed exchange behind it reads it as no delay). A `CC` or `BCC` header that is not an
/// array is refused.
fn prepare(
    memory: &Arc<MemoryMonitor>,
    exchange: &Exchange,
    exchange_name: ShortStr,
    routing_key: ShortStr,
    mut properties: BasicProperties,
    body: Body,
) -> BrokerResult<Prepared> {
    let headers = properties.headers.as_ref();
    let delay = match exchange.kind {
        ExchangeKind::Delayed(_) => arguments::parse_x_delay(headers)?,
        // A delayed exchange may lie behind this one (an exchange-to-exchange binding);
        // a header it could not read means no delay there.
        ExchangeKind::Standard(_) => arguments::parse_x_delay(headers).unwrap_or(0),
    };
    // The header is left as published: the holder writes the negated delay at release, so
    // that a `basic.return` now shows the message exactly as it was sent.
    let delay_ms = u64::try_from(delay).unwrap_or(0);
    let extra_keys = extra_routing_keys(headers)?;
    let bcc = properties.headers.as_mut().and_then(|h| h.remove(BCC));
    let charge = memory.charge_message(body.len());
    let message = Message::with_bcc(
        exchange_name,
        routing_key,
        properties,
        body,
        Some(Box::new(charge)),
        bcc.as_ref().map(bcc_keys).unwrap_or_default(),
    );
    Ok(Prepared {
        message,
        delay_ms,
        extra_keys,
        bcc,
    })
}

/// The copy a delayed exchange holds: with its `BCC` header back, so that the release routes
/// by it too (the header leaves the message then, as now).
pub(crate) fn held_copy(
    memory: &Arc<MemoryMonitor>,
    message: &Arc<Message>,
    bcc: Option<&FieldValue>,
) -> Arc<Message> {
    let Some(bcc) = bcc else {
        return Arc::clone(message);
    };
    let mut properties = message.properties.clone();
    if let Some(headers) = properties.headers.as_mut() {
        headers.insert(BCC, bcc.clone());
    }
    let charge = memory.charge_message(message.body_len());
    Message::new(
        message.exchange.clone(),
        message.routing_key.clone(),
        properties,
        message.body.clone(),
        Some(Box::new(charge)),
    )
}

/// Whether a publish routed as `routing` has copies the store must write before its confirm:
/// a persistent message's in durable queues, any message's held by durable delayed exchanges
/// or in quorum queues (which keep every message).
pub(crate) fn stores_copies(message: &Message, routing: &Routing) -> bool {
    message.is_persistent()
        || !routing.delayed.is_empty()
        || routing.queues.iter().any(|q| q.keeps_every_message())
}

/// Hands a routed message on, draining `routing`: each delayed exchange on its way holds the
/// copy that keeps `bcc`, due at `due_ms`; each queue takes the message (an injected delivery
/// delay makes a queue take it later). Copies the store writes count on `ticket`; each queue
/// that takes it is added to `taken` (an at-least-once dead-lettering's attempt). Returns
/// whether a queue refused it (`x-overflow` = reject-publish: the publisher hears a nack).
/// Every way into queues goes through here, by [`route_and_enqueue`]: a publish on a channel
/// or over HTTP, a dead-lettering, a delayed exchange's release.
fn enqueue(
    vhost: &Arc<VHost>,
    message: &Arc<Message>,
    bcc: Option<&FieldValue>,
    due_ms: u64,
    routing: &mut Routing,
    ticket: Option<&Arc<PublishTicket>>,
    mut taken: Option<&mut Vec<ShortStr>>,
) -> bool {
    let runtime = vhost.runtime();
    let services = &runtime.queues;
    if !routing.delayed.is_empty() {
        // The queues are chosen again at release, from the bindings as they are then.
        let held = held_copy(&services.memory, message, bcc);
        for exchange in routing.delayed.drain(..) {
            let held = Arc::clone(&held);
            vhost.held().hold(vhost, &exchange, held, due_ms, ticket);
        }
    }
    let mut rejected = false;
    for queue in routing.queues.drain(..) {
        if let Some(delay) = services.hooks.delivery_delay(&queue.vhost, &queue.name) {
            // An injected fault: the message enters the queue later, in broker time.
            let due_ms = services.clock.now_ms().saturating_add(delay.delay_ms);
            let held = Arc::clone(message);
            let owner = QueueOwner::weak(&**vhost);
            queue.deliver_later(&runtime.scheduler, owner, held, due_ms, &delay.pending);
            if let Some(taken) = taken.as_deref_mut() {
                taken.push(queue.name.clone());
            }
            continue;
        }
        let outcome = queue.publish_confirmed(&**vhost, Arc::clone(message), ticket);
        if outcome == PublishOutcome::Rejected {
            rejected = true;
        } else if let Some(taken) = taken.as_deref_mut() {
            taken.push(queue.name.clone());
        }
    }
    rejected
}

/// A message on its way in through an exchange, as [`route_and_enqueue`] takes it.
pub(crate) struct Outgoing<'a> {
    /// The exchange it enters by.
    pub(crate) exchange: &'a Arc<Exchange>,
    /// The message as queues take it (without `BCC`).
    pub(crate) message: &'a Arc<Message>,
    /// The key it is routed by.
    pub(crate) routing_key: &'a str,
    /// The `CC` and `BCC` keys it is routed by too.
    pub(crate) extra_keys: &'a [ShortStr],
    /// The `BCC` header, which a held copy keeps for its release.
    pub(crate) bcc: Option<&'a FieldValue>,
    /// When it is due, for a message with a positive delay: each delayed exchange it reaches
    /// holds it until then. `None` routes it straight through delayed exchanges (no delay, or
    /// a release).
    pub(crate) hold_until: Option<u64>,
    /// `basic.publish`'s `mandatory`: a message no queue would take, now or at release, is
    /// returned rather than held or dropped.
    pub(crate) mandatory: bool,
    /// A dead-lettering: queues already in the message's death history that would close a
    /// cycle are skipped (RabbitMQ's `rabbit_dead_letter:detect_cycles`).
    pub(crate) dead_lettered: bool,
}

/// What became of a message handed to [`route_and_enqueue`].
#[derive(Default)]
pub(crate) struct Outcome {
    /// It reached a queue, or a holder behind which a queue would take it at release.
    pub(crate) routed: bool,
    /// Mandatory and unroutable: nothing took it; the publisher hears `basic.return`.
    pub(crate) returned: bool,
    /// Unroutable and dropped now (not returned, and no delayed exchange holds it: a held
    /// message's route is decided, and counted, at its release).
    pub(crate) dropped: bool,
    /// A queue refused it (`x-overflow` = reject-publish): a confirm is a nack.
    pub(crate) rejected: bool,
    /// A dead-lettering that skipped a queue because it would close a cycle.
    pub(crate) cycled: bool,
    /// The store ticket its stored copies count on, when the caller asked for one and there
    /// are such copies.
    pub(crate) ticket: Option<Arc<PublishTicket>>,
}

/// The one way from an exchange into queues, for every publisher: routes `outgoing` through
/// the exchange graph (reusing `routing`'s buffers), returns a mandatory message that nothing
/// would take, lets each delayed exchange on its way hold it, and has each queue take it. With
/// a store, a message whose copies the store writes ([`stores_copies`]) gets the ticket that
/// `ticket` makes (a confirm, a transaction's commit), and its copies count on it; the caller
/// settles the ticket.
pub(crate) fn route_and_enqueue(
    vhost: &Arc<VHost>,
    outgoing: Outgoing<'_>,
    routing: &mut Routing,
    ticket: Option<&mut dyn FnMut() -> Arc<PublishTicket>>,
) -> Outcome {
    route_and_enqueue_skipping(vhost, outgoing, routing, ticket, None)
}

/// As [`route_and_enqueue`], for an at-least-once dead-lettering's attempt: queues named in
/// `taken` took the message at an earlier attempt and are skipped; each queue that takes it
/// now is added.
pub(crate) fn route_and_enqueue_once_each(
    vhost: &Arc<VHost>,
    outgoing: Outgoing<'_>,
    routing: &mut Routing,
    taken: &mut Vec<ShortStr>,
) -> Outcome {
    route_and_enqueue_skipping(vhost, outgoing, routing, None, Some(taken))
}

fn route_and_enqueue_skipping(
    vhost: &Arc<VHost>,
    outgoing: Outgoing<'_>,
    routing: &mut Routing,
    ticket: Option<&mut dyn FnMut() -> Arc<PublishTicket>>,
    taken: Option<&mut Vec<ShortStr>>,
) -> Outcome {
    let Outgoing {
        exchange,
        message,
        routing_key,
        extra_keys,
        bcc,
        hold_until,
        mandatory,
        dead_lettered,
    } = outgoing;
    let runtime = vhost.runtime();
    if exchange.is_default() && routing_key.starts_with(REPLY_PREFIX) {
        // Direct reply-to, the reply's side: straight to the requester's reply consumer, no
        // queue in between (and nothing stored, so no ticket).
        let delivered = runtime.reply_consumers.deliver(routing_key, message);
        return Outcome {
            routed: delivered,
            returned: !delivered && mandatory,
            dropped: !delivered && !mandatory,
            ..Outcome::default()
        };
    }
    let headers = message.properties.headers.as_ref();
    vhost.route(
        exchange,
        routing_key,
        extra_keys,
        headers,
        hold_until.is_some(),
        routing,
    );
    let mut cycled = false;
    if dead_lettered {
        routing.queues.retain(|queue| {
            let cycle = is_cycle(&message.deaths, &queue.name);
            if cycle {
                tracing::debug!(target_queue = %queue.name, "dead-letter cycle; message dropped");
            }
            cycled |= cycle;
            !cycle
        });
    }
    if let Some(taken) = taken.as_deref() {
        routing.queues.retain(|queue| !taken.contains(&queue.name));
    }
    let routed = routing.is_routable();
    if !routed && mandatory {
        // Returned now and not held (Better than the plugin, which returns every delayed
        // message and delivers it later anyway).
        routing.clear();
        return Outcome {
            returned: true,
            ..Outcome::default()
        };
    }
    let dropped = !routed && routing.delayed.is_empty();
    let ticket = match ticket {
        Some(make) if runtime.queues.store.is_some() && stores_copies(message, routing) => {
            Some(make())
        }
        _ => None,
    };
    let rejected = enqueue(
        vhost,
        message,
        bcc,
        hold_until.unwrap_or(0),
        routing,
        ticket.as_ref(),
        taken,
    );
    Outcome {
        routed,
        returned: false,
        dropped,
        rejected,
        cycled,
        ticket,
    }
}
