//! The scheduler loop the broker runs, driven by a `ManualClock`: ask the
//! wheel when to wake, move the clock, advance the wheel to the clock.

use std::sync::Arc;
use std::time::Duration;

use dwellmq_timer::{Clock, Fired, ManualClock, SharedClock, TimerWheel};

#[test]
fn wheel_driven_by_manual_clock_fires_on_time() {
    let manual = Arc::new(ManualClock::new(1_000));
    let clock: SharedClock = manual.clone();
    let mut wheel = TimerWheel::new(clock.now_ms());

    wheel.insert(clock.now_ms() + 500, "half-second");
    wheel.insert(clock.now_ms() + 60_000, "minute");
    let mut fired = Vec::new();

    // Sleeping until `next_due` and advancing to the clock fires exactly
    // the timer that woke us.
    let wake_at = wheel.next_due().expect("two timers pending");
    assert_eq!(wake_at, 1_500);
    manual.set_now(wake_at);
    wheel.advance(clock.now_ms(), &mut fired);
    assert_eq!(
        fired,
        vec![Fired {
            due_ms: 1_500,
            value: "half-second"
        }]
    );

    // A spurious early wake-up fires nothing.
    fired.clear();
    manual.advance(Duration::from_secs(1));
    wheel.advance(clock.now_ms(), &mut fired);
    assert!(fired.is_empty());

    // A late wake-up fires what became due meanwhile, with its due time.
    manual.advance(Duration::from_secs(120));
    wheel.advance(clock.now_ms(), &mut fired);
    assert_eq!(
        fired,
        vec![Fired {
            due_ms: 61_000,
            value: "minute"
        }]
    );
    assert_eq!(wheel.now(), 122_500);
}

#[test]
fn manual_clock_ignores_attempts_to_go_back() {
    let clock = ManualClock::new(10_000);
    clock.set_now(9_000);
    assert_eq!(clock.now_ms(), 10_000);
    clock.advance(Duration::ZERO);
    assert_eq!(clock.now_ms(), 10_000);
    clock.set_now(10_001);
    assert_eq!(clock.now_ms(), 10_001);
}
