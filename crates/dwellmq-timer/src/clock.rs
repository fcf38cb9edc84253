//! Sources of "now" for the scheduler.
//!
//! Everything time-dependent in the broker asks a [`Clock`] instead of the
//! operating system, so tests can drive time by hand with [`ManualClock`]
//! and production uses [`crate::SystemClock`], the only place in this crate
//! that reads the system clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The broker's time, with millisecond resolution.
///
/// One timeline for every deadline: relative ones (a delay, a TTL) are
/// `now_ms() + duration`, and what is stored is a time on it. It never goes
/// backwards.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch, on this clock.
    fn now_ms(&self) -> u64;

    /// How long from now until millisecond `due_ms` begins, as precisely as
    /// this clock can tell (a sleeping thread's timeout); zero once it has.
    fn until(&self, due_ms: u64) -> Duration {
        Duration::from_millis(due_ms.saturating_sub(self.now_ms()))
    }
}

/// A clock shared between the components that need one.
pub type SharedClock = Arc<dyn Clock>;

/// A clock that moves only when told to; for tests and simulations.
///
/// Time never moves backwards: like a monotonic clock, every read is at
/// least as late as every earlier read, which is what the scheduler's
/// callers are written against.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicU64,
}

impl ManualClock {
    /// A clock that reads `start_ms` until moved.
    pub fn new(start_ms: u64) -> Self {
        Self {
            now_ms: AtomicU64::new(start_ms),
        }
    }

    /// Moves time forward by `by`, truncated to whole milliseconds and
    /// saturating at `u64::MAX`.
    ///
    /// Sub-millisecond remainders are dropped, not carried over, so
    /// `advance(Duration::from_micros(500))` does not move the clock.
    pub fn advance(&self, by: Duration) {
        let by_ms = duration_to_ms(by);
        // fetch_update keeps concurrent advances additive without a lock.
        let _previous = self
            .now_ms
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                Some(now.saturating_add(by_ms))
            });
    }

    /// Sets the time to `ms` if that is later than the current time.
    ///
    /// An earlier `ms` is ignored (the clock never moves backwards), so
    /// `set_now` can be called with possibly stale values from several
    /// threads and the clock still only moves forward.
    pub fn set_now(&self, ms: u64) {
        self.now_ms.fetch_max(ms, Ordering::AcqRel);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::Acquire)
    }
}

/// Whole milliseconds in `duration`, saturating instead of truncating the
/// `u128` count.
pub(crate) fn duration_to_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        assert_eq!(clock.now_ms(), 1_000);

        clock.advance(Duration::from_millis(250));
        assert_eq!(clock.now_ms(), 1_250);

        clock.set_now(5_000);
        assert_eq!(clock.now_ms(), 5_000);
    }

    #[test]
    fn manual_clock_never_moves_backwards() {
        let clock = ManualClock::new(5_000);
        clock.set_now(4_999);
        assert_eq!(clock.now_ms(), 5_000);
        clock.set_now(0);
        assert_eq!(clock.now_ms(), 5_000);
    }

    #[test]
    fn manual_clock_truncates_and_saturates() {
        let clock = ManualClock::new(10);
        clock.advance(Duration::from_micros(1_999));
        assert_eq!(clock.now_ms(), 11);

        clock.advance(Duration::MAX);
        assert_eq!(clock.now_ms(), u64::MAX);
        clock.advance(Duration::from_millis(1));
        assert_eq!(clock.now_ms(), u64::MAX);
    }

    #[test]
    fn manual_clock_is_usable_as_shared_clock() {
        let manual = Arc::new(ManualClock::new(7));
        let shared: SharedClock = manual.clone();
        manual.advance(Duration::from_secs(1));
        assert_eq!(shared.now_ms(), 1_007);
    }

    #[test]
    fn manual_clock_advances_add_up_across_threads() {
        let clock = Arc::new(ManualClock::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let clock = Arc::clone(&clock);
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        clock.advance(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("advancing thread panicked");
        }
        assert_eq!(clock.now_ms(), 4_000);
    }
}
