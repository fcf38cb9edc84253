//! RabbitMQ's global counters (`rabbit_global_counters`: `rabbitmq_global_*`, labelled by
//! protocol, and by queue type for what queues count) and the received message size
//! histogram (`rabbit_msg_size_metrics`: `rabbitmq_message_size_bytes`, RabbitMQ 4).

use super::snapshot::Snapshot;
use super::text::{Exposition, Kind};
use crate::broker::stats::MESSAGE_SIZE_BOUNDS;

/// dwellmq speaks one protocol.
const PROTOCOL: &str = "amqp091";

/// RabbitMQ writes the queue-type counters for its stream type too: always zero here, which
/// keeps dashboards that sum over `queue_type` the same.
const STREAM: &str = "rabbit_stream_queue";

pub(crate) fn write(s: &Snapshot, out: &mut Exposition) {
    publish_counters(s, out);
    client_gauges(s, out);
    delivery_counters(s, out);
    message_sizes(s, out);
}

/// What publishers sent and what became of it.
fn publish_counters(s: &Snapshot, out: &mut Exposition) {
    let t = &s.totals;
    let protocol = [("protocol", PROTOCOL)];
    for (name, help, value) in [
        (
            "messages_received_total",
            "Total number of messages received from publishers",
            t.published,
        ),
        (
            "messages_received_confirm_total",
            "Total number of messages received from publishers expecting confirmations",
            t.received_confirm,
        ),
        (
            "messages_routed_total",
            "Total number of messages routed to queues or streams",
            t.routed,
        ),
        (
            "messages_unroutable_dropped_total",
            "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
            t.unroutable_dropped,
        ),
        (
            "messages_unroutable_returned_total",
            "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
            t.unroutable_returned,
        ),
        (
            "messages_confirmed_total",
            "Total number of messages confirmed to publishers",
            t.confirmed,
        ),
    ] {
        out.family(&format!("rabbitmq_global_{name}"), Kind::Counter, help)
            .sample(&protocol, value);
    }
}

fn client_gauges(s: &Snapshot, out: &mut Exposition) {
    let protocol = [("protocol", PROTOCOL)];
    for (name, help, value) in [
        (
            "consumers",
            "Current number of consumers",
            s.consumers() as u64,
        ),
        ("publishers", "Current number of publishers", s.publishers()),
    ] {
        out.family(&format!("rabbitmq_global_{name}"), Kind::Gauge, help)
            .sample(&protocol, value);
    }
}

/// What queues delivered and consumers settled, per queue type.
fn delivery_counters(s: &Snapshot, out: &mut Exposition) {
    // Indices into `TypeTotals::counts`; delivered = consumed + got, either ack mode.
    let per_type: [(&str, &str, &[usize]); 8] = [
        (
            "messages_delivered_total",
            "Total number of messages delivered to consumers",
            &[0, 1, 2, 3],
        ),
        (
            "messages_delivered_consume_manual_ack_total",
            "Total number of messages delivered to consumers using basic.consume with manual acknowledgment",
            &[0],
        ),
        (
            "messages_delivered_consume_auto_ack_total",
            "Total number of messages delivered to consumers using basic.consume with automatic acknowledgment",
            &[1],
        ),
        (
            "messages_delivered_get_manual_ack_total",
            "Total number of messages delivered to consumers using basic.get with manual acknowledgment",
            &[2],
        ),
        (
            "messages_delivered_get_auto_ack_total",
            "Total number of messages delivered to consumers using basic.get with automatic acknowledgment",
            &[3],
        ),
        (
            "messages_get_empty_total",
            "Total number of times basic.get operations fetched no message",
            &[4],
        ),
        (
            "messages_redelivered_total",
            "Total number of messages redelivered to consumers",
            &[5],
        ),
        (
            "messages_acknowledged_total",
            "Total number of messages acknowledged by consumers",
            &[6],
        ),
    ];
    for (name, help, indices) in per_type {
        let mut family = out.family(&format!("rabbitmq_global_{name}"), Kind::Counter, help);
        for totals in &s.by_type {
            let value: u64 = indices.iter().map(|&i| totals.counts[i]).sum();
            family.sample(
                &[("protocol", PROTOCOL), ("queue_type", totals.label)],
                value,
            );
        }
        family.sample(&[("protocol", PROTOCOL), ("queue_type", STREAM)], 0);
    }
}

fn message_sizes(s: &Snapshot, out: &mut Exposition) {
    let t = &s.totals;
    let mut cumulative = 0;
    let bounds: Vec<(String, u64)> = MESSAGE_SIZE_BOUNDS
        .iter()
        .zip(t.size_buckets)
        .map(|(bound, n)| {
            cumulative += n;
            (bound.to_string(), cumulative)
        })
        .collect();
    let count = t.size_buckets.iter().sum();
    out.family(
        "rabbitmq_message_size_bytes",
        Kind::Histogram,
        "Size of messages received from publishers",
    )
    .histogram(&[("protocol", PROTOCOL)], &bounds, count, t.size_sum);
}
