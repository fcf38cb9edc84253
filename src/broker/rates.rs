//! Message rates as RabbitMQ's management API shows them: `message_stats` with each counter and
//! its `_details: {"rate": per second}`.
//!
//! Objects keep plain counters (queues and exchanges count as messages pass, channels in their
//! own task); a sampler reads them every [`SAMPLE_INTERVAL`] and keeps, per object, the last
//! reading and the rate since the one before. Reading the API never computes anything but a
//! lookup.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
#[cfg(feature = "http")]
use serde_json::{Map, Value};

/// How often the sampler reads the counters (RabbitMQ's default `collect_statistics_interval`).
pub(crate) const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

/// What a rate belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum RateKey {
    Overview,
    Queue(String, String),
    Exchange(String, String),
    /// A queue's depth (ready, unacked, both): levels, whose rates may be negative.
    QueueDepth(String, String),
    VHost(String),
    VHostDepth(String),
    /// (connection id, channel number).
    Channel(u64, u16),
}

/// Named counters of one object, in a fixed order per kind.
pub(crate) type Counts = Vec<(&'static str, u64)>;

struct Sample {
    at_ms: u64,
    counts: Vec<u64>,
    rates: Vec<f64>,
    /// The sweep that last saw this object (objects gone are dropped).
    sweep: u64,
}

/// The last sample and rate of every object.
pub(crate) struct Rates {
    samples: Mutex<HashMap<RateKey, Sample>>,
    sweep: AtomicU64,
    /// When the rates began: the origin of the sampler's real time.
    started: std::time::Instant,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            samples: Mutex::default(),
            sweep: AtomicU64::default(),
            started: std::time::Instant::now(),
        }
    }
}

impl Rates {
    /// Real time since the rates began.
    pub(crate) fn since_start(&self) -> Duration {
        self.started.elapsed()
    }

    /// Starts a sampling pass.
    pub(crate) fn begin_sweep(&self) -> u64 {
        self.sweep.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Records `counts` of `key` read at `at_ms` (any monotonic milliseconds); the rate is
    /// the increase per second since the previous reading (never negative: a counter that
    /// went down belongs to a recreated object).
    pub(crate) fn record(&self, sweep: u64, key: RateKey, at_ms: u64, counts: &Counts) {
        self.record_with(sweep, key, at_ms, counts, false);
    }

    /// As `record`, for levels (a queue's depth): the rate is the change per second, negative
    /// when the level went down.
    pub(crate) fn record_levels(&self, sweep: u64, key: RateKey, at_ms: u64, levels: &Counts) {
        self.record_with(sweep, key, at_ms, levels, true);
    }

    fn record_with(&self, sweep: u64, key: RateKey, at_ms: u64, counts: &Counts, signed: bool) {
        let values: Vec<u64> = counts.iter().map(|(_, n)| *n).collect();
        let mut samples = self.samples.lock();
        if let Some(same) = samples.get_mut(&key).filter(|prev| prev.at_ms == at_ms) {
            // A second reading at the same instant (a manual clock that did not move, the
            // sampler and a test's sample both) changes nothing: the next rate is measured
            // from the first.
            same.sweep = sweep;
            return;
        }
        let rates = match samples.get(&key) {
            Some(prev) if at_ms > prev.at_ms && prev.counts.len() == values.len() => {
                let seconds = (at_ms - prev.at_ms) as f64 / 1000.0;
                values
                    .iter()
                    .zip(&prev.counts)
                    .map(|(now, before)| {
                        let change = if signed {
                            *now as f64 - *before as f64
                        } else {
                            now.saturating_sub(*before) as f64
                        };
                        change / seconds
                    })
                    .collect()
            }
            Some(prev) => prev.rates.clone(),
            None => vec![0.0; values.len()],
        };
        samples.insert(
            key,
            Sample {
                at_ms,
                counts: values,
                rates,
                sweep,
            },
        );
    }

    /// Forgets objects the sweep did not see.
    pub(crate) fn end_sweep(&self, sweep: u64) {
        self.samples.lock().retain(|_, s| s.sweep == sweep);
    }

    /// The last sampled rate of each of `key`'s values (zeros before two samples).
    pub(crate) fn rates_of(&self, key: &RateKey, len: usize) -> Vec<f64> {
        let mut rates = self
            .samples
            .lock()
            .get(key)
            .map(|s| s.rates.clone())
            .unwrap_or_default();
        rates.resize(len, 0.0);
        // Rounded as RabbitMQ shows them (one decimal).
        rates
            .iter_mut()
            .for_each(|r| *r = (*r * 10.0).round() / 10.0);
        rates
    }

    /// RabbitMQ's `message_stats` for `counts` (read now), with the rates last sampled.
    #[cfg(feature = "http")]
    pub(crate) fn message_stats(&self, key: &RateKey, counts: &Counts) -> Value {
        let rates = self
            .samples
            .lock()
            .get(key)
            .map(|s| s.rates.clone())
            .unwrap_or_default();
        let mut out = Map::new();
        for (i, (name, n)) in counts.iter().enumerate() {
            let rate = rates.get(i).copied().unwrap_or(0.0);
            // Rounded as RabbitMQ shows them (one decimal).
            let rate = (rate * 10.0).round() / 10.0;
            out.insert((*name).to_string(), (*n).into());
            out.insert(
                format!("{name}_details"),
                serde_json::json!({ "rate": rate }),
            );
        }
        Value::Object(out)
    }
}

/// A queue's counters: messages in (`publish`), delivered to consumers (`deliver`), taken by
/// `basic.get` (`get`), acknowledged (`ack`), delivered again (`redeliver`). One relaxed add
/// beside each queue command, which has just taken the queue's lock: the core doing it
/// already works on this queue, so the adds rarely contend.
#[derive(Default)]
pub(crate) struct QueueCounters {
    pub(crate) publish: AtomicU64,
    pub(crate) deliver: AtomicU64,
    pub(crate) get: AtomicU64,
    pub(crate) ack: AtomicU64,
    pub(crate) redeliver: AtomicU64,
}

impl QueueCounters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// As RabbitMQ names them (`deliver_get` = deliveries and gets).
    pub(crate) fn counts(&self) -> Counts {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (deliver, get) = (read(&self.deliver), read(&self.get));
        vec![
            ("publish", read(&self.publish)),
            ("deliver", deliver),
            ("get", get),
            ("deliver_get", deliver + get),
            ("ack", read(&self.ack)),
            ("redeliver", read(&self.redeliver)),
        ]
    }
}

