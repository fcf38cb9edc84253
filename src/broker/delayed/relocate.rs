//! Moving a held message to another due time (a reminder that should go now, a retry that
//! should wait until Monday), wherever it is held: its headers, body and properties stay as
//! published, and it is released once, at its new time. Its id names its due time, so the
//! moved message has a new id, which the move answers.
//!
//! A durable exchange's message moves in one store submission, the removal of the old hold
//! and the new hold together: the store commits a submission whole (and retries one holding a
//! removal whole), so after a crash the message is held either at its old time or at its new
//! one, never both nor neither.

use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::arguments::MAX_DELAY_MS;
use dwellmq_core::schedule::{DeadlineId, HORIZON_MS};
use dwellmq_store::{Op, Payload};

use super::cancel::{take_in_memory, take_on_disk};
use super::disk::DiskTier;
use super::held::{ExchangeKey, Held, Kept};
use super::{delayed_id, id_of, DelayedId, DelayedMessages, Locked};

/// Where to move a held message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DelayedMove {
    /// Due now: released at once.
    Now,
    /// Due at this time (milliseconds since the Unix epoch), now or later.
    At(u64),
    /// Due this many milliseconds from now.
    After(u64),
}

/// Why a held message was not moved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveDelayedError {
    /// The message is not held (never was, already released or cancelled), or not by the
    /// exchange named.
    #[error("no held message {0}")]
    NotFound(DelayedId),
    /// A due time before the broker's now: a message cannot be due in the past.
    #[error(
        "the due time {due_ms} is in the past (the broker's clock is at {now_ms}); \
         move it to now instead"
    )]
    InThePast {
        /// The due time asked for.
        due_ms: u64,
        /// The broker's clock then.
        now_ms: u64,
    },
    /// A due time beyond the ten-year ceiling that `x-delay` has too.
    #[error("the due time {due_ms} is more than ten years away (at most {latest_ms})")]
    TooFar {
        /// The due time asked for.
        due_ms: u64,
        /// The latest it may be.
        latest_ms: u64,
    },
    /// The store cannot be read now (reopening after a failed fsync).
    #[error("the messages held on disk cannot be read now: {0}; retry later")]
    Unreadable(String),
}

impl DelayedMove {
    /// The due time this asks for when the broker's clock is at `now_ms`.
    pub fn due_ms(self, now_ms: u64) -> Result<u64, MoveDelayedError> {
        let latest_ms = now_ms.saturating_add(MAX_DELAY_MS.unsigned_abs());
        let due_ms = match self {
            DelayedMove::Now => now_ms,
            DelayedMove::At(due_ms) if due_ms < now_ms => {
                return Err(MoveDelayedError::InThePast { due_ms, now_ms })
            }
            DelayedMove::At(due_ms) => due_ms,
            DelayedMove::After(ms) => now_ms.saturating_add(ms),
        };
        if due_ms > latest_ms {
            return Err(MoveDelayedError::TooFar { due_ms, latest_ms });
        }
        Ok(due_ms)
    }
}

/// A held message taken out for a move, still counted in its exchange's book.
struct Moving {
    held: Held,
    /// Its memory is charged (it was in the scheduler, not on disk).
    charged: bool,
    /// The store's id of it, if the store holds it.
    stored: Option<DeadlineId>,
}

