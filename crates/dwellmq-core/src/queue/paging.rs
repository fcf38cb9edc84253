//! A paging queue's steps: what it leaves in the store beyond its window, what it spills
//! under memory pressure, and the pages it asks back.

use super::*;

impl<C: Clone> QueueState<C> {
    /// Lets the queue leave messages beyond `window` in the store: for a durable queue
    /// without priorities whose persistent messages the owner stores. Its owner then calls
    /// [`QueueState::page`] after each command.
    pub fn enable_paging(&mut self, window: Paging) {
        if self.settings.max_priority == 0 {
            self.paging = Some(window);
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

    /// After a command, before [`QueueState::page`]: under memory pressure (`pressed`) the
    /// messages beyond the window the store does not have (never written, or `lost`: their
    /// write failed) are spilled ([`Effect::Spill`]), at most `budget` of them (the owner
    /// bounds what is in flight to the store);
    /// and the spilled records no longer needed are dropped ([`Effect::Unspill`]).
    pub fn spill(
        &mut self,
        pressed: bool,
        lost: impl Fn(u64) -> bool,
        budget: usize,
        fx: &mut Effects<C>,
    ) {
        let Some(window) = self.paging else {
            return;
        };
        for (from_seq, end_seq) in self.messages.take_unspilled() {
            fx.push(Effect::Unspill { from_seq, end_seq });
        }
        if pressed && !self.deleted {
            self.messages
                .spill(window, lost, budget, |seq, message, expires_at| {
                    fx.push(Effect::Spill {
                        seq,
                        message,
                        expires_at,
                    });
                });
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

    /// After a command: leaves what lies beyond the window in the store (the messages
    /// `stored` says are committed there), and asks for a page of the run when the messages
    /// in memory in front of the consumers run low (half the window) and someone waits for
    /// them (a consumer, or a `basic.get` that found none). The owner reads it off the
    /// queue's lock and hands it back with [`QueueState::page_in`].
    pub fn page(&mut self, stored: impl Fn(u64) -> bool) -> Option<PageRequest> {
        let window = self.paging?;
        let expiring = &mut self.expiring;
        self.messages.page_out(window, stored, |seq, at| {
            expiring.remove(&(at, seq));
        });
        // A drop-head limit the messages in memory cannot bring the queue under is enforced
        // as pages come back.
        let waited_for = !self.consumers.is_empty()
            || self.wants_page
            || (self.settings.overflow == Overflow::DropHead && self.over_length());
        if self.reading || self.deleted || !waited_for {
            return None;
        }
        self.page_request(window)
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
        self.reading = true;
        Some(PageRequest {
            generation: self.generation,
            from_seq: run.first_seq,
            end_seq: run.end_seq,
            // A whole page at least: the next get finds it in memory.
            limit: (wanted - head).max(window.page_len()),
        })
    }

    pub(super) fn page_request(&mut self, window: Paging) -> Option<PageRequest> {
        let run = self.messages.paged_run()?;
        let low = self.messages.head_len() < window.page_len()
            && self.messages.head_bytes() < window.window_bytes / 2;
        if !low {
            return None;
        }
        self.reading = true;
        Some(PageRequest {
            generation: self.generation,
            from_seq: run.first_seq,
            end_seq: run.end_seq,
            limit: window.page_len(),
        })
    }

    /// A page asked for by `request` (`None`: the read failed; the next command asks
    /// again): merged behind the messages in memory, then delivered as consumers can take
    /// it. A page of a run a purge or a delete ended is dropped.
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
        self.reading = false;
        let Some(page) = page else {
            return;
        };
        if self.deleted {
            return;
        }
        let expiring = &mut self.expiring;
        self.messages.page_in(page, request.from_seq, |seq, at| {
            expiring.insert((at, seq), 0);
        });
        self.deliver_ready(now_ms, None, fx);
        self.enforce_length(fx);
        self.arm(now_ms, fx);
    }

    /// Brings the queue back from the store at start without reading its messages: `run`
    /// counts them, and the first page is read when a consumer or a `basic.get` wants it.
    pub fn restore_paged(&mut self, run: PagedRun, now_ms: u64, fx: &mut Effects<C>) {
        self.messages.restore_run(run);
        self.arm(now_ms, fx);
    }
}
