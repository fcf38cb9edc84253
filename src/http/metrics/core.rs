//! RabbitMQ's core metrics (`prometheus_rabbitmq_core_metrics_collector`): the same groups
//! under the same names, which are also what `/metrics/detailed?family=` selects.
//!
//! Aggregated (the default `/metrics`), a per-object group is one sample per metric, the sum
//! over its objects; per object (`/metrics/per-object`, `/metrics/detailed`), one sample per
//! queue, exchange, channel or connection, labelled as RabbitMQ labels them.

use std::collections::HashSet;

use super::node;
use super::snapshot::{ChannelRow, ConnectionRow, ExchangeRow, QueueRow, Snapshot};
use super::text::{Exposition, Kind};

/// How a scrape shows the core groups.
pub(crate) struct Scope<'a> {
    /// `rabbitmq_` or, for `/metrics/detailed`, `rabbitmq_detailed_`.
    pub(crate) prefix: &'static str,
    pub(crate) per_object: bool,
    /// Only objects of these vhosts (`/metrics/detailed?vhost=`).
    pub(crate) vhosts: Option<&'a HashSet<String>>,
}

impl Scope<'_> {
    fn shows(&self, vhost: &str) -> bool {
        self.vhosts.is_none_or(|v| v.contains(vhost))
    }
}

/// A group: its name (the `family` of `/metrics/detailed`) and what it writes.
pub(crate) type Group = (&'static str, fn(&Snapshot, &Scope<'_>, &mut Exposition));

/// Every group, in RabbitMQ's order.
pub(crate) const GROUPS: &[Group] = &[
    ("connection_churn_metrics", connection_churn),
    ("node_coarse_metrics", node::coarse),
    ("node_metrics", node::limits),
    ("queue_coarse_metrics", queue_coarse),
    ("queue_consumer_count", queue_consumer_count),
    ("queue_metrics", queue_metrics),
    ("channel_metrics", channel_metrics),
    ("channel_exchange_metrics", channel_exchange),
    ("channel_queue_metrics", channel_queue),
    ("connection_metrics", connection_metrics),
    ("exchange_metrics", exchange_metrics),
];

/// The groups to write: `queue_consumer_count` is a subset of `queue_metrics`, and RabbitMQ
/// writes it only when `queue_metrics` is not written.
pub(crate) fn selected(families: Option<&HashSet<String>>) -> Vec<Group> {
    let wanted = |name: &str| families.is_none_or(|f| f.contains(name));
    GROUPS
        .iter()
        .filter(|(name, _)| wanted(name))
        .filter(|(name, _)| *name != "queue_consumer_count" || !wanted("queue_metrics"))
        .copied()
        .collect()
}

fn connection_churn(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    for (name, help, value) in [
        (
            "connections_opened_total",
            "Total number of connections opened",
            s.connections_opened,
        ),
        (
            "connections_closed_total",
            "Total number of connections closed or terminated",
            s.connections_closed,
        ),
        (
            "channels_opened_total",
            "Total number of channels opened",
            s.totals.channels_opened,
        ),
        (
            "channels_closed_total",
            "Total number of channels closed",
            s.totals.channels_closed,
        ),
        (
            "queues_declared_total",
            "Total number of queues declared",
            s.queues_declared,
        ),
        (
            "queues_created_total",
            "Total number of queues created",
            s.queues_created,
        ),
        (
            "queues_deleted_total",
            "Total number of queues deleted",
            s.queues_deleted,
        ),
    ] {
        out.family(&format!("{}{name}", scope.prefix), Kind::Counter, help)
            .sample(&[], value);
    }
}

