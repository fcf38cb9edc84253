//! The thread that acts on every deadline under the system clock: delayed messages released
//! on time, queues ticked for message TTLs and `x-expires`.
//!
//! It is an OS thread rather than a tokio task for two reasons: it must not wait behind
//! connection tasks that are busy parsing a large read batch (a release a few milliseconds late
//! is what this broker exists to avoid), and `park_timeout` wakes with sub-millisecond
//! precision where the runtime's timer rounds up to whole milliseconds. It sleeps until the next
//! deadline and is unparked early when a message needs it sooner. How long to sleep is asked of
//! the broker's clock (`Clock::until`), which counts monotonic time: a step of the host's wall
//! clock neither wakes it early nor keeps it asleep. Under a manual clock there is no such
//! thread: `BrokerHandle::advance` releases what is due itself.
//!
//! With a data directory a second thread, the disk mover, moves messages held on disk into the
//! wheel a horizon before they are due. Reading their bodies from the store, and waiting for
//! the disk tier's lock (whose holder the OS may have descheduled), take milliseconds at times
//! on a busy machine: the timer thread must wait for neither.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::scheduler::Drive;
pub(crate) use super::scheduler::TimerControl;
use super::BrokerState;

/// How long one round of moving messages into the wheel may take before releases get their
/// turn again (moving in runs a horizon ahead, so it can catch up later).
const MOVE_IN_BUDGET: Duration = Duration::from_micros(300);

/// Starts the timer thread for `state` (system clock only), and the disk mover when messages
/// are held on disk; joining the timer thread joins both.
pub(crate) fn spawn(state: Arc<BrokerState>) -> std::io::Result<JoinHandle<()>> {
    let mover = match state.delayed.has_disk() {
        true => {
            let state = Arc::clone(&state);
            Some(
                std::thread::Builder::new()
                    .name("dwellmq-disk-mover".into())
                    .spawn(move || run_disk_mover(&state))?,
            )
        }
        false => None,
    };
    std::thread::Builder::new()
        .name("dwellmq-timer".into())
        .spawn(move || {
            run(&state);
            if let Some(mover) = mover {
                let _ = mover.join();
            }
        })
}

/// The timer thread's way of driving the scheduler: the system clock, sleeping between rounds.
struct Sleeper<'a> {
    state: &'a BrokerState,
}

impl Drive for Sleeper<'_> {
    fn now_ms(&self) -> u64 {
        self.state.clock.now_ms()
    }

    fn wait(&mut self, _now_ms: u64, next: Option<u64>) -> bool {
        match next {
            Some(due) => std::thread::park_timeout(self.state.clock.until(due)),
            None => std::thread::park(),
        }
        true
    }

    fn stopped(&self) -> bool {
        self.state.timer.stopped()
    }

    fn move_in_budget(&self) -> Option<Duration> {
        Some(MOVE_IN_BUDGET)
    }
}

fn run(state: &BrokerState) {
    // Registered before the first look at the deadlines, so no wake-up can be missed.
    state.timer.register_timer();
    if let Some(priority) = state.config.timer_realtime_priority {
        set_realtime_priority(priority);
    }
    let scheduler = &state.runtime.scheduler;
    scheduler.serve_until(&mut Sleeper { state }, &state.delayed);
}

/// How long the mover waits before trying again when moving in failed (a store read error).
const MOVER_RETRY: Duration = Duration::from_millis(100);

/// The disk mover: it moves what is due within the horizon, then sleeps until the disk tier's
/// next move-in, a deadline the tier arms in the scheduler like any other: the timer thread
/// wakes the mover then (an unpark: it never takes the disk tier's lock itself).
fn run_disk_mover(state: &BrokerState) {
    state.timer.register_mover();
    state.delayed.hand_disk_to_mover();
    // The timer thread may be asleep until a disk move-in it no longer makes.
    state.timer.wake_timer();
    while !state.timer.stopped() {
        let now = state.clock.now_ms();
        match state.delayed.next_disk_move(now) {
            Some(at) if at <= now => {
                if state.delayed.move_in_disk(now) > 0 {
                    // The timer thread's next deadline may be sooner now.
                    state.timer.wake_timer();
                } else {
                    // Due but not moved: the store refused the read (logged); try again soon
                    // rather than spin.
                    std::thread::park_timeout(MOVER_RETRY);
                }
            }
            // Its move-in is armed in the scheduler, which wakes the mover then.
            _ => std::thread::park(),
        }
    }
}

/// Puts the calling thread under `SCHED_FIFO` at `priority`; logs and carries on if refused.
#[cfg(target_os = "linux")]
fn set_realtime_priority(priority: u8) {
    let param = libc::sched_param {
        sched_priority: i32::from(priority.clamp(1, 99)),
    };
    // SAFETY: plain syscall on the calling thread (pid 0) with a valid, initialised parameter.
    #[allow(unsafe_code)]
    let result = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if result == 0 {
        tracing::info!(priority, "timer thread runs under SCHED_FIFO");
    } else {
        let error = std::io::Error::last_os_error();
        tracing::warn!(priority, %error, "cannot give the timer thread a real-time priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn set_realtime_priority(priority: u8) {
    tracing::warn!(
        priority,
        "real-time priority for the timer thread is Linux-only; ignored"
    );
}
