//! A paging queue's reads of its run from the store: pages asked for after a command (read by
//! the page reader thread, or here), read on the spot by a get, the first page after a
//! restore, and the nudges that run its paging steps when no command comes.

use std::sync::{Arc, Weak};

use dwellmq_core::paging::{Page, PageRequest, PagedRun};
use dwellmq_core::QueueEntry;

use super::owner::QueueOwner;
use super::page_reader;
use super::run::Time;
use super::Queue;

impl Queue {
    /// Runs the paging steps with no command (a failed write is written again).
    pub(crate) fn nudge(self: &Arc<Self>, owner: &dyn QueueOwner) {
        self.nudge_pending
            .store(false, std::sync::atomic::Ordering::Release);
        self.run_at(owner, Time::IfUsed, |_, _, _| ());
    }

    /// Has the page reader nudge this queue (see `nudge`): at once after its writes
    /// committed, a little later after they failed. One nudge pending at a time.
    pub(super) fn request_nudge(self: &Arc<Self>, owner: Weak<dyn QueueOwner>, failed: bool) {
        if !self
            .nudge_pending
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            self.services
                .page_reader
                .nudge(Arc::downgrade(self), owner, failed);
        }
    }

    /// Reads a page of this queue's run from the store, trying again after each of `pauses`
    /// while the store cannot be read; `None` if it still cannot.
    pub(crate) fn read_page(
        &self,
        request: PageRequest,
        pauses: &[std::time::Duration],
    ) -> Option<Page> {
        let Some(store) = &self.services.store else {
            return None;
        };
        let source = self.stored_source();
        let max_bytes = self.services.paging.page_bytes();
        let mut pauses = pauses.iter();
        loop {
            match page_reader::read_page(store, source, request, max_bytes) {
                Ok(page) => return Some(page),
                Err(e) => {
                    let Some(pause) = pauses.next() else {
                        tracing::warn!(queue = %self.name, error = %e, "reading a page of a queue failed");
                        return None;
                    };
                    std::thread::sleep(*pause);
                }
            }
        }
    }

    /// Where its stored messages are: persisted ones under its store id, spilled ones under
    /// its spill id.
    fn stored_source(&self) -> page_reader::Source {
        page_reader::Source {
            queue: self.store_id.get().copied(),
            spill: self.spill_id,
        }
    }

    /// A page read for `request` (`None`: the read failed) joins the queue (or expires
    /// what is due where it is).
    pub(crate) fn page_in(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        request: PageRequest,
        page: Option<Page>,
    ) {
        if let Some(next) = self.take_page(owner, request, page) {
            self.read(owner, next);
        }
    }

    /// As `page_in`; returns the next read the queue asks for.
    pub(super) fn take_page(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        request: PageRequest,
        page: Option<Page>,
    ) -> Option<PageRequest> {
        self.run_command(owner, Time::Now, None, |state, now, fx| {
            state.page_in(request, page, now, fx)
        })
        .1
    }

    /// Brings the queue back from the store without reading its messages: the store holds
    /// `count` of them (`bytes` of bodies) from position `first_seq` on, and the next
    /// message takes `next_seq`. Its first page is read once it is in its vhost
    /// ([`Queue::read_first_page`]), so that what dies at its head has somewhere to go.
    pub(super) fn restore_run(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        first_seq: u64,
        count: u64,
        bytes: u64,
        next_seq: u64,
    ) {
        if let Some(progress) = &self.progress {
            progress.stored_below(next_seq);
        }
        let run = PagedRun {
            first_seq,
            end_seq: next_seq,
            count,
            bytes,
        };
        self.run(owner, |state, now, fx| {
            state.restore_paged(run, now, fx);
            state.restore(Vec::new(), next_seq, now, fx);
        });
    }

    /// One page at once (bounded, whatever the backlog): a short queue is then in memory as
    /// before, and what expired at its head while the broker was down expires at start.
    pub(crate) fn read_first_page(self: &Arc<Self>, owner: &dyn QueueOwner) {
        self.read_for(owner, self.services.paging.page_len());
    }

    /// Reads a page on the spot if fewer than `wanted` messages are in memory in front of a
    /// run; false if there was nothing to read.
    pub(super) fn read_for(self: &Arc<Self>, owner: &dyn QueueOwner, wanted: usize) -> bool {
        let Some(request) = self.run(owner, |state, _, _| state.page_for(wanted)) else {
            return false;
        };
        let page = self.read_page(request, &[]);
        self.page_in(owner, request, page);
        true
    }

    /// Up to `limit` messages of the run, read from the store (inspection; none if it cannot
    /// be read).
    pub(super) fn read_run(&self, run: PagedRun, limit: usize) -> Vec<QueueEntry> {
        let Some(store) = &self.services.store else {
            return Vec::new();
        };
        let source = self.stored_source();
        let stored = store
            .snapshot()
            .and_then(|snapshot| page_reader::read_merged(&snapshot, source, run.first_seq, limit))
            .map(|stored| stored.into_iter().map(|(m, _)| m).collect::<Vec<_>>());
        let stored = match stored {
            Ok(stored) => stored,
            Err(e) => {
                tracing::warn!(queue = %self.name, error = %e, "reading a queue's paged messages failed");
                return Vec::new();
            }
        };
        stored
            .into_iter()
            .take_while(|m| m.seq < run.end_seq)
            .map(|m| QueueEntry {
                seq: m.seq,
                redelivered: m.state.redelivered,
                delivery_count: 0,
                acquired_count: 0,
                expires_at: (m.expires_at_ms != 0).then_some(m.expires_at_ms),
                message: m.message.unpack_own(),
            })
            .collect()
    }
}
