//! The broker's clock in production: the wall clock read once, then monotonic time.
//!
//! Every deadline in the broker is "milliseconds since the epoch" on one timeline, used both
//! for relative deadlines (a delay, a TTL) and for what is stored (a held message's due time).
//! Reading the wall clock on every call made that timeline jump whenever the host's clock was
//! stepped (NTP correcting, a VM resumed, `date -s`): a step forward of an hour released every
//! message due within that hour at once, a step back made everything wait an hour longer.
//! [`SystemClock`] reads the wall clock once, when it is made, and from then on adds the time
//! a monotonic clock ([`Instant`]) has measured: a step of the wall clock while it runs moves
//! nothing. It equals the wall clock at start and differs from it afterwards only by the steps
//! since then (on Linux NTP's slewing adjusts the monotonic clock too; elsewhere they may
//! drift apart by the clocks' frequency error, seconds a day at worst).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::clock::{duration_to_ms, Clock};

/// Where a [`SystemClock`] reads the wall clock when it is made.
pub trait WallSource: Send + Sync + std::fmt::Debug + 'static {
    /// Time since the Unix epoch; [`Duration::ZERO`] for a time before it.
    fn since_epoch(&self) -> Duration;
}

/// The host's wall clock ([`SystemTime::now`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct HostWall;

impl WallSource for HostWall {
    fn since_epoch(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }
}

/// The host's wall clock plus an offset a test changes: a wall clock that can be stepped
/// without stepping the machine's (which needs privileges and disturbs everything else on
/// it). The monotonic clock is untouched by a step, as with a real one.
///
/// Two `SteppableWall`s are equal only if they are the same one: each is its own clock.
#[derive(Debug, Default)]
pub struct SteppableWall {
    offset_ms: AtomicI64,
}

impl SteppableWall {
    /// A wall clock reading the host's until stepped (usable in a `static`).
    pub const fn new() -> Self {
        Self {
            offset_ms: AtomicI64::new(0),
        }
    }

    /// Steps the clock forward by `by` (whole milliseconds).
    pub fn step_forward(&self, by: Duration) {
        self.offset_ms.fetch_add(signed_ms(by), Ordering::AcqRel);
    }

    /// Steps the clock back by `by` (whole milliseconds).
    pub fn step_back(&self, by: Duration) {
        self.offset_ms.fetch_sub(signed_ms(by), Ordering::AcqRel);
    }

    /// How far this clock is ahead of the host's, in milliseconds (negative: behind).
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Acquire)
    }
}

impl PartialEq for SteppableWall {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for SteppableWall {}

impl WallSource for SteppableWall {
    fn since_epoch(&self) -> Duration {
        let host = HostWall.since_epoch();
        let offset = self.offset_ms();
        let by = Duration::from_millis(offset.unsigned_abs());
        match offset >= 0 {
            true => host.saturating_add(by),
            false => host.saturating_sub(by),
        }
    }
}

/// The wall clock at the moment this clock was made, advanced by monotonic time since.
///
/// Reads never go backwards and a step of the wall clock does not move them; see the module
/// documentation for why. A time before the Unix epoch reads as `0`; one past `u64::MAX`
/// milliseconds as `u64::MAX`.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    wall_at_start: Duration,
    mono_at_start: Instant,
    wall: &'static dyn WallSource,
}

impl SystemClock {
    /// A clock anchored to the host's wall clock now.
    pub fn new() -> Self {
        Self::anchored_to(&HostWall)
    }

    /// A clock anchored to `wall` now (tests use a [`SteppableWall`]).
    pub fn anchored_to(wall: &'static dyn WallSource) -> Self {
        Self {
            wall_at_start: wall.since_epoch(),
            mono_at_start: Instant::now(),
            wall,
        }
    }

    /// How far the wall clock is ahead of this clock now, in milliseconds (negative:
    /// behind): the sum of the wall clock's steps since this clock was made.
    pub fn wall_offset_ms(&self) -> i64 {
        let wall = self.wall.since_epoch();
        let now = self.since_epoch();
        match wall >= now {
            true => signed_ms(wall - now),
            false => -signed_ms(now - wall),
        }
    }

    fn since_epoch(&self) -> Duration {
        self.wall_at_start
            .saturating_add(self.mono_at_start.elapsed())
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        duration_to_ms(self.since_epoch())
    }

    fn until(&self, due_ms: u64) -> Duration {
        Duration::from_millis(due_ms).saturating_sub(self.since_epoch())
    }
}

