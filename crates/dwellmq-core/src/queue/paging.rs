//! A paging queue's steps: what it leaves in the store beyond its window, what it spills
//! under memory pressure, and the pages it asks back.

use super::*;
use crate::paging::PageKind;
use crate::queue_messages::MissingWrite;
use crate::SpilledMessage;

impl<C: Clone> QueueState<C> {
    /// Lets the queue leave messages beyond `window` in the store: for a durable queue
    /// without priorities whose persistent messages the owner stores. Its owner then calls
    /// [`QueueState::page`] after each command.
    pub fn enable_paging(&mut self, window: Paging) {
        if self.settings.max_priority == 0 {
            self.paging = Some(window);
            self.messages.set_paged();
        }
    }

    /// As [`QueueState::enable_paging`], for a queue whose persistent messages the owner
    /// does not store (a transient or exclusive queue): its messages leave memory only when
    /// spilled ([`QueueState::spill`]).
    pub fn enable_spill_paging(&mut self, window: Paging) {
        self.messages.set_stores_persistent(false);
        self.enable_paging(window);
    }

    /// Whether the queue ever spilled a message (its spilled records may still exist).
    pub fn has_spilled(&self) -> bool {
        self.messages.has_spilled()
    }

    /// After a command, before [`QueueState::page`]: writes what the store should have and
    /// does not (see [`QueueMessages::write_missing`]): under memory pressure (`pressed`)
    /// the messages beyond the window never written are spilled ([`Effect::Spill`]), and
    /// those whose write `progress` says failed are written again ([`Effect::Rewrite`] or a
    /// spill), at most `budget` of them; the spilled records no longer needed are dropped
    /// ([`Effect::Unspill`]), and the removals of messages a page could still find are
    /// numbered ([`Effect::RemovalsMark`]).
    pub fn write_missing(
        &mut self,
        pressed: bool,
        progress: &impl WriteProgress,
        budget: usize,
        fx: &mut Effects<C>,
    ) {
        let Some(window) = self.paging else {
            return;
        };
        // Records no longer needed go first: a message read back and spilled again writes
        // its record anew after the old one is dropped.
        for (from_seq, end_seq) in self.messages.take_unspilled() {
            fx.push(Effect::Unspill { from_seq, end_seq });
        }
        if !self.deleted {
            let lost = |seq| progress.is_lost(seq);
            let lost: Option<&dyn Fn(u64) -> bool> = progress.any_lost().then_some(&lost);
            self.messages
                .write_missing(window, pressed, lost, budget, |missing| {
                    fx.push(missing_write(missing));
                });
        }
        if let Some(mark) = self.messages.take_removals_mark() {
            fx.push(Effect::RemovalsMark { mark });
        }
    }

    /// The run of messages left in the store only, if any.
    pub fn paged_run(&self) -> Option<PagedRun> {
        self.messages.paged_run()
    }

    /// Whether the stored message at `seq` is one of the run's (see
    /// [`QueueMessages::in_run`]).
    pub fn in_paged_run(&self, seq: u64) -> bool {
        self.messages.in_run(seq)
    }

    /// The messages left in the store only: (count, body octets).
    pub fn paged_out(&self) -> (u64, u64) {
        self.messages
            .paged_run()
            .map_or((0, 0), |run| (run.count, run.bytes))
    }

    /// After a command (and its [`QueueState::write_missing`]): leaves what lies beyond
    /// the window in the store (the messages `progress` says are committed there), and asks
    /// for a read of the run, at most one at a time: a page for the head when the messages
    /// in memory in front of the consumers run low (half the window) and someone waits for
    /// them (a consumer with credit, a `basic.get` that found none, a drop-head limit); else,
    /// when a deadline in the run has come at `now_ms`, the stretch holding it (on-time
    /// expiry), or the run's first page once nothing is in memory in front of it (head-only
    /// expiry).
    /// The owner reads it off the queue's lock and hands it back with
    /// [`QueueState::page_in`].
    pub fn page(&mut self, progress: &impl WriteProgress, now_ms: u64) -> Option<PageRequest> {
        let window = self.paging?;
        if self.reads_in_flight == 0 {
            // No read that started before these removals committed can still come back.
            self.messages
                .removals_committed(progress.removals_committed());
        }
        let expiring = &mut self.expiring;
        self.messages.page_out(
            window,
            |seq| progress.is_stored(seq),
            |seq, at| {
                expiring.remove(&(at, seq));
            },
        );
        if self.reads_in_flight > 0 || self.deleted {
            return None;
        }
        // A drop-head limit the messages in memory cannot bring the queue under is enforced
        // as pages come back. Only a consumer with credit waits: a page read for one that
        // cannot take it would only be paged out again beyond the window (and, under memory
        // pressure, spilled again), read again, and so on for as long as it holds its
        // prefetch; its ack is a command, after which the page is asked for.
        let waited_for = self.a_consumer_can_take()
            || self.wants_page
            || (self.settings.overflow == Overflow::DropHead && self.over_length());
        if waited_for {
            if let Some(request) = self.head_request(window, false) {
                return Some(request);
            }
        }
        self.expiry_request(window, now_ms)
    }

