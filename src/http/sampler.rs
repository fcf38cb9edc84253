//! The rate sampler: every few seconds, reads the message counters of the broker, every
//! queue, exchange and channel into `BrokerState::rates`, which the API's `message_stats`
//! read. It runs while the HTTP listener does: nothing else shows rates.
//!
//! Its time is the broker's: real time under the system clock (a sample every
//! [`SAMPLE_INTERVAL`]), the manual clock's under a manual clock, where a sample is taken once
//! the clock has moved that far since the last one (looked at every [`MANUAL_LOOK`]), and
//! whenever a test asks ([`BrokerHandle::sample_rates`](crate::BrokerHandle::sample_rates)):
//! rates then follow the time a test makes pass, exactly.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::Api;
use crate::broker::connections::ChannelSummary;
use crate::broker::rates::{Counts, RateKey, SAMPLE_INTERVAL};
use crate::broker::vhost::VHost;
use crate::broker::BrokerState;
use crate::server::shutdown_requested;

/// How often, in real time, the sampler looks whether a manual clock has moved a whole
/// interval.
const MANUAL_LOOK: Duration = Duration::from_millis(100);

/// Samples until the broker shuts down.
pub(crate) async fn run(api: Arc<Api>, mut shutdown: watch::Receiver<bool>) {
    let state = &api.state;
    let manual = state.manual_clock.is_some();
    let interval_ms = SAMPLE_INTERVAL.as_millis() as u64;
    let mut ticks = tokio::time::interval(if manual { MANUAL_LOOK } else { SAMPLE_INTERVAL });
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<u64> = None;
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                let at_ms = sample_time(state);
                if manual && last.is_some_and(|last| at_ms < last.saturating_add(interval_ms)) {
                    continue;
                }
                sample(state, at_ms).await;
                last = Some(at_ms);
            }
            _ = shutdown_requested(&mut shutdown) => return,
        }
    }
}

/// Now, in the sampler's milliseconds: the manual clock's time, or real time since the rates
/// began (monotonic, whatever the wall clock does).
pub(crate) fn sample_time(state: &BrokerState) -> u64 {
    match &state.manual_clock {
        Some(clock) => dwellmq_timer::Clock::now_ms(clock.as_ref()),
        None => u64::try_from(state.rates.since_start().as_millis()).unwrap_or(u64::MAX),
    }
}

/// One pass over everything that has counters, read at `at_ms`.
pub(crate) async fn sample(state: &BrokerState, at_ms: u64) {
    let rates = &state.rates;
    let sweep = rates.begin_sweep();
    rates.record(
        sweep,
        RateKey::Overview,
        at_ms,
        &state_overview_counts(state),
    );
    for vhost in state.all_vhosts() {
        let (mut ready, mut unacked) = (0, 0);
        for queue in vhost.queues() {
            let key = RateKey::Queue(vhost.name.to_string(), queue.name.to_string());
            rates.record(sweep, key, at_ms, &queue.counters.counts());
            let figures = queue.figures(&*vhost);
            ready += figures.ready;
            unacked += figures.unacked;
            let key = RateKey::QueueDepth(vhost.name.to_string(), queue.name.to_string());
            rates.record_levels(sweep, key, at_ms, &depth(figures.ready, figures.unacked));
        }
        let name = vhost.name.to_string();
        let mut counts = vhost_counts(&vhost);
        counts.extend(state_vhost_octets(state, &vhost.name));
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
    for connection in state.connections.list() {
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
    state_overview_counts(&api.state)
}

fn state_overview_counts(state: &BrokerState) -> Counts {
    let totals = state.stats.totals();
    let (mut deliver_get, mut ack, mut redeliver) = (0, 0, 0);
    for vhost in state.all_vhosts() {
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
    state_vhost_octets(&api.state, vhost)
}

fn state_vhost_octets(state: &BrokerState, vhost: &str) -> Counts {
    let (mut recv, mut send) = (0, 0);
    for c in state.connections.list() {
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
