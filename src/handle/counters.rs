//! The broker's message counters since start (or the last reset), for tests.

use std::sync::atomic::Ordering;

use dwellmq_core::queue::DeathReason;

use super::BrokerHandle;
use crate::broker::BrokerState;

/// The reasons a message dies, in the order [`Counters::dead_lettered`] lists them.
pub const DEATH_REASONS: [DeathReason; 4] = [
    DeathReason::Rejected,
    DeathReason::Expired,
    DeathReason::Maxlen,
    DeathReason::DeliveryLimit,
];

/// Message counters since start or the last [`BrokerHandle::reset`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Messages published (on a channel or over HTTP).
    pub published: u64,
    /// Published messages that found a queue or a delayed exchange.
    pub routed: u64,
    /// Published messages no queue took, dropped (not mandatory); held messages that found no
    /// route at release are counted too.
    pub unroutable: u64,
    /// Published messages no queue took, returned to a mandatory publisher.
    pub returned: u64,
    /// Publishes confirmed with `basic.ack`.
    pub confirmed: u64,
    /// Publishes answered with `basic.nack`.
    pub nacked: u64,
    /// Deliveries to consumers with the `redelivered` flag.
    pub redelivered: u64,
    /// Messages dead-lettered, by reason (in [`DEATH_REASONS`] order).
    pub dead_lettered: [(DeathReason, u64); 4],
    /// Messages that died without a dead-letter exchange and were dropped, by reason.
    pub dropped: [(DeathReason, u64); 4],
    /// Messages that expired (dead-lettered or dropped).
    pub expired: u64,
}

impl Counters {
    /// Messages dead-lettered for `reason`.
    pub fn dead_lettered_for(&self, reason: DeathReason) -> u64 {
        self.dead_lettered
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }
}

/// The counters of `state`.
pub(crate) fn counters(state: &BrokerState) -> Counters {
    let totals = state.stats.totals();
    let deaths = &state.queue_services().deaths;
    let dead_lettered = DEATH_REASONS.map(|r| (r, deaths.get(r).0));
    let dropped = DEATH_REASONS.map(|r| (r, deaths.get(r).1));
    let (expired_dl, expired_dropped) = deaths.get(DeathReason::Expired);
    Counters {
        published: totals.published,
        routed: totals.routed,
        unroutable: totals.unroutable_dropped + state.delayed.unroutable(),
        returned: totals.unroutable_returned,
        confirmed: totals.confirmed,
        nacked: totals.nacked,
        redelivered: state.hooks().redelivered.load(Ordering::Relaxed),
        dead_lettered,
        dropped,
        expired: expired_dl + expired_dropped,
    }
}

impl BrokerHandle {
    /// Message counters since start or the last [`BrokerHandle::reset`].
    pub fn counters(&self) -> Counters {
        counters(&self.state)
    }

    /// Takes a rate sample now, as the HTTP API's sampler does on its own every 5 s (RabbitMQ's
    /// `collect_statistics_interval`): every `_details.rate` the API shows is the increase per
    /// second between the last two samples. Under a manual clock samples are taken at the
    /// clock's time, so a test that samples, moves the clock and samples again gets exact
    /// rates (a second sample at the same instant changes nothing). Rates exist only for the
    /// HTTP API, so this needs the `http` feature.
    #[cfg(feature = "http")]
    pub async fn sample_rates(&self) {
        let at_ms = crate::http::sampler::sample_time(&self.state);
        crate::http::sampler::sample(&self.state, at_ms).await;
    }
}
