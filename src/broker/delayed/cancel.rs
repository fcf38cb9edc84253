//! Cancelling one held message, and taking one out wherever it is (the scheduler's wheel or
//! far tier, or the disk tier), which a move does too.

use dwellmq_codec::ShortStr;
use dwellmq_core::schedule::DeadlineId;
use dwellmq_core::PackedMessage;
use dwellmq_store::StoreError;

use super::disk::DiskTier;
use super::held::{ExchangeKey, Held};
use super::{id_of, Book, DelayedId, DelayedMessages, Locked};

/// A message taken out of the disk tier (its `Release` not yet submitted).
pub(super) struct TakenFromDisk {
    pub(super) key: ExchangeKey,
    pub(super) message: PackedMessage,
}

impl DelayedMessages {
    /// Cancels one held message; false if it is unknown or already released.
    pub(crate) fn cancel(&self, id: DelayedId) -> bool {
        self.cancel_where(id, None)
    }

    /// Cancels one held message if the exchange holds it (the HTTP API addresses messages
    /// through their exchange); false if it does not, or the message is already released.
    pub(crate) fn cancel_held_by(&self, vhost: &str, exchange: &str, id: DelayedId) -> bool {
        let key = (ShortStr::from(vhost), ShortStr::from(exchange));
        self.cancel_where(id, Some(&key))
    }

    fn cancel_where(&self, id: DelayedId, of: Option<&ExchangeKey>) -> bool {
        let wanted = |held: &Held| of.is_none_or(|key| held.belongs_to(key));
        let mut disk_guard = self.disk.lock();
        let mut guard = self.scheduler.lock();
        let inner = &mut *guard;
        let deadline = id_of(id);
        if let Some(held) = inner.held(deadline) {
            if !wanted(held) {
                return false;
            }
            let Some((held, far)) = take_in_memory(inner, deadline) else {
                return false;
            };
            inner.book.forget(&held, far.then_some((id.due_ms, id.seq)));
            let stored = held.stored.then(|| inner.book.stored_id(deadline));
            drop(guard);
            drop(disk_guard);
            self.release_stored(stored.into_iter().collect());
            self.discard(held.message);
            return true;
        }
        // Held on disk? Its exchange's definition may have been kept on disk: what it holds
        // stays with it, for the declare that takes it back (a restore never deletes).
        let Some(disk) = disk_guard.as_mut() else {
            return false;
        };
        let not_kept = |book: &Book, key: &ExchangeKey, _seq: u64| !book.kept.contains(key);
        match take_on_disk(disk, inner, deadline, of, not_kept) {
            Ok(Some(taken)) => {
                let incarnation = inner.book.stored_incarnation(&taken.key, deadline.seq);
                if let Some(incarnation) = incarnation {
                    let bytes = taken.message.body_len() as u64;
                    inner.book.forget_counts(incarnation, 1, bytes);
                }
                drop(guard);
                // Under the disk tier's lock: no refill may find it before the index hides it.
                self.release_stored(vec![deadline]);
                drop(disk_guard);
                true
            }
            Ok(None) => false,
            Err(e) => {
                tracing::error!(error = %e, "cancelling a stored delayed message failed");
                false
            }
        }
    }
}

/// Takes the held message `id` out of the scheduler (wheel or far tier), still counted in its
/// exchange's book; with whether it was in the far tier.
pub(super) fn take_in_memory(inner: &mut Locked, id: DeadlineId) -> Option<(Held, bool)> {
    let far = inner.core.is_far(id);
    inner.take_held(id).map(|held| (held, far))
}

/// Takes the message `id` out of the disk tier if it is held there, for exchange `of` (any
/// with `None`), and `accept` takes it (by its exchange and sequence number, before it is
/// taken). The caller submits its `Release` under the disk tier's lock, and corrects counts.
pub(super) fn take_on_disk(
    disk: &mut DiskTier,
    inner: &Locked,
    id: DeadlineId,
    of: Option<&ExchangeKey>,
    accept: impl Fn(&Book, &ExchangeKey, u64) -> bool,
) -> Result<Option<TakenFromDisk>, StoreError> {
    let view = disk.view()?;
    let Some(stored) = view.delayed_message(id)? else {
        return Ok(None);
    };
    let key: ExchangeKey = (
        ShortStr::from(stored.vhost.as_str()),
        ShortStr::from(stored.exchange.as_str()),
    );
    if of.is_some_and(|of| *of != key) || !accept(&inner.book, &key, id.seq) {
        return Ok(None);
    }
    if !disk.take(id, &view)? {
        return Ok(None);
    }
    Ok(Some(TakenFromDisk {
        key,
        message: stored.message,
    }))
}