/// One family over the queues: per queue, or their sum.
fn per_queue(
    s: &Snapshot,
    scope: &Scope<'_>,
    out: &mut Exposition,
    (name, kind, help): (&str, Kind, &str),
    value: impl Fn(&QueueRow) -> f64,
) {
    let rows = s.queues.iter().filter(|q| scope.shows(&q.vhost));
    let mut family = out.family(&format!("{}{name}", scope.prefix), kind, help);
    if scope.per_object {
        for q in rows {
            family.sample(&[("vhost", &q.vhost), ("queue", &q.queue.name)], value(q));
        }
    } else {
        family.sample(&[], rows.map(value).sum::<f64>());
    }
}

fn queue_coarse(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    let gauge = Kind::Gauge;
    per_queue(
        s,
        scope,
        out,
        (
            "queue_messages_ready",
            gauge,
            "Messages ready to be delivered to consumers",
        ),
        |q| q.figures.ready as f64,
    );
    per_queue(
        s,
        scope,
        out,
        (
            "queue_messages_unacked",
            gauge,
            "Messages delivered to consumers but not yet acknowledged",
        ),
        |q| q.figures.unacked as f64,
    );
    per_queue(
        s,
        scope,
        out,
        (
            "queue_messages",
            gauge,
            "Sum of ready and unacknowledged messages - total queue depth",
        ),
        |q| (q.figures.ready + q.figures.unacked) as f64,
    );
}

fn queue_consumer_count(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    per_queue(
        s,
        scope,
        out,
        ("queue_consumers", Kind::Gauge, "Consumers on a queue"),
        |q| q.figures.consumers as f64,
    );
}

fn queue_metrics(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    queue_consumer_count(s, scope, out);
    type Value = fn(&QueueRow) -> f64;
    // dwellmq keeps every message in memory (the store is a copy for restarts): nothing is
    // paged out, and the in-memory counts are the counts.
    let families: [(&str, &str, Value); 6] = [
        (
            "queue_messages_ram",
            "Ready and unacknowledged messages stored in memory",
            |q| (q.figures.ready + q.figures.unacked) as f64,
        ),
        (
            "queue_messages_ready_ram",
            "Ready messages stored in memory",
            |q| (q.figures.ready as u64).saturating_sub(q.figures.paged_out) as f64,
        ),
        (
            "queue_messages_unacked_ram",
            "Unacknowledged messages stored in memory",
            |q| q.figures.unacked as f64,
        ),
        (
            "queue_messages_ready_bytes",
            "Size in bytes of ready messages",
            |q| q.figures.ready_bytes as f64,
        ),
        (
            "queue_messages_paged_out",
            "Messages paged out to disk",
            |q| q.figures.paged_out as f64,
        ),
        (
            "queue_messages_paged_out_bytes",
            "Size in bytes of messages paged out to disk",
            |q| q.figures.paged_out_bytes as f64,
        ),
    ];
    for (name, help, value) in families {
        per_queue(s, scope, out, (name, Kind::Gauge, help), value);
    }
}

/// One family over the channels: per channel, or their sum.
fn per_channel(
    s: &Snapshot,
    scope: &Scope<'_>,
    out: &mut Exposition,
    (name, kind, help): (&str, Kind, &str),
    value: impl Fn(&ChannelRow) -> u64,
) {
    let rows = s.channels.iter().filter(|c| scope.shows(&c.vhost));
    let mut family = out.family(&format!("{}{name}", scope.prefix), kind, help);
    if scope.per_object {
        for c in rows {
            family.sample(&[("channel", &c.name)], value(c));
        }
    } else {
        family.sample(&[], rows.map(value).sum::<u64>());
    }
}

fn channel_metrics(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    type Value = fn(&ChannelRow) -> u64;
    let families: [(&str, &str, Value); 4] = [
        ("channel_consumers", "Consumers on a channel", |c| {
            c.summary.consumers as u64
        }),
        (
            "channel_messages_unacked",
            "Delivered but not yet acknowledged messages",
            |c| c.summary.unacked as u64,
        ),
        (
            "consumer_prefetch",
            "Limit of unacknowledged messages for each consumer",
            |c| u64::from(c.summary.prefetch_count),
        ),
        (
            "channel_prefetch",
            "Deprecated and will be removed in a future version",
            |c| u64::from(c.summary.global_prefetch_count),
        ),
    ];
    for (name, help, value) in families {
        per_channel(s, scope, out, (name, Kind::Gauge, help), value);
    }
}

