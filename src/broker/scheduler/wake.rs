//! How the scheduler reaches the threads that serve its deadlines under the system clock: the
//! timer thread (`super::super::timer_thread`), and the disk mover, which moves messages held
//! on disk into the wheel so that the timer thread never waits for a store read. Under a
//! manual clock neither runs, and waking is a no-op.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;

/// The serving threads' handles and their stop flag.
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
        self.wake_mover();
    }

    /// Makes the timer thread look at its deadlines again.
    pub(crate) fn wake_timer(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Makes the disk mover look at its work again.
    pub(crate) fn wake_mover(&self) {
        if let Some(mover) = self.mover.get() {
            mover.unpark();
        }
    }

    /// The calling thread is the timer thread from now on.
    pub(crate) fn register_timer(&self) {
        let _ = self.thread.set(std::thread::current());
    }

    /// The calling thread is the disk mover from now on.
    pub(crate) fn register_mover(&self) {
        let _ = self.mover.set(std::thread::current());
    }

    /// Asks the threads to exit.
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
    }

    /// Whether the threads were asked to exit.
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}
