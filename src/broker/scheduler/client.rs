//! What the scheduler knows of its clients: nothing but these traits. A client is called back
//! when its deadline comes; the one client whose items live inside the scheduler's entries
//! (the delayed exchanges' held messages) is its [`Holder`].

use std::sync::Arc;

use dwellmq_core::schedule::DeadlineId;

/// A client that asked to be called back at a deadline (a queue's tick, a disk tier's
/// move-in). The scheduler keeps only a weak reference: a client gone by then is skipped. A
/// client with several deadlines due in one round is called once: one call serves them all.
pub(crate) trait DeadlineClient: Send + Sync {
    /// Its deadline came, at `now_ms`. Runs outside the scheduler's lock; may arm again.
    fn due(self: Arc<Self>, now_ms: u64);
}

/// A deadline that owns its work and is done with after it (the test double's delayed
/// deliveries): dropped unserved if the scheduler goes first.
pub(crate) trait DueOnce: Send {
    /// Its deadline came, at `now_ms`.
    fn due(self: Box<Self>, now_ms: u64);
}

/// The client whose items are kept inside the scheduler's entries, because their release must
/// touch only warm memory: a held message sits in the wheel itself a horizon before it is
/// due, rather than behind a pointer whose target went cold meanwhile. Its book (counts and
/// orders of what it holds) lives under the scheduler's lock, so that an item leaves the
/// scheduler and the book in one lock hold.
pub(crate) trait Holder: Send + Sync + Sized + 'static {
    /// What an entry carries.
    type Item: Send + 'static;
    /// What changes with the scheduler's entries, under its lock.
    type Book: Default + Send + 'static;
    /// Buffers a round reuses (taken under the lock, used by the round).
    type Scratch: Default + Send + 'static;
    /// One round of releases.
    type Round<'a>: HeldRound<Self::Item>
    where
        Self: 'a;

    /// Under the scheduler's lock: `item` (`id`) is due and leaves for release; it came
    /// straight from the far tier if `from_far_tier` (it never moved into the wheel).
    fn take(
        book: &mut Self::Book,
        id: DeadlineId,
        from_far_tier: bool,
        item: &Self::Item,
        scratch: &mut Self::Scratch,
    );

    /// Under the scheduler's lock: `item` moved from the far tier into the wheel, to be
    /// released within a horizon.
    fn moved_in(book: &mut Self::Book, id: DeadlineId, item: &Self::Item);

    /// Starts a round that releases what [`Holder::take`] took, outside the lock.
    fn begin_round<'a>(&'a self, scratch: &'a mut Self::Scratch) -> Self::Round<'a>;
}

/// A round of releases, in due order, between the other clients' callbacks of the round.
pub(crate) trait HeldRound<T> {
    /// Releases one item taken at `now_ms`.
    fn release(&mut self, now_ms: u64, id: DeadlineId, item: T);
    /// Ends the round; returns how many items it released.
    fn finish(self) -> usize;
}