/// An exchange's counters: messages published to it (`publish_in`) and routed on from it
/// (`publish_out`). Channels add to them once per batch of frames, not per message.
#[derive(Default)]
pub(crate) struct ExchangeCounters {
    pub(crate) publish_in: AtomicU64,
    pub(crate) publish_out: AtomicU64,
}

impl ExchangeCounters {
    /// One message published outside any channel (over HTTP); `routed`: some queue took it.
    pub(crate) fn published_one(&self, routed: bool) {
        self.publish_in.fetch_add(1, Ordering::Relaxed);
        self.publish_out
            .fetch_add(u64::from(routed), Ordering::Relaxed);
    }

    pub(crate) fn counts(&self) -> Counts {
        vec![
            ("publish_in", self.publish_in.load(Ordering::Relaxed)),
            ("publish_out", self.publish_out.load(Ordering::Relaxed)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "http")]
    fn rates_are_increases_per_second_between_samples() {
        let rates = Rates::default();
        let key = RateKey::Queue("/".into(), "q".into());
        let counts = |n: u64| -> Counts { vec![("publish", n), ("ack", n / 2)] };
        let sweep = rates.begin_sweep();
        rates.record(sweep, key.clone(), 1_000, &counts(100));
        let stats = rates.message_stats(&key, &counts(100));
        assert_eq!(stats["publish"], 100);
        assert_eq!(stats["publish_details"]["rate"], 0.0);

        let sweep = rates.begin_sweep();
        rates.record(sweep, key.clone(), 6_000, &counts(600));
        let stats = rates.message_stats(&key, &counts(650));
        assert_eq!(stats["publish"], 650, "counts are read now");
        assert_eq!(stats["publish_details"]["rate"], 100.0);
        assert_eq!(stats["ack_details"]["rate"], 50.0);

        // A recreated object's counter starts again: no negative rate.
        let sweep = rates.begin_sweep();
        rates.record(sweep, key.clone(), 11_000, &counts(10));
        assert_eq!(
            rates.message_stats(&key, &counts(10))["publish_details"]["rate"],
            0.0
        );
        // Objects a sweep does not see are forgotten.
        let sweep = rates.begin_sweep();
        rates.end_sweep(sweep);
        assert_eq!(
            rates.message_stats(&key, &counts(10))["ack_details"]["rate"],
            0.0
        );
    }
}

/// A channel's counters, owned by its connection's task: plain numbers, and what it owes the
/// exchange it publishes to, added to the exchange's counters once per batch of frames.
#[derive(Default)]
pub(crate) struct ChannelCounters {
    pub(crate) publish: u64,
    pub(crate) confirm: u64,
    /// A `Cell`: acks are counted where the channel is only borrowed.
    pub(crate) ack: std::cell::Cell<u64>,
    /// The exchange last published to, with the (in, out) counts not yet added to it.
    owed: Option<(std::sync::Arc<super::exchange::Exchange>, u64, u64)>,
}

impl ChannelCounters {
    /// A message published to `exchange` (`routed`: some queue or exchange took it).
    pub(crate) fn published(
        &mut self,
        exchange: &std::sync::Arc<super::exchange::Exchange>,
        routed: bool,
    ) {
        self.publish += 1;
        match &mut self.owed {
            Some((x, publish_in, publish_out)) if std::sync::Arc::ptr_eq(x, exchange) => {
                *publish_in += 1;
                *publish_out += u64::from(routed);
            }
            _ => {
                self.flush();
                self.owed = Some((std::sync::Arc::clone(exchange), 1, u64::from(routed)));
            }
        }
    }

    /// Adds what is owed to the exchange's counters (the exchange is kept, so the next
    /// publish to it takes no reference).
    pub(crate) fn flush(&mut self) {
        if let Some((x, publish_in, publish_out)) = &mut self.owed {
            if *publish_in > 0 {
                x.counters
                    .publish_in
                    .fetch_add(*publish_in, Ordering::Relaxed);
                x.counters
                    .publish_out
                    .fetch_add(*publish_out, Ordering::Relaxed);
                *publish_in = 0;
                *publish_out = 0;
            }
        }
    }

    pub(crate) fn acked(&self, n: u64) {
        self.ack.set(self.ack.get() + n);
    }
}
