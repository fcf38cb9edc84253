//! A held message's release, all of it: the delayed exchanges as the scheduler's [`Holder`]
//! (a due message leaves the book in the lock hold that takes it from the wheel), the round
//! that routes each one through the publish pipeline as a publish to its exchange without a
//! delay, the message as delivered ([`form`]: `x-delay` negated, `BCC` removed), and the
//! removal of what the store holds (one store group with the routed copies).
//!
//! A release touches only warm memory: the wheel (the message is inside its entry), a small
//! map of what is in it, and the per-exchange counters.

mod form;

use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::schedule::DeadlineId;
use dwellmq_core::Message;

use super::held::{Held, Kept, Target};
use super::{lateness, Book, DelayedMessages};
use crate::broker::memory::{held_footprint, message_footprint};
use crate::broker::scheduler::{HeldRound, Holder};
use crate::broker::vhost::Routing;

/// Buffers a release round reuses, so a release allocates nothing in steady state.
#[derive(Default)]
pub(crate) struct ReleaseScratch {
    /// Store ids of the round's messages that the store holds.
    stored: Vec<DeadlineId>,
    routing: Routing,
    extra_keys: Vec<ShortStr>,
}

impl Holder for DelayedMessages {
    type Item = Held;
    type Book = Book;
    type Scratch = ReleaseScratch;
    type Round<'a> = ReleaseRound<'a>;

    /// Out of its exchange's counts (and order, if it came from the far tier), its store id
    /// noted if it is stored.
    fn take(
        book: &mut Book,
        id: DeadlineId,
        from_far_tier: bool,
        held: &Held,
        scratch: &mut ReleaseScratch,
    ) {
        book.forget(held, from_far_tier.then_some((id.due_ms, id.seq)));
        if held.stored {
            scratch.stored.push(book.stored_id(id));
        }
    }

    /// Touched, so that its release a horizon later finds it warm, and out of its exchange's
    /// far-tier order.
    fn moved_in(book: &mut Book, id: DeadlineId, held: &Held) {
        held.message.warm_up();
        book.note_beyond(held.incarnation(), Some(id), None);
    }

    /// With a released message in the store, the round is one store group: one commit holds
    /// the releases and the routed copies, so a crash can neither lose a released message nor
    /// deliver it twice.
    fn begin_round<'a>(&'a self, scratch: &'a mut ReleaseScratch) -> ReleaseRound<'a> {
        let group = self
            .store
            .get()
            .filter(|_| !scratch.stored.is_empty())
            .map(|store| store.group());
        ReleaseRound {
            delayed: self,
            _group: group,
            scratch,
            released: 0,
            unroutable: 0,
            lateness: lateness::LatenessBatch::default(),
        }
    }
}

/// One round of releases ([`Holder::begin_round`]).
pub(crate) struct ReleaseRound<'a> {
    delayed: &'a DelayedMessages,
    _group: Option<dwellmq_store::Group<'a>>,
    scratch: &'a mut ReleaseScratch,
    released: usize,
    unroutable: u64,
    lateness: lateness::LatenessBatch,
}

impl HeldRound<Held> for ReleaseRound<'_> {
    /// Routes one due message through its exchange's bindings as they are now.
    fn release(&mut self, now_ms: u64, id: DeadlineId, held: Held) {
        let delayed = self.delayed;
        self.released += 1;
        self.lateness.record(now_ms.saturating_sub(id.due_ms));
        let Target {
            vhost, exchange, ..
        } = &*held.target;
        if !held.target.is_current() {
            // Its exchange was purged or deleted, and the drop has not reached it yet.
            delayed.discard(held.message);
            return;
        }
        let Some(message) = delayed.message_to_release(held.message) else {
            return;
        };
        let ReleaseScratch {
            routing,
            extra_keys,
            ..
        } = &mut *self.scratch;
        let message = form::release_form(message, &delayed.memory, extra_keys);
        // Through the one publish pipeline, as a publish to the holder without a delay:
        // copies in durable queues join this round's store group with the releases.
        let outcome = crate::broker::publish::route_and_enqueue(
            vhost,
            crate::broker::publish::Outgoing {
                exchange,
                message: &message,
                routing_key: &message.routing_key,
                extra_keys,
                bcc: None,
                hold_until: None,
                mandatory: false,
                dead_lettered: false,
            },
            routing,
            None,
        );
        if outcome.dropped {
            self.unroutable += 1;
        }
    }

    /// Ends the round: the store removes the released messages it holds (after their routed
    /// copies, in the same group); returns how many were released.
    fn finish(self) -> usize {
        let delayed = self.delayed;
        let stored = std::mem::take(&mut self.scratch.stored);
        delayed.release_stored(stored);
        if self.released > 0 {
            delayed.lateness.add(&self.lateness);
        }
        if self.unroutable > 0 {
            tracing::debug!(
                unroutable = self.unroutable,
                "delayed messages found no route at release and were dropped"
            );
            delayed.scheduler.lock().book.unroutable += self.unroutable;
        }
        self.released
    }
}

impl DelayedMessages {
    /// The message to route at release; a packed one takes its memory charge along.
    fn message_to_release(&self, kept: Kept) -> Option<Arc<Message>> {
        match kept {
            Kept::Shared(message) => Some(message),
            Kept::Packed(packed) => {
                // Unpacked, it counts as a queued message: its charge grows to that.
                let (held, queued) = (
                    held_footprint(packed.body_len()),
                    message_footprint(packed.body_len()),
                );
                self.memory.charge_bytes(queued.saturating_sub(held));
                let guard = Box::new(self.memory.adopt(queued));
                let message = packed.unpack(Some(guard));
                if message.is_none() {
                    // Unreachable for a message packed in this process; a store could feed
                    // a corrupt one. Dropping it beats failing every release after it.
                    tracing::error!("a held message could not be unpacked and was dropped");
                }
                message
            }
        }
    }

    /// Submits the removal of stored held messages (released, cancelled, purged): the store's
    /// index hides them from now on (the writer retries a removal until it commits), so the
    /// disk tier may forget those it moved out. Never waits for the disk tier's lock.
    pub(super) fn release_stored(&self, ids: Vec<DeadlineId>) {
        self.submit_releasing(ids, Vec::new());
    }

    /// Submits the removal of stored held messages `ids` with `more` ops in one submission
    /// (the store commits a submission whole, and retries one holding a removal whole), then
    /// notes the removals for the disk tier.
    pub(super) fn submit_releasing(&self, ids: Vec<DeadlineId>, more: Vec<dwellmq_store::Op>) {
        if ids.is_empty() && more.is_empty() {
            return;
        }
        let Some(store) = self.store.get() else {
            return;
        };
        let ops = ids
            .iter()
            .map(|&id| dwellmq_store::Op::Release { id })
            .chain(more)
            .collect();
        store.submit_detached(ops);
        if let Some(released) = self.released.get() {
            released.note(&ids);
        }
    }
}