impl DelayedMessages {
    /// Moves the held message `id` (of exchange `of`; any with `None`) to be due at `due_ms`
    /// (checked by the caller: [`DelayedMove::due_ms`]); returns its new id.
    pub(crate) fn move_held(
        &self,
        id: DelayedId,
        of: Option<(&str, &str)>,
        due_ms: u64,
    ) -> Result<DelayedId, MoveDelayedError> {
        let of: Option<ExchangeKey> = of.map(|(v, x)| (ShortStr::from(v), ShortStr::from(x)));
        let of = of.as_ref();
        let (new_id, wake) = {
            let mut disk_guard = self.disk.lock();
            let mut guard = self.scheduler.lock();
            let inner = &mut *guard;
            let old = id_of(id);
            let moving = self
                .take_to_move(disk_guard.as_mut(), inner, old, of)?
                .ok_or(MoveDelayedError::NotFound(id))?;
            // Read before the message is placed: on disk, its contents leave RAM.
            let hold = moving.stored.map(|_| HoldAgain::of(&moving.held, inner));
            let disk = disk_guard.as_mut();
            let placed = self.place(disk, inner, moving.held, due_ms, moving.charged);
            if let (Some(old), Some(hold)) = (moving.stored, hold) {
                // Under both locks, as a hold is: the store's index shows the new hold and
                // hides the old one before a release or a refill can see either.
                self.submit_releasing(vec![old], vec![hold.op(placed.id)]);
            }
            (placed.id, placed.wake)
        };
        if wake {
            self.scheduler.wake();
        }
        tracing::debug!(from = %id, to = %delayed_id(new_id), "moved a held message");
        Ok(delayed_id(new_id))
    }

    /// Takes the message `id` out of wherever it is held, if exchange `of` holds it and it is
    /// its exchange's current incarnation's (not one being purged).
    fn take_to_move(
        &self,
        disk: Option<&mut DiskTier>,
        inner: &mut Locked,
        id: DeadlineId,
        of: Option<&ExchangeKey>,
    ) -> Result<Option<Moving>, MoveDelayedError> {
        if let Some(held) = inner.held(id) {
            let wanted = of.is_none_or(|key| held.belongs_to(key)) && held.target.is_current();
            if !wanted {
                return Ok(None);
            }
            let Some((held, far)) = take_in_memory(inner, id) else {
                return Ok(None);
            };
            if far {
                inner.book.note_beyond(held.incarnation(), Some(id), None);
            }
            let stored = held.stored.then(|| inner.book.stored_id(id));
            return Ok(Some(Moving {
                held,
                charged: true,
                stored,
            }));
        }
        let Some(disk) = disk else {
            return Ok(None);
        };
        let current = |book: &super::Book, key: &ExchangeKey, seq: u64| {
            let index = book.stored_index(key, seq);
            !book.kept.contains(key) && index.is_some_and(|i| i.target.is_current())
        };
        let taken = take_on_disk(disk, inner, id, of, current)
            .map_err(|e| MoveDelayedError::Unreadable(e.to_string()))?;
        let Some(taken) = taken else {
            return Ok(None);
        };
        let index = inner.book.stored_index(&taken.key, id.seq);
        // Checked under these locks by `take_on_disk` just now.
        let Some(target) = index.map(|index| Arc::clone(&index.target)) else {
            return Ok(None);
        };
        Ok(Some(Moving {
            held: Held {
                target,
                message: Kept::Packed(taken.message),
                stored: true,
            },
            charged: false,
            stored: Some(id),
        }))
    }
}

/// What the new `Hold` of a moved stored message writes.
struct HoldAgain {
    held_at_ms: u64,
    vhost: String,
    exchange: String,
    message: Payload,
}

impl HoldAgain {
    fn of(held: &Held, inner: &Locked) -> HoldAgain {
        let (vhost, exchange) = held.exchange_key();
        HoldAgain {
            // The scheduler's now, for the store's bucketing of the due time.
            held_at_ms: inner.core.horizon_ms().saturating_sub(HORIZON_MS),
            vhost: vhost.to_string(),
            exchange: exchange.to_string(),
            message: match &held.message {
                Kept::Packed(packed) => Payload::Packed(packed.clone()),
                Kept::Shared(message) => Payload::Message(Arc::clone(message)),
            },
        }
    }

    fn op(self, id: DeadlineId) -> Op {
        Op::Hold {
            id,
            held_at_ms: self.held_at_ms,
            vhost: self.vhost,
            exchange: self.exchange,
            message: self.message,
        }
    }
}
