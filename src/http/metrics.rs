//! `GET /metrics`: Prometheus text exposition, RabbitMQ's metric names where one exists.
//!
//! Written by hand rather than through a metrics crate: every value here is read from broker
//! state at scrape time (gauges) or from a counter the broker already keeps, so a registry and
//! recorder would add dependencies and a second copy of each number without adding anything.
//! Like `rabbitmq_prometheus`, the endpoint needs no credentials (scrapers rarely have any);
//! bind the HTTP listener accordingly.

use dwellmq_core::queue::DeathReason;
use std::fmt::Write;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use super::Api;
use crate::broker::delayed::lateness::BOUNDS_MS;
use crate::broker::exchange::ExchangeKind;

/// One metric family being written: its header once, then its samples.
struct Family<'a> {
    out: &'a mut String,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &str, kind: &str, help: &str) -> Self {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        Family { out }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text.
pub(crate) fn render(api: &Api) -> String {
    let state = &api.state;
    let vhosts = api.vhosts();
    let mut out = String::with_capacity(4096);

    let connections = state.open_connections.load(Ordering::Relaxed);
    Family::new(
        &mut out,
        "rabbitmq_connections",
        "gauge",
        "Connections currently open",
    )
    .sample("rabbitmq_connections", &[], connections);

    let queues: Vec<_> = vhosts.iter().flat_map(|v| v.queues()).collect();
    Family::new(&mut out, "rabbitmq_queues", "gauge", "Queues available").sample(
        "rabbitmq_queues",
        &[],
        queues.len(),
    );

    type QueueValue = fn(&Arc<crate::broker::queue::Queue>) -> usize;
    let per_queue: [(&str, &str, QueueValue); 4] = [
        (
            "rabbitmq_queue_messages_ready",
            "Messages ready to be delivered to consumers",
            |q| q.message_count(),
        ),
        (
            "rabbitmq_queue_messages_unacked",
            "Messages delivered to consumers but not yet acknowledged",
            |q| q.unacked_count(),
        ),
        (
            "rabbitmq_queue_messages",
            "Sum of ready and unacknowledged messages",
            |q| q.message_count() + q.unacked_count(),
        ),
        ("rabbitmq_queue_consumers", "Consumers on a queue", |q| {
            q.consumer_count()
        }),
    ];
    for (name, help, value) in per_queue {
        let mut family = Family::new(&mut out, name, "gauge", help);
        for q in &queues {
            family.sample(name, &[("vhost", &q.vhost), ("queue", &q.name)], value(q));
        }
    }

    let totals = state.stats.totals();
    for (name, help, value) in [
        (
            "rabbitmq_channel_messages_published_total",
            "Messages published",
            totals.published,
        ),
        (
            "rabbitmq_channel_messages_unroutable_dropped_total",
            "Published messages no queue took, dropped (not mandatory)",
            totals.unroutable_dropped,
        ),
        (
            "rabbitmq_channel_messages_unroutable_returned_total",
            "Published messages no queue took, returned to the mandatory publisher",
            totals.unroutable_returned,
        ),
    ] {
        Family::new(&mut out, name, "counter", help).sample(name, &[], value);
    }

    let used = state.memory.used().max(0);
    Family::new(
        &mut out,
        "dwellmq_memory_used_bytes",
        "gauge",
        "Bytes of message bodies held (what the memory watermark compares)",
    )
    .sample("dwellmq_memory_used_bytes", &[], used);

    let now_ms = state.clock.now_ms();
    let next_due = state.delayed.next_due_all();
    let delayed: Vec<(String, String, usize, u64, Option<u64>)> = vhosts
        .iter()
        .flat_map(|v| {
            v.exchanges()
                .into_iter()
                .filter(|x| matches!(x.kind, ExchangeKind::Delayed(_)))
                .map(|x| {
                    let (count, bytes) = state.delayed.stats(&v.name, &x.name);
                    let next = next_due.get(&(v.name.clone(), x.name.clone())).copied();
                    (v.name.to_string(), x.name.to_string(), count, bytes, next)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut family = Family::new(
        &mut out,
        "dwellmq_delayed_messages",
        "gauge",
        "Messages held by a delayed exchange",
    );
    for (vhost, exchange, count, _, _) in &delayed {
        family.sample(
            "dwellmq_delayed_messages",
            &[("vhost", vhost), ("exchange", exchange)],
            count,
        );
    }
    let mut family = Family::new(
        &mut out,
        "dwellmq_delayed_bytes",
        "gauge",
        "Body bytes held by a delayed exchange",
    );
    for (vhost, exchange, _, bytes, _) in &delayed {
        family.sample(
            "dwellmq_delayed_bytes",
            &[("vhost", vhost), ("exchange", exchange)],
            bytes,
        );
    }
    let mut family = Family::new(
        &mut out,
        "dwellmq_delayed_next_due_seconds",
        "gauge",
        "Seconds until a delayed exchange's next message is due (negative: late)",
    );
    for (vhost, exchange, _, _, next) in &delayed {
        if let Some(due) = next {
            let seconds = (*due as f64 - now_ms as f64) / 1000.0;
            family.sample(
                "dwellmq_delayed_next_due_seconds",
                &[("vhost", vhost), ("exchange", exchange)],
                seconds,
            );
        }
    }
    let name = "dwellmq_delayed_release_lateness_seconds";
    let lateness = state.delayed.lateness.snapshot();
    let mut family = Family::new(
        &mut out,
        name,
        "histogram",
        "How late the timer released delayed messages (ms resolution)",
    );
    let bucket = format!("{name}_bucket");
    for (bound_ms, count) in BOUNDS_MS.iter().zip(lateness.cumulative) {
        let le = (*bound_ms as f64 / 1000.0).to_string();
        family.sample(&bucket, &[("le", &le)], count);
    }
    family.sample(&bucket, &[("le", "+Inf")], lateness.count);
    family.sample(&format!("{name}_sum"), &[], lateness.sum_ms as f64 / 1000.0);
    family.sample(&format!("{name}_count"), &[], lateness.count);
    Family::new(
        &mut out,
        "dwellmq_delayed_unroutable_total",
        "counter",
        "Delayed messages dropped at release because nothing was bound to route them",
    )
    .sample(
        "dwellmq_delayed_unroutable_total",
        &[],
        state.delayed.unroutable(),
    );
    let reasons = [
        DeathReason::Rejected,
        DeathReason::Expired,
        DeathReason::Maxlen,
        DeathReason::DeliveryLimit,
    ];
    let deaths = &state.runtime.deaths;
    let mut family = Family::new(
        &mut out,
        "dwellmq_dead_lettered_total",
        "counter",
        "Messages routed to a dead-letter exchange, by reason",
    );
    for reason in reasons {
        let (dead_lettered, _) = deaths.get(reason);
        family.sample(
            "dwellmq_dead_lettered_total",
            &[("reason", reason.name())],
            dead_lettered,
        );
    }
    let mut family = Family::new(
        &mut out,
        "dwellmq_discarded_total",
        "counter",
        "Messages that left a queue without a dead-letter exchange to go to, by reason",
    );
    for reason in reasons {
        let (_, dropped) = deaths.get(reason);
        family.sample(
            "dwellmq_discarded_total",
            &[("reason", reason.name())],
            dropped,
        );
    }
    let (expired_dead_lettered, expired_dropped) = deaths.get(DeathReason::Expired);
    Family::new(
        &mut out,
        "dwellmq_expired_total",
        "counter",
        "Messages whose TTL passed (dead-lettered or discarded)",
    )
    .sample(
        "dwellmq_expired_total",
        &[],
        expired_dead_lettered + expired_dropped,
    );
    out
}

/// `GET /metrics`.
pub(crate) async fn metrics(State(api): State<Arc<Api>>) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        render(&api),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut out = String::new();
        Family::new(&mut out, "m", "gauge", "help").sample("m", &[("q", "x\"y")], 3);
        assert_eq!(out, "# HELP m help\n# TYPE m gauge\nm{q=\"x\\\"y\"} 3\n");
    }
}