    /// A read for the run's deadlines due at `now_ms`, if one is.
    fn expiry_request(&mut self, window: Paging, now_ms: u64) -> Option<PageRequest> {
        if self.awaiting_tick || self.read_retry_at.is_some_and(|at| at > now_ms) {
            return None;
        }
        match self.settings.expiry_mode {
            ExpiryMode::OnTime => {
                let (at, from_seq, end) = self.messages.run_first_due()?;
                let run = self.messages.paged_run()?;
                if at > now_ms {
                    return None;
                }
                self.reads_in_flight += 1;
                Some(PageRequest {
                    kind: PageKind::Expiry,
                    due: true,
                    generation: self.generation,
                    from_seq,
                    end_seq: end.unwrap_or(run.end_seq),
                    limit: window.page_len(),
                })
            }
            ExpiryMode::HeadOnly => {
                let front_due = self.messages.head_len() == 0
                    && self
                        .messages
                        .run_front_deadline()
                        .is_some_and(|at| at <= now_ms);
                if !front_due {
                    return None;
                }
                self.head_request(window, true)
            }
        }
    }

    /// The next deadline of the run that a tick must serve: one that has not come yet (one
    /// that has is asked for by [`QueueState::page`] after the command), none while a read
    /// is in flight (its return arms again), or when a failed read is tried again.
    pub(super) fn run_deadline(&self, now_ms: u64) -> Option<u64> {
        if self.paging.is_none() || self.awaiting_tick {
            return None;
        }
        if let Some(at) = self.read_retry_at.filter(|&at| at > now_ms) {
            return Some(at);
        }
        if self.reads_in_flight > 0 {
            return None;
        }
        let at = match self.settings.expiry_mode {
            ExpiryMode::OnTime => self.messages.run_first_due().map(|(at, _, _)| at),
            ExpiryMode::HeadOnly if self.messages.head_len() == 0 => {
                self.messages.run_front_deadline()
            }
            ExpiryMode::HeadOnly => None,
        }?;
        (at > now_ms).then_some(at)
    }

    /// A page to read now whatever else is in flight, for a reader that needs `wanted`
    /// messages in memory (a `basic.get` that found none, the management API's get): `None`
    /// without a run, or with that many in memory.
    pub fn page_for(&mut self, wanted: usize) -> Option<PageRequest> {
        let window = self.paging?;
        let run = self.messages.paged_run()?;
        let head = self.messages.head_len();
        if head >= wanted || self.deleted {
            return None;
        }
        self.reads_in_flight += 1;
        Some(PageRequest {
            kind: PageKind::Head,
            due: false,
            generation: self.generation,
            from_seq: run.first_seq,
            end_seq: run.end_seq,
            // A whole page at least: the next get finds it in memory.
            limit: (wanted - head).max(window.page_len()),
        })
    }

    fn head_request(&mut self, window: Paging, due: bool) -> Option<PageRequest> {
        let run = self.messages.paged_run()?;
        let low = self.messages.head_len() < window.page_len()
            && self.messages.head_bytes() < window.page_bytes();
        if !low {
            return None;
        }
        self.reads_in_flight += 1;
        Some(PageRequest {
            kind: PageKind::Head,
            due,
            generation: self.generation,
            from_seq: run.first_seq,
            end_seq: run.end_seq,
            limit: window.page_len(),
        })
    }

