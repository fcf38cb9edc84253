//! The one loop that serves deadlines, whoever drives it: the timer thread sleeps between
//! rounds, a manual clock steps to the next deadline (so a chain of deadlines, a message that
//! expires into a queue where it waits again, plays out as it would in real time).

use std::time::Duration;

use super::{Holder, Scheduler};

/// How a driver reads the time and waits between rounds.
pub(crate) trait Drive {
    /// The time to serve at.
    fn now_ms(&self) -> u64;

    /// Nothing is due at `now_ms`; `next` is the next deadline (`None`: none). Waits for it (a
    /// sleep, or a step of a manual clock); false to stop driving.
    fn wait(&mut self, now_ms: u64, next: Option<u64>) -> bool;

    /// Whether to stop before the next round.
    fn stopped(&self) -> bool {
        false
    }

    /// How long moving items into the wheel may take per round before releases get their
    /// turn again (`None`: no limit).
    fn move_in_budget(&self) -> Option<Duration> {
        None
    }

    /// Rounds at one instant after which the driver stops (`None`: never). A deadline that
    /// keeps re-arming itself at the same instant is a bug, and must not hang a test that
    /// moves a manual clock.
    fn rounds_at_one_instant(&self) -> Option<u32> {
        None
    }
}

impl<H: Holder> Scheduler<H> {
    /// Serves rounds as `driver` says, every deadline at its own time, in due order, until the
    /// driver stops; returns how many held items were released.
    pub(crate) fn serve_until(&self, driver: &mut impl Drive, holder: &H) -> usize {
        let mut released = 0;
        // (instant, rounds served at it)
        let mut rounds = (u64::MAX, 0u32);
        while !driver.stopped() {
            let now = driver.now_ms();
            let next = self.next_wake();
            if next.is_none_or(|at| at > now) {
                if !driver.wait(now, next) {
                    break;
                }
                continue;
            }
            rounds = match rounds {
                (at, n) if at == now => (at, n.saturating_add(1)),
                _ => (now, 1),
            };
            if driver
                .rounds_at_one_instant()
                .is_some_and(|limit| rounds.1 > limit)
            {
                tracing::warn!(
                    now,
                    "deadlines keep falling due at one instant; stopped serving them"
                );
                break;
            }
            released += self.serve_round(now, driver.move_in_budget(), holder);
        }
        released
    }
}
