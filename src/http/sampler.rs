//! The rate sampler: every few seconds, reads the message counters of the broker, every
//! queue, exchange and channel into `BrokerState::rates`, which the API's `message_stats`
//! read. It runs while the HTTP listener does: nothing else shows rates.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::Api;
use crate::broker::connections::ChannelSummary;
use crate::broker::rates::{Counts, RateKey, SAMPLE_INTERVAL};
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
        for queue in vhost.queues() {
            let key = RateKey::Queue(vhost.name.to_string(), queue.name.to_string());
            rates.record(sweep, key, at_ms, &queue.counters.counts());
        }
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

/// A channel's counters, as RabbitMQ names them.
pub(crate) fn channel_counts(channel: &ChannelSummary) -> Counts {
    vec![
        ("publish", channel.publish),
        ("confirm", channel.confirm_count),
        ("deliver_get", channel.deliver_get),
        ("ack", channel.ack),
    ]
}
