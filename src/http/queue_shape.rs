//! A queue as RabbitMQ 3.10's management API shows it (`GET /api/queues/...`), with RabbitMQ
//! 4.3's `messages_delayed` and `next_delayed_at` on quorum queues.

use std::sync::Arc;

use dwellmq_core::arguments::QueueType;
use serde_json::{json, Map, Value};

use super::connections::consumer_json;
use super::fields::table_to_json;
use super::sampler::depth;
use super::{Api, NODE};
use crate::broker::connections::ConnectionInfo;
use crate::broker::queue::Queue;
use crate::broker::rates::RateKey;
use crate::broker::vhost::VHost;

/// `{"name": n, "name_details": {"rate": r}}` for each level and its last sampled rate.
fn with_rates(out: &mut Map<String, Value>, levels: &[(&'static str, u64)], rates: &[f64]) {
    for ((name, n), rate) in levels.iter().zip(rates) {
        out.insert((*name).to_string(), (*n).into());
        out.insert(format!("{name}_details"), json!({ "rate": rate }));
    }
}

/// A time on the broker's clock as RFC 3339, or null.
fn at(ms: Option<u64>) -> Value {
    ms.map(|ms| Value::from(crate::rfc3339::format(ms)))
        .unwrap_or(Value::Null)
}

/// The queue's JSON; `connections` are the open ones (for `consumer_details`).
pub(crate) fn queue_json(
    api: &Api,
    vhost: &VHost,
    q: &Arc<Queue>,
    connections: &[Arc<ConnectionInfo>],
) -> Value {
    let rates = &api.state.rates;
    let figures = q.figures(vhost);
    let (ready, unacked) = (figures.ready, figures.unacked);
    let bytes = figures.ready_bytes + figures.unacked_bytes;
    let (persistent, persistent_bytes) = q.persisted_ready();
    let queue_type = QueueType::of_arguments(&q.arguments);
    let consumers = q.consumers();
    let consumer_details: Vec<Value> = consumers
        .iter()
        .filter_map(|c| {
            let conn = connections.iter().find(|conn| conn.id == c.connection)?;
            Some(consumer_json(q, c, conn))
        })
        .collect();
    // RabbitMQ measures the share of time the queue could hand messages straight to a
    // consumer. dwellmq reads it now: 1 while consumers keep the queue empty, 0 while
    // messages wait for them (or nobody consumes).
    let capacity = if figures.consumers > 0 && ready == 0 {
        1.0
    } else {
        0.0
    };
    let mut out = json!({
        "name": q.name.as_str(),
        "vhost": q.vhost.as_str(),
        "durable": q.durable,
        "auto_delete": q.auto_delete,
        "exclusive": q.exclusive_owner.is_some(),
        "arguments": table_to_json(&q.arguments),
        "type": queue_type.name(),
        "node": NODE,
        "state": "running",
        "consumers": figures.consumers,
        "consumer_utilisation": capacity,
        "consumer_capacity": capacity,
        "consumer_details": consumer_details,
        // A durable classic queue longer than its window leaves the messages further back in
        // the store only (paged out); every other message is in memory.
        "message_bytes": bytes,
        "message_bytes_ready": figures.ready_bytes,
        "message_bytes_unacknowledged": figures.unacked_bytes,
        "message_bytes_ram": bytes.saturating_sub(figures.paged_out_bytes),
        "message_bytes_paged_out": figures.paged_out_bytes,
        "message_bytes_persistent": persistent_bytes,
        "messages_ram": (ready + unacked).saturating_sub(figures.paged_out as usize),
        "messages_ready_ram": ready.saturating_sub(figures.paged_out as usize),
        "messages_unacknowledged_ram": unacked,
        "messages_paged_out": figures.paged_out,
        "messages_persistent": persistent,
        "message_stats": rates.message_stats(
            &RateKey::Queue(q.vhost.to_string(), q.name.to_string()),
            &q.counters.counts(),
        ),
        // Per-channel and per-exchange rates: RabbitMQ lists them only with `rates_mode`
        // detailed; dwellmq's is basic, as RabbitMQ's default.
        "deliveries": [],
        "incoming": [],
    });
    let levels = depth(ready, unacked);
    let depth_rates = rates.rates_of(
        &RateKey::QueueDepth(q.vhost.to_string(), q.name.to_string()),
        levels.len(),
    );
    // `json!` with braces builds an object: the match only names it.
    if let Value::Object(map) = &mut out {
        with_rates(map, &levels, &depth_rates);
        // dwellmq's own: ready messages waiting for their TTL (the page shows them).
        map.insert("messages_expiring".into(), figures.expiring.into());
        map.insert("next_expiry_at".into(), at(figures.next_expiry_at));
        if queue_type == QueueType::Quorum {
            map.insert("messages_delayed".into(), figures.retrying.into());
            map.insert("next_delayed_at".into(), at(figures.next_retry_at));
            // RabbitMQ's names for what at-least-once dead-lettering keeps in the source, which
            // its total counts (not ready, not unacknowledged).
            map.insert("messages_dlx".into(), figures.dead_lettered.into());
            map.insert(
                "messages".into(),
                (ready + unacked + figures.dead_lettered).into(),
            );
            map.insert(
                "message_bytes_dlx".into(),
                figures.dead_lettered_bytes.into(),
            );
        }
    }
    out
}
