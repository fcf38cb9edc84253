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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use super::BrokerState;

/// How long one round of moving messages into the wheel may take before releases get their
/// turn again (moving in runs a horizon ahead, so it can catch up later).
const MOVE_IN_BUDGET: Duration = Duration::from_micros(300);

/// How the rest of the broker reaches the timer thread.
#[derive(Default)]
pub(crate) struct TimerControl {
    thread: OnceLock<Thread>,
    mover: OnceLock<Thread>,
    stop: AtomicBool,
}

impl TimerControl {
    /// Makes the timer thread (and the disk mover) look at their deadlines again (a sooner
    /// one has arrived).
    pub(crate) fn wake(&self) {
        self.wake_timer();
        if let Some(mover) = self.mover.get() {
            mover.unpark();
        }
    }

    fn wake_timer(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Asks the thread to exit.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
    }
}

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

fn run(state: &BrokerState) {
    // Registered before the first look at the deadlines, so no wake-up can be missed.
    let _ = state.timer.thread.set(std::thread::current());
    if let Some(priority) = state.config.timer_realtime_priority {
        set_realtime_priority(priority);
    }
    while !state.timer.stop.load(Ordering::Acquire) {
        let now = state.clock.now_ms();
        match state.next_wake() {
            Some(due) if due <= now => {
                let scheduler = &state.runtime.scheduler;
                scheduler.release_due(now, &state.delayed);
                scheduler.move_in(now, Some(MOVE_IN_BUDGET), &state.delayed);
            }
            Some(due) => std::thread::park_timeout(state.clock.until(due)),
            None => std::thread::park(),
        }
    }
}

/// How long the mover waits before trying again when moving in failed (a store read error).
const MOVER_RETRY: Duration = Duration::from_millis(100);

fn run_disk_mover(state: &BrokerState) {
    let _ = state.timer.mover.set(std::thread::current());
    state.delayed.hand_disk_to_mover();
    // The timer thread may be asleep until a disk move-in it no longer makes.
    state.timer.wake_timer();
    while !state.timer.stop.load(Ordering::Acquire) {
        let now = state.clock.now_ms();
        match state.delayed.next_disk_move() {
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
            Some(at) => std::thread::park_timeout(state.clock.until(at)),
            None => std::thread::park(),
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