    /// A read asked for by `request` (`None`: it failed; it is asked again a little later):
    /// a head page merged behind the messages in memory, or the due messages of a stretch
    /// expired where they are; then what is due expires, and consumers take what they can.
    /// A page of a run a purge or a delete ended is dropped.
    pub fn page_in(
        &mut self,
        request: PageRequest,
        page: Option<Page>,
        now_ms: u64,
        fx: &mut Effects<C>,
    ) {
        if request.generation != self.generation {
            return;
        }
        self.reads_in_flight = self.reads_in_flight.saturating_sub(1);
        let Some(page) = page else {
            self.read_retry_at = Some(now_ms.saturating_add(READ_RETRY_MS));
            self.arm(now_ms, fx);
            return;
        };
        self.read_retry_at = None;
        if self.deleted {
            return;
        }
        match request.kind {
            PageKind::Head => {
                let expiring = &mut self.expiring;
                self.messages.page_in(page, request.from_seq, |seq, at| {
                    expiring.insert((at, seq), 0);
                });
            }
            PageKind::Expiry => {
                let mut expired = Vec::new();
                self.messages
                    .expire_in_run(request, page, now_ms, |entry| expired.push(entry));
                for entry in expired {
                    if !entry.spilled {
                        fx.push(Effect::Forget { seq: entry.seq });
                    }
                    self.dead_letter(entry.message.unpack_own(), DeathReason::Expired, fx);
                }
            }
        }
        // A restored queue's first page is read before the dead-letter routes are back:
        // what expired meanwhile, or is past a length limit, dies at the restore's tick.
        if !self.awaiting_tick {
            self.expire_due(now_ms, fx);
            self.enforce_length(fx);
        }
        self.deliver_ready(now_ms, None, fx);
        self.arm(now_ms, fx);
    }

    /// A read for deadlines asked for by `request` is put off (the owner's memory is over
    /// its watermark: what it would dead-letter would only add to it): asked again shortly.
    pub fn defer_read(&mut self, request: PageRequest, now_ms: u64, fx: &mut Effects<C>) {
        if request.generation != self.generation {
            return;
        }
        self.reads_in_flight = self.reads_in_flight.saturating_sub(1);
        self.read_retry_at = Some(now_ms.saturating_add(DEFERRED_READ_MS));
        self.arm(now_ms, fx);
    }

    /// Brings the queue back from the store at start without reading its messages: `run`
    /// counts them, and the first page is read when a consumer or a `basic.get` wants it.
    /// Its deadlines are not known: the run is read for them from the first tick on (the
    /// owner ticks every restored queue once every definition, dead-letter routes included,
    /// is back).
    pub fn restore_paged(&mut self, run: PagedRun, now_ms: u64, fx: &mut Effects<C>) {
        self.messages.restore_run(run);
        self.awaiting_tick = true;
        self.arm(now_ms, fx);
    }
}

/// How long after a failed read of the run it is asked again (the store reopens after a
/// failed commit; the owner's reader has tried a few times already).
pub const READ_RETRY_MS: u64 = 1000;

/// How long a read for deadlines put off under memory pressure waits before it is asked again.
pub const DEFERRED_READ_MS: u64 = 50;

/// What the owner knows of a paging queue's store writes, completions included.
pub trait WriteProgress {
    /// The write of the message at `seq` (persisted or spilled) is committed.
    fn is_stored(&self, seq: u64) -> bool;
    /// The last write of `seq` failed: the store may not have it, and it is written again.
    fn is_lost(&self, seq: u64) -> bool;
    /// Whether any write is lost (the common case asks nothing per message).
    fn any_lost(&self) -> bool;
    /// The highest [`Effect::RemovalsMark`] whose removals are known committed (0: none).
    fn removals_committed(&self) -> u64;
}

fn missing_write<C>(missing: MissingWrite) -> Effect<C> {
    if missing.persist {
        let message = match missing.message {
            SpilledMessage::Packed(packed) => packed.unpack_own(),
            SpilledMessage::Shared(message) => message,
        };
        Effect::Rewrite {
            seq: missing.seq,
            message,
            expires_at: missing.expires_at,
        }
    } else {
        Effect::Spill {
            seq: missing.seq,
            message: missing.message,
            expires_at: missing.expires_at,
        }
    }
}

/// Stand-ins for the owner's view of its store writes, for unit tests.
#[cfg(test)]
pub(crate) mod test_progress {
    use super::WriteProgress;

    /// Every write `.0` says is committed is; none is lost; every removal is committed.
    pub(crate) struct Committed<F>(pub(crate) F);

    impl<F: Fn(u64) -> bool> WriteProgress for Committed<F> {
        fn is_stored(&self, seq: u64) -> bool {
            (self.0)(seq)
        }
        fn is_lost(&self, _: u64) -> bool {
            false
        }
        fn any_lost(&self) -> bool {
            false
        }
        fn removals_committed(&self) -> u64 {
            u64::MAX
        }
    }

    /// The writes `.0` names are lost; the others are committed.
    pub(crate) struct Lost<F>(pub(crate) F);

    impl<F: Fn(u64) -> bool> WriteProgress for Lost<F> {
        fn is_stored(&self, seq: u64) -> bool {
            !(self.0)(seq)
        }
        fn is_lost(&self, seq: u64) -> bool {
            (self.0)(seq)
        }
        fn any_lost(&self) -> bool {
            true
        }
        fn removals_committed(&self) -> u64 {
            u64::MAX
        }
    }
}
