//! dwellmq's own families (`dwellmq_*`): memory held, what delayed exchanges hold and when it
//! is due, how late releases were, and why messages left queues unconsumed.

use dwellmq_core::arguments::QueueType;
use dwellmq_core::queue::DeathReason;

use super::snapshot::Snapshot;
use super::text::{Exposition, Kind};
use super::Api;
use crate::broker::delayed::lateness::BOUNDS_MS;
use crate::broker::exchange::ExchangeKind;

/// One delayed exchange's holdings.
struct Held {
    vhost: String,
    exchange: String,
    count: usize,
    bytes: u64,
    next_due_ms: Option<u64>,
}

fn delayed_exchanges(api: &Api) -> Vec<Held> {
    let state = &api.state;
    let next_due = state.delayed.next_due_all();
    let mut held = Vec::new();
    for vhost in api.vhosts() {
        let mut exchanges: Vec<_> = vhost
            .exchanges()
            .into_iter()
            .filter(|x| matches!(x.kind, ExchangeKind::Delayed(_)))
            .collect();
        exchanges.sort_by(|a, b| a.name.cmp(&b.name));
        for x in exchanges {
            let (count, bytes) = state.delayed.stats(&vhost.name, &x.name);
            held.push(Held {
                vhost: vhost.name.to_string(),
                exchange: x.name.to_string(),
                count,
                bytes,
                next_due_ms: next_due.get(&(vhost.name.clone(), x.name.clone())).copied(),
            });
        }
    }
    held
}

pub(crate) fn write(api: &Api, snapshot: &Snapshot, out: &mut Exposition) {
    let state = &api.state;
    out.family(
        "dwellmq_memory_used_bytes",
        Kind::Gauge,
        "Bytes of message bodies held (what the memory watermark compares)",
    )
    .sample(&[], state.memory.used().max(0));

    let held = delayed_exchanges(api);
    let mut family = out.family(
        "dwellmq_delayed_messages",
        Kind::Gauge,
        "Messages held by a delayed exchange",
    );
    for h in &held {
        family.sample(&[("vhost", &h.vhost), ("exchange", &h.exchange)], h.count);
    }
    let mut family = out.family(
        "dwellmq_delayed_bytes",
        Kind::Gauge,
        "Body bytes held by a delayed exchange",
    );
    for h in &held {
        family.sample(&[("vhost", &h.vhost), ("exchange", &h.exchange)], h.bytes);
    }
    let now_ms = state.clock.now_ms();
    let mut family = out.family(
        "dwellmq_delayed_next_due_seconds",
        Kind::Gauge,
        "Seconds until a delayed exchange's next message is due (negative: late)",
    );
    for h in &held {
        if let Some(due) = h.next_due_ms {
            let seconds = (due as f64 - now_ms as f64) / 1000.0;
            family.sample(&[("vhost", &h.vhost), ("exchange", &h.exchange)], seconds);
        }
    }

    let lateness = state.delayed.lateness.snapshot();
    let bounds: Vec<(String, u64)> = BOUNDS_MS
        .iter()
        .zip(lateness.cumulative)
        .map(|(bound_ms, count)| ((*bound_ms as f64 / 1000.0).to_string(), count))
        .collect();
    out.family(
        "dwellmq_delayed_release_lateness_seconds",
        Kind::Histogram,
        "How late the timer released delayed messages (ms resolution)",
    )
    .histogram(
        &[],
        &bounds,
        lateness.count,
        lateness.sum_ms as f64 / 1000.0,
    );
    out.family(
        "dwellmq_delayed_unroutable_total",
        Kind::Counter,
        "Delayed messages dropped at release because nothing was bound to route them",
    )
    .sample(&[], state.delayed.unroutable());

    retries(api, snapshot, out);
    deaths(api, out);
}

/// Quorum queues' messages waiting for a delayed retry, and when the next is ready again.
fn retries(api: &Api, snapshot: &Snapshot, out: &mut Exposition) {
    let quorum: Vec<_> = snapshot
        .queues
        .iter()
        .filter(|q| q.queue.config.queue_type == QueueType::Quorum)
        .collect();
    let mut family = out.family(
        "dwellmq_queue_messages_delayed",
        Kind::Gauge,
        "Messages of a quorum queue waiting for a delayed retry",
    );
    for q in &quorum {
        family.sample(
            &[("vhost", &q.vhost), ("queue", &q.queue.name)],
            q.figures.retrying,
        );
    }
    let now_ms = api.state.clock.now_ms();
    let mut family = out.family(
        "dwellmq_queue_next_delayed_seconds",
        Kind::Gauge,
        "Seconds until a quorum queue's next delayed retry is ready (negative: late)",
    );
    for q in &quorum {
        if let Some(at) = q.figures.next_retry_at {
            let seconds = (at as f64 - now_ms as f64) / 1000.0;
            family.sample(&[("vhost", &q.vhost), ("queue", &q.queue.name)], seconds);
        }
    }
}

fn deaths(api: &Api, out: &mut Exposition) {
    let reasons = [
        DeathReason::Rejected,
        DeathReason::Expired,
        DeathReason::Maxlen,
        DeathReason::DeliveryLimit,
    ];
    let deaths = &api.state.queue_services().deaths;
    let mut family = out.family(
        "dwellmq_dead_lettered_total",
        Kind::Counter,
        "Messages routed to a dead-letter exchange, by reason",
    );
    for reason in reasons {
        family.sample(&[("reason", reason.name())], deaths.get(reason).0);
    }
    let mut family = out.family(
        "dwellmq_discarded_total",
        Kind::Counter,
        "Messages that left a queue without a dead-letter exchange to go to, by reason",
    );
    for reason in reasons {
        family.sample(&[("reason", reason.name())], deaths.get(reason).1);
    }
    let (expired_dead_lettered, expired_dropped) = deaths.get(DeathReason::Expired);
    out.family(
        "dwellmq_expired_total",
        Kind::Counter,
        "Messages whose TTL passed (dead-lettered or discarded)",
    )
    .sample(&[], expired_dead_lettered + expired_dropped);
}