fn channel_exchange(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    let published = (
        "channel_messages_published_total",
        Kind::Counter,
        "Total number of messages published into an exchange on a channel",
    );
    let confirmed = (
        "channel_messages_confirmed_total",
        Kind::Counter,
        "Total number of messages published into an exchange and confirmed on the channel",
    );
    let returned = (
        "channel_messages_unroutable_returned_total",
        "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
        s.totals.unroutable_returned,
    );
    let dropped = (
        "channel_messages_unroutable_dropped_total",
        "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
        s.totals.unroutable_dropped,
    );
    if scope.per_object {
        per_channel(s, scope, out, published, |c| c.summary.publish);
        per_channel(s, scope, out, confirmed, |c| c.summary.confirm_count);
        // Channels do not count their unroutable messages apart: the families are there,
        // without per-channel samples.
        for (name, help, _) in [returned, dropped] {
            out.family(&format!("{}{name}", scope.prefix), Kind::Counter, help);
        }
        return;
    }
    // Aggregated: the broker's totals since start (channels that closed included), so that
    // the counters never go down.
    for (name, help, value) in [
        (published.0, published.2, s.totals.published),
        (confirmed.0, confirmed.2, s.totals.confirmed),
        returned,
        dropped,
    ] {
        out.family(&format!("{}{name}", scope.prefix), Kind::Counter, help)
            .sample(&[], value);
    }
}

fn channel_queue(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    // Indices into `TypeTotals::counts`.
    let families: [(&str, &str, usize); 7] = [
        (
            "channel_get_ack_total",
            "Total number of messages fetched with basic.get in manual acknowledgement mode",
            2,
        ),
        (
            "channel_get_total",
            "Total number of messages fetched with basic.get in automatic acknowledgement mode",
            3,
        ),
        (
            "channel_messages_delivered_ack_total",
            "Total number of messages delivered to consumers in manual acknowledgement mode",
            0,
        ),
        (
            "channel_messages_delivered_total",
            "Total number of messages delivered to consumers in automatic acknowledgement mode",
            1,
        ),
        (
            "channel_messages_redelivered_total",
            "Total number of messages redelivered to consumers",
            5,
        ),
        (
            "channel_messages_acked_total",
            "Total number of messages acknowledged by consumers",
            6,
        ),
        (
            "channel_get_empty_total",
            "Total number of times basic.get operations fetched no message",
            4,
        ),
    ];
    for (name, help, index) in families {
        let mut family = out.family(&format!("{}{name}", scope.prefix), Kind::Counter, help);
        if scope.per_object {
            // Channels count acks, not the rest apart: only acks get per-channel samples.
            if index == 6 {
                for c in s.channels.iter().filter(|c| scope.shows(&c.vhost)) {
                    family.sample(&[("channel", &c.name)], c.summary.ack);
                }
            }
        } else {
            family.sample(&[], s.by_type.iter().map(|t| t.counts[index]).sum::<u64>());
        }
    }
}

fn connection_metrics(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    let rows: Vec<&ConnectionRow> = s
        .connections
        .iter()
        .filter(|c| scope.shows(&c.vhost))
        .collect();
    let mut family = out.family(
        &format!("{}connection_channels", scope.prefix),
        Kind::Gauge,
        "Channels on a connection",
    );
    if scope.per_object {
        for c in rows {
            family.sample(&[("connection", &c.name)], c.channels);
        }
    } else {
        family.sample(&[], rows.iter().map(|c| c.channels).sum::<usize>());
    }
}

