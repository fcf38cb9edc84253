//! How late delayed messages are released: a histogram for `/metrics`.
//!
//! Lateness is the release time the timer thread acted on minus the due time, at millisecond
//! resolution: it shows a timer thread that fell behind (a busy host, a stalled lock), not the
//! time a delivery then takes to reach a consumer.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the buckets, in milliseconds (Prometheus's `le`, in seconds, is this / 1000).
pub(crate) const BOUNDS_MS: [u64; 13] =
    [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000];

/// Per-release-call counts, added to the shared histogram once per call.
#[derive(Default)]
pub(super) struct LatenessBatch {
    buckets: [u64; BOUNDS_MS.len() + 1],
    sum_ms: u64,
}

impl LatenessBatch {
    pub(super) fn record(&mut self, lateness_ms: u64) {
        let at = BOUNDS_MS
            .iter()
            .position(|&bound| lateness_ms <= bound)
            .unwrap_or(BOUNDS_MS.len());
        self.buckets[at] += 1;
        self.sum_ms = self.sum_ms.saturating_add(lateness_ms);
    }
}

/// Release lateness since start.
#[derive(Default)]
pub(crate) struct Lateness {
    /// Non-cumulative counts per bucket; the last is above the highest bound.
    buckets: [AtomicU64; BOUNDS_MS.len() + 1],
    sum_ms: AtomicU64,
}

/// A snapshot: cumulative counts per bound (Prometheus's `_bucket`), count and sum.
pub(crate) struct LatenessSnapshot {
    pub(crate) cumulative: [u64; BOUNDS_MS.len()],
    pub(crate) count: u64,
    pub(crate) sum_ms: u64,
}

impl Lateness {
    pub(super) fn add(&self, batch: &LatenessBatch) {
        for (total, &n) in self.buckets.iter().zip(&batch.buckets) {
            if n > 0 {
                total.fetch_add(n, Ordering::Relaxed);
            }
        }
        self.sum_ms.fetch_add(batch.sum_ms, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LatenessSnapshot {
        let mut cumulative = [0; BOUNDS_MS.len()];
        let mut running = 0;
        for (i, slot) in cumulative.iter_mut().enumerate() {
            running += self.buckets[i].load(Ordering::Relaxed);
            *slot = running;
        }
        let count = running + self.buckets[BOUNDS_MS.len()].load(Ordering::Relaxed);
        LatenessSnapshot {
            cumulative,
            count,
            sum_ms: self.sum_ms.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_with_everything_counted() {
        let lateness = Lateness::default();
        let mut batch = LatenessBatch::default();
        for ms in [0, 1, 2, 7, 20_000] {
            batch.record(ms);
        }
        lateness.add(&batch);
        let s = lateness.snapshot();
        assert_eq!(&s.cumulative[..4], &[2, 3, 3, 4]);
        assert_eq!(
            s.cumulative[BOUNDS_MS.len() - 1],
            4,
            "20 s is above every bound"
        );
        assert_eq!((s.count, s.sum_ms), (5, 20_010));
    }
}