/// Whole milliseconds in `duration` as an `i64`, saturating.
fn signed_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3_600);

    /// Elapsed monotonic time around `f`, and what `f` returned.
    fn bracketed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
        let before = Instant::now();
        let value = f();
        (before.elapsed(), value)
    }

    #[test]
    fn system_clock_reads_a_plausible_time() {
        // 2020-01-01T00:00:00Z; any machine running this is past it.
        const JAN_2020_MS: u64 = 1_577_836_800_000;
        let first = SystemClock::new().now_ms();
        assert!(first > JAN_2020_MS, "system clock reads {first}");
    }

    #[test]
    fn it_starts_at_the_wall_clock() {
        static WALL: SteppableWall = SteppableWall::new();
        WALL.step_forward(HOUR);
        let (elapsed, (wall_ms, clock_ms)) = bracketed(|| {
            let wall_ms = duration_to_ms(WALL.since_epoch());
            let clock = SystemClock::anchored_to(&WALL);
            (wall_ms, clock.now_ms())
        });
        assert!(
            clock_ms >= wall_ms,
            "{clock_ms} before the wall's {wall_ms}"
        );
        assert!(clock_ms <= wall_ms + duration_to_ms(elapsed) + 1);
    }

    #[test]
    fn stepping_the_wall_forward_an_hour_moves_it_only_by_elapsed_time() {
        static WALL: SteppableWall = SteppableWall::new();
        let clock = SystemClock::anchored_to(&WALL);
        let (elapsed, (before, after)) = bracketed(|| {
            let before = clock.now_ms();
            WALL.step_forward(HOUR);
            (before, clock.now_ms())
        });
        assert!(after >= before);
        assert!(
            after - before <= duration_to_ms(elapsed) + 1,
            "moved {} ms in {elapsed:?}",
            after - before
        );
        // The step is seen as the wall clock's offset from the broker's, no more.
        let offset = clock.wall_offset_ms();
        assert!((3_599_000..=3_601_000).contains(&offset), "offset {offset}");
    }

    #[test]
    fn stepping_the_wall_back_an_hour_does_not_stop_it() {
        static WALL: SteppableWall = SteppableWall::new();
        let clock = SystemClock::anchored_to(&WALL);
        let sleep = Duration::from_millis(20);
        let (elapsed, (before, after)) = bracketed(|| {
            let before = clock.now_ms();
            WALL.step_back(HOUR);
            std::thread::sleep(sleep);
            (before, clock.now_ms())
        });
        // It kept counting (a clock reading the wall would be an hour behind `before`).
        assert!(
            after >= before + duration_to_ms(sleep),
            "{before} -> {after}"
        );
        assert!(after - before <= duration_to_ms(elapsed) + 1);
        let offset = clock.wall_offset_ms();
        assert!(
            (-3_601_000..=-3_599_000).contains(&offset),
            "offset {offset}"
        );
    }

    #[test]
    fn until_counts_down_on_monotonic_time_whatever_the_wall_does() {
        static WALL: SteppableWall = SteppableWall::new();
        let clock = SystemClock::anchored_to(&WALL);
        let due = clock.now_ms() + 60_000;
        WALL.step_forward(HOUR);
        let forward = clock.until(due);
        WALL.step_back(2 * HOUR);
        let back = clock.until(due);
        for left in [forward, back] {
            assert!(left > Duration::from_secs(59), "{left:?}");
            assert!(left <= Duration::from_secs(60), "{left:?}");
        }
        assert_eq!(clock.until(clock.now_ms()), Duration::ZERO);
    }

    #[test]
    fn a_new_clock_takes_the_wall_clock_as_stepped() {
        // A restart: the step made while the old clock ran is the new clock's start.
        static WALL: SteppableWall = SteppableWall::new();
        let old = SystemClock::anchored_to(&WALL);
        WALL.step_forward(HOUR);
        let new = SystemClock::anchored_to(&WALL);
        let ahead = new.now_ms() - old.now_ms();
        assert!((3_599_000..=3_601_000).contains(&ahead), "ahead {ahead}");
    }

    #[test]
    fn steppable_walls_are_equal_only_to_themselves() {
        static ONE: SteppableWall = SteppableWall::new();
        static OTHER: SteppableWall = SteppableWall::new();
        assert_eq!(&ONE, &ONE);
        assert_ne!(&ONE, &OTHER);
    }
}