fn exchange_metrics(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    let rows: Vec<&ExchangeRow> = s
        .exchanges
        .iter()
        .filter(|x| scope.shows(&x.vhost))
        .collect();
    let counts = |x: &ExchangeRow| {
        let counts = x.exchange.counters.counts();
        (counts[0].1, counts[1].1)
    };
    let mut family = out.family(
        &format!("{}exchange_messages_published_total", scope.prefix),
        Kind::Counter,
        "Total number of messages published into an exchange",
    );
    if scope.per_object {
        for x in &rows {
            family.sample(
                &[("vhost", &x.vhost), ("exchange", &x.exchange.name)],
                counts(x).0,
            );
        }
    } else {
        family.sample(&[], rows.iter().map(|x| counts(x).0).sum::<u64>());
    }
}

/// RabbitMQ's totals: objects that exist now.
pub(crate) fn totals(s: &Snapshot, out: &mut Exposition) {
    for (name, help, value) in [
        (
            "rabbitmq_connections",
            "Connections currently open",
            s.connections.len(),
        ),
        (
            "rabbitmq_channels",
            "Channels currently open",
            s.channel_count(),
        ),
        (
            "rabbitmq_consumers",
            "Consumers currently connected",
            s.consumers(),
        ),
        ("rabbitmq_queues", "Queues available", s.queues.len()),
    ] {
        out.family(name, Kind::Gauge, help).sample(&[], value);
    }
}

/// `rabbitmq_queue_info` (per object): one sample of 1 per queue, its details as labels.
pub(crate) fn queue_info(s: &Snapshot, scope: &Scope<'_>, out: &mut Exposition) {
    let mut family = out.family(
        &format!("{}queue_info", scope.prefix),
        Kind::Gauge,
        "A metric with a constant '1' value and labels that provide some queue details",
    );
    for q in s.queues.iter().filter(|q| scope.shows(&q.vhost)) {
        let queue_type = super::snapshot::type_label(q.queue.config.queue_type);
        family.sample(
            &[
                ("vhost", &q.vhost),
                ("queue", &q.queue.name),
                ("queue_type", queue_type),
                ("membership", "leader"),
            ],
            1,
        );
    }
}

/// `/metrics/detailed`'s cluster groups (`rabbitmq_cluster_` families).
pub(crate) fn cluster(
    s: &Snapshot,
    families: &HashSet<String>,
    vhosts: Option<&HashSet<String>>,
    out: &mut Exposition,
) {
    let shows = |vhost: &str| vhosts.is_none_or(|v| v.contains(vhost));
    if families.contains("vhost_status") {
        let mut family = out.family(
            "rabbitmq_cluster_vhost_status",
            Kind::Gauge,
            "Whether a given vhost is running",
        );
        for vhost in s.vhosts.iter().filter(|v| shows(v)) {
            family.sample(&[("vhost", vhost)], 1);
        }
    }
    // As RabbitMQ: neither the default exchange nor internal ones.
    let listed = || {
        s.exchanges
            .iter()
            .filter(|x| shows(&x.vhost) && !x.exchange.name.is_empty() && !x.exchange.internal)
    };
    let type_name = |x: &ExchangeRow| x.exchange.kind.type_name();
    if families.contains("exchange_names") {
        let mut family = out.family(
            "rabbitmq_cluster_exchange_name",
            Kind::Gauge,
            "Enumerates exchanges without any additional info. This value is cluster-wide. A cheaper alternative to `exchange_bindings`",
        );
        for x in listed() {
            family.sample(
                &[
                    ("vhost", &x.vhost),
                    ("exchange", &x.exchange.name),
                    ("type", type_name(x)),
                ],
                1,
            );
        }
    }
    if families.contains("exchange_bindings") {
        let mut family = out.family(
            "rabbitmq_cluster_exchange_bindings",
            Kind::Gauge,
            "Number of bindings for an exchange. This value is cluster-wide.",
        );
        for x in listed() {
            family.sample(
                &[
                    ("vhost", &x.vhost),
                    ("exchange", &x.exchange.name),
                    ("type", type_name(x)),
                ],
                x.exchange.bindings.read().len(),
            );
        }
    }
}
