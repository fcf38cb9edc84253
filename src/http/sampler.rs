//! The rate sampler: every few seconds, reads the message counters of the broker, every
//! queue, exchange and channel into `BrokerState::rates`, which the API's `message_stats`
//! read. It runs while the HTTP listener does: nothing else shows rates.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::Api;
use crate::broker::connections::ChannelSummary;
use crate::broker::rates::{Counts, RateKey, SAMPLE_INTERVAL};
use crate::broker::vhost::VHost;
use crate::server::shutdown_requested;

/// Samples until the broker shuts down.
pub(crate) async fn run(api: Arc<Api>, mut shutdown: watch::Receiver<bool>) {
    let start = Instant::now();
    let mut ticks = tokio::time::interval(SAMPLE_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                let at_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
                sample(&api, at_ms).await;
            }
            _ = shutdown_requested(&mut shutdown) => return,
        }
    }
}

/// One pass over everything that has counters.
async fn sample(api: &Api, at_ms: u64) {
    let rates = &api.state.rates;
    let sweep = rates.begin_sweep();
    rates.record(sweep, RateKey::Overview, at_ms, &overview_counts(api));
    for vhost in api.vhosts() {
        let (mut ready, mut unacked) = (0, 0);
        for queue in vhost.queues() {
            let key = RateKey::Queue(vhost.name.to_string(), queue.name.to_string());
            rates.record(sweep, key, at_ms, &queue.counters.counts());
            let figures = queue.figures();
            ready += figures.ready;
            unacked += figures.unacked;
            let key = RateKey::QueueDepth(vhost.name.to_string(), queue.name.to_string());
            rates.record_levels(sweep, key, at_ms, &depth(figures.ready, figures.unacked));
        }
        let name = vhost.name.to_string();
        let mut counts = vhost_counts(&vhost);
        counts.extend(vhost_octets(api, &vhost.name));
        rates.record(sweep, RateKey::VHost(name.clone()), at_ms, &counts);
        rates.record_levels(
            sweep,
            RateKey::VHostDepth(name),
            at_ms,
            &depth(ready, unacked),
        );
        for exchange in vhost.exchanges() {
            let key = RateKey::Exchange(vhost.name.to_string(), exchange.name.to_string());
            rates.record(sweep, key, at_ms, &exchange.counters.counts());
        }
    }
    for connection in api.state.connections.list() {
        for channel in connection.channels().await.unwrap_or_default() {
            let key = RateKey::Channel(connection.id, channel.number);
            rates.record(sweep, key, at_ms, &channel_counts(&channel));
        }
    }
    rates.end_sweep(sweep);
}

/// The broker's totals: publishes as channels count them, deliveries and acks over the
/// queues that exist.
pub(crate) fn overview_counts(api: &Api) -> Counts {
    let totals = api.state.stats.totals();
    let (mut deliver_get, mut ack, mut redeliver) = (0, 0, 0);
    for vhost in api.vhosts() {
        for queue in vhost.queues() {
            for (name, n) in queue.counters.counts() {
                match name {
                    "deliver_get" => deliver_get += n,
                    "ack" => ack += n,
                    "redeliver" => redeliver += n,
                    _ => {}
                }
            }
        }
    }
    vec![
        ("publish", totals.published),
        ("deliver_get", deliver_get),
        ("ack", ack),
        ("redeliver", redeliver),
        ("drop_unroutable", totals.unroutable_dropped),
        ("return_unroutable", totals.unroutable_returned),
    ]
}

/// A queue's or vhost's depth, as RabbitMQ names it (`messages_details` and so on).
pub(crate) fn depth(ready: usize, unacked: usize) -> Counts {
    vec![
        ("messages", (ready + unacked) as u64),
        ("messages_ready", ready as u64),
        ("messages_unacknowledged", unacked as u64),
    ]
}

/// A vhost's message counters: publishes as its exchanges count them, deliveries and acks
/// over its queues.
pub(crate) fn vhost_counts(vhost: &VHost) -> Counts {
    let publish = vhost
        .exchanges()
        .iter()
        .map(|x| x.counters.counts()[0].1)
        .sum();
    let mut totals: Counts = vec![
        ("publish", publish),
        ("deliver", 0),
        ("get", 0),
        ("deliver_get", 0),
        ("ack", 0),
        ("redeliver", 0),
    ];
    for queue in vhost.queues() {
        for (name, n) in queue.counters.counts() {
            if let Some(total) = totals
                .iter_mut()
                .find(|(t, _)| *t == name && name != "publish")
            {
                total.1 += n;
            }
        }
    }
    totals
}

/// Octets received from and sent to the vhost's open connections (`recv_oct`, `send_oct`);
/// sampled after the message counters, under the same key.
pub(crate) fn vhost_octets(api: &Api, vhost: &str) -> Counts {
    let (mut recv, mut send) = (0, 0);
    for c in api.state.connections.list() {
        if c.vhost == vhost {
            recv += c.recv_oct.load(std::sync::atomic::Ordering::Relaxed);
            send += c.send_oct.load(std::sync::atomic::Ordering::Relaxed);
        }
    }
    vec![("recv_oct", recv), ("send_oct", send)]
}

/// A channel's counters, as RabbitMQ names them.
pub(crate) fn channel_counts(channel: &ChannelSummary) -> Counts {
    vec![
        ("publish", channel.publish),
        ("confirm", channel.confirm_count),
        ("deliver_get", channel.deliver_get),
        ("ack", channel.ack),
    ]
}
