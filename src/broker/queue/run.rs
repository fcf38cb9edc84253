//! Running one command: the queue's lock, the clock, the effects carried out under the lock,
//! the paging steps after it, and the aftermath handed to the owner once it is released.

use std::sync::Arc;

use dwellmq_core::paging::PageRequest;
use dwellmq_core::queue::{Effects, QueueState};

use super::apply::Command;
use super::consumer::Consumer;
use super::owner::QueueOwner;
use super::{Inner, Queue};
use crate::broker::tickets::PublishTicket;

/// Spills of one queue submitted to the store and not committed, at most: what waits for the
/// disk (copies of the messages, the writer's work) stays bounded whatever the publishers do;
/// beyond it messages wait in memory, counted, and the alarm is the last resort.
const SPILLS_IN_FLIGHT: usize = 8192;

/// How long a read for deadlines under the manual clock waits for memory to fall under the
/// watermark before it is put off (see `Queue::room_to_expire`).
const EXPIRY_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a command needs the current time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Time {
    /// Always.
    Now,
    /// Only if the queue's state makes the outcome depend on it.
    IfUsed,
}

impl Queue {
    /// Runs one command with the current time, then carries out its effects.
    pub(super) fn run<R>(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        command: impl FnOnce(&mut QueueState<Arc<Consumer>>, u64, &mut Effects<Arc<Consumer>>) -> R,
    ) -> R {
        self.run_at(owner, Time::Now, command)
    }

    /// Runs one command, reading the clock only if `time` or the queue's state needs it: two
    /// clock reads per message (publish and ack) are a measurable share of the hot path.
    pub(super) fn run_at<R>(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        time: Time,
        command: impl FnOnce(&mut QueueState<Arc<Consumer>>, u64, &mut Effects<Arc<Consumer>>) -> R,
    ) -> R {
        self.run_with(owner, time, None, command)
    }

    /// As `run_at`; the persists of a publish count on `ticket` (its confirm waits for them).
    pub(super) fn run_with<R>(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        time: Time,
        ticket: Option<&Arc<PublishTicket>>,
        command: impl FnOnce(&mut QueueState<Arc<Consumer>>, u64, &mut Effects<Arc<Consumer>>) -> R,
    ) -> R {
        let (result, page) = self.run_command(owner, time, ticket, command);
        if let Some(request) = page {
            self.read(owner, request);
        }
        result
    }

    /// Runs one command and carries out its effects; returns its result and the read of the
    /// run the queue asked for after it, which the caller must have done.
    pub(super) fn run_command<R>(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        time: Time,
        ticket: Option<&Arc<PublishTicket>>,
        command: impl FnOnce(&mut QueueState<Arc<Consumer>>, u64, &mut Effects<Arc<Consumer>>) -> R,
    ) -> (R, Option<PageRequest>) {
        let mut cmd = Command::new(owner, ticket);
        let mut now = None;
        let (result, page) = {
            let mut guard = self.inner.lock();
            let Inner {
                state,
                effects,
                packed,
            } = &mut *guard;
            if time == Time::Now || state.uses_clock() {
                now = Some(self.services.clock.now_ms());
            }
            // Without the clock no outcome depends on the time passed (`uses_clock`).
            let now_ms = now.unwrap_or(0);
            let result = command(state, now_ms, effects);
            if !effects.is_empty() {
                // A dead-lettered message leaves this queue's store records and enters its
                // targets' in one commit: a crash loses neither (the store retries the group
                // whole after a failed commit).
                if effects.has_dead_letters() {
                    cmd.after.group = self.store_group();
                }
                self.apply(state, effects, &mut cmd);
            }
            // After the deliveries: a message handed back by one of them settles too.
            state.settle(now_ms, effects);
            if let Some(progress) = &self.progress {
                state.write_missing(
                    self.services.memory.pressed(),
                    progress.as_ref(),
                    SPILLS_IN_FLIGHT.saturating_sub(progress.spills_in_flight()),
                    effects,
                );
            }
            if !effects.is_empty() {
                self.apply(state, effects, &mut cmd);
            }
            let page = self
                .progress
                .as_ref()
                .and_then(|progress| state.page(progress.as_ref(), now_ms));
            // Under the queue's lock: the store sees a message's persist before its state
            // changes and its removal.
            self.submit(std::mem::take(&mut cmd.writes), owner);
            packed.set(state.packed_footprint());
            (result, page)
        };
        if !cmd.after.is_empty() {
            let now_ms = now.unwrap_or_else(|| self.services.clock.now_ms());
            owner.carry_out(self, cmd.after, now_ms);
        }
        (result, page)
    }

    /// Has the page reader read `request` (and what the queue asks for next), or reads it
    /// here: when a deadline asked for it under the manual clock (so that `advance` plays
    /// its expiry out before it returns), or when no reader thread can start.
    pub(super) fn read(self: &Arc<Self>, owner: &dyn QueueOwner, first: PageRequest) {
        let mut next = Some(first);
        while let Some(request) = next.take() {
            let at_once = request.due && self.services.manual_clock;
            if !at_once && self.services.page_reader.request(self, owner, request) {
                return;
            }
            // Under the manual clock a test waits for the clock's advance: what the last
            // reads dead-lettered gets a moment to be written and leave memory.
            if at_once && !self.room_to_expire(EXPIRY_PATIENCE) {
                next = self.defer_read(owner, request);
                continue;
            }
            let page = self.read_page(request, &[]);
            next = self.take_page(owner, request, page);
        }
    }

    /// Whether the memory counted is under the watermark, waiting up to `patience` for it. A
    /// read for deadlines dead-letters what it finds into other queues, which hold it in memory
    /// until it is written: a backlog expiring at once goes a page at a time, as fast as
    /// that leaves memory, not all at once past the watermark.
    pub(super) fn room_to_expire(&self, patience: std::time::Duration) -> bool {
        let memory = &self.services.memory;
        let deadline = std::time::Instant::now() + patience;
        while memory.over_watermark() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        true
    }

    /// A read for deadlines is put off (memory is over the watermark); returns the next
    /// read the queue asks for.
    pub(super) fn defer_read(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        request: PageRequest,
    ) -> Option<PageRequest> {
        self.run_command(owner, Time::Now, None, |state, now, fx| {
            state.defer_read(request, now, fx)
        })
        .1
    }
}
