//! What a queue asks its caller to do: the effects of one command.
//!
//! The caller owns an [`Effects`] and reuses it, so a command allocates nothing in steady state.
//! Invariants (also in ARCHITECTURE.md):
//! - `Deliver` effects come in queue order and must be carried out before the queue's lock is
//!   released (another command may deliver the next message to the same consumer).
//! - `DeadLetter` effects are carried out after the lock is released: they route through the
//!   vhost, possibly into this very queue.
//! - `Arm` asks for `tick` at or after the given time; an early or extra tick is harmless.
//! - `Persist` precedes the confirm of the message it names; `Forget` follows its last use.
//! - `Expire` means the queue itself is unused past `x-expires` and must be deleted.

use std::sync::Arc;

use crate::message::Message;
use crate::queue_messages::QueueEntry;

/// Why a message left a queue without being consumed (`x-death`'s `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeathReason {
    /// `basic.reject` or `basic.nack` with requeue=false.
    Rejected,
    /// Its TTL passed.
    Expired,
    /// The queue's length limit pushed it out (or refused it, with `reject-publish-dlx`).
    Maxlen,
    /// A quorum queue's delivery limit was exceeded.
    DeliveryLimit,
}

impl DeathReason {
    /// The name RabbitMQ writes.
    pub fn name(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::Maxlen => "maxlen",
            DeathReason::DeliveryLimit => "delivery_limit",
        }
    }

    /// Parses a name RabbitMQ writes.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        Some(match name {
            b"rejected" => DeathReason::Rejected,
            b"expired" => DeathReason::Expired,
            b"maxlen" => DeathReason::Maxlen,
            b"delivery_limit" => DeathReason::DeliveryLimit,
            _ => return None,
        })
    }
}

/// One effect. `C` is the shell's handle for a consumer.
#[derive(Debug)]
pub enum Effect<C> {
    /// Write `entry` to `consumer` (basic.deliver). Its credit is already counted. If the
    /// shell cannot (the channel is closing), it hands the entry back with
    /// [`crate::queue::QueueState::undelivered`].
    Deliver {
        /// Who gets it.
        consumer: C,
        /// The message and its queue state.
        entry: QueueEntry,
        /// A stored message going to a no-ack consumer: it leaves the store once it is
        /// delivered, and only then (one handed back stays stored).
        forget: bool,
    },
    /// Route `message` to the queue's dead-letter exchange.
    DeadLetter {
        /// The message as it was in the queue.
        message: Arc<Message>,
        /// Why it died.
        reason: DeathReason,
    },
    /// A message left the queue for good without a dead-letter exchange to go to.
    Dropped {
        /// Why.
        reason: DeathReason,
    },
    /// Call `tick` at or after this time (milliseconds since the epoch).
    Arm {
        /// When.
        at_ms: u64,
    },
    /// The queue has been unused for its `x-expires` period: delete it.
    Expire,
    /// Store hook: a persistent message entered a durable queue.
    Persist {
        /// Its position in the queue.
        seq: u64,
        /// The message (the store writes it).
        message: Arc<Message>,
        /// When it expires (ms since the epoch), so that its TTL continues after a restart.
        expires_at: Option<u64>,
        /// Delivered (to a consumer that must ack it) by the same command: a restart brings
        /// it back redelivered, with no [`Effect::SetState`] for this delivery.
        delivered: bool,
    },
    /// Store hook: what a restart must know of a persisted message's delivery changed: its
    /// first delivery to a consumer that must ack it, or (quorum queues) a return that
    /// counted it or put it into a delayed retry.
    SetState {
        /// Its position in the queue.
        seq: u64,
        /// What a restart brings back.
        state: DeliveryMark,
    },
    /// Store hook: a persisted message left the queue for good.
    Forget {
        /// Its position in the queue.
        seq: u64,
    },
    /// Store hook: the messages of a paged-out run left the queue for good (a purge): every
    /// stored message at positions `from_seq..end_seq` (none there is unacknowledged).
    ForgetRun {
        /// The run's first position.
        from_seq: u64,
        /// The first position after it.
        end_seq: u64,
    },
    /// Store hook (memory pressure): a message the store does not have, beyond the window,
    /// is to be written to the spill table; it leaves memory once that write is committed.
    Spill {
        /// Its position.
        seq: u64,
        /// The message as the queue keeps it.
        message: crate::SpilledMessage,
        /// When it expires (ms since the epoch).
        expires_at: Option<u64>,
    },
    /// Store hook: the spilled records at positions `from_seq..end_seq` are not needed any
    /// more (their messages were read back, left the queue, or were purged).
    Unspill {
        /// The first position.
        from_seq: u64,
        /// The first position after the range.
        end_seq: u64,
    },
    /// Store hook: a persisted message whose persist failed is persisted again (the same
    /// record; no publisher waits for it). Until that write commits it stays in memory.
    Rewrite {
        /// Its position.
        seq: u64,
        /// The message.
        message: Arc<Message>,
        /// When it expires (ms since the epoch).
        expires_at: Option<u64>,
    },
    /// Store hook: the removals this command asked for (`Forget`s, `Unspill`s) of messages
    /// a page of the run could still find are numbered `mark`; the owner reports their
    /// commit through [`crate::queue::WriteProgress::removals_committed`]. Marks only grow.
    RemovalsMark {
        /// The number.
        mark: u64,
    },
}

/// A persisted message's delivery state as a restart must bring it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DeliveryMark {
    /// It was delivered: it comes back with `redelivered` set.
    pub redelivered: bool,
    /// Failed attempts (`x-delivery-count`, quorum queues).
    pub delivery_count: u32,
    /// Returns of any kind (`x-acquired-count`, quorum queues).
    pub acquired_count: u32,
    /// Waiting for a delayed retry until then (ms since the epoch).
    pub ready_at: Option<u64>,
}

/// A reusable sink of effects.
#[derive(Debug)]
pub struct Effects<C> {
    items: Vec<Effect<C>>,
    /// Where the last `Persist` sits, so a delivery by the same command can mark it.
    last_persist: Option<usize>,
}

impl<C> Default for Effects<C> {
    fn default() -> Self {
        Effects {
            items: Vec::new(),
            last_persist: None,
        }
    }
}

impl<C> Effects<C> {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn push(&mut self, effect: Effect<C>) {
        if matches!(effect, Effect::Persist { .. }) {
            self.last_persist = Some(self.items.len());
        }
        self.items.push(effect);
    }

    /// Marks the persist of `seq` as delivered if it is the last one this command asked for
    /// (a message published to a waiting consumer); false if there is none (a state write is
    /// needed instead).
    pub(crate) fn mark_delivered(&mut self, seq: u64) -> bool {
        let Some(at) = self.last_persist else {
            return false;
        };
        match self.items.get_mut(at) {
            Some(Effect::Persist {
                seq: persisted,
                delivered,
                ..
            }) if *persisted == seq => {
                *delivered = true;
                true
            }
            _ => false,
        }
    }

    /// Takes the effects out in order, leaving the sink empty (its buffer kept).
    pub fn drain(&mut self) -> std::vec::Drain<'_, Effect<C>> {
        self.last_persist = None;
        self.items.drain(..)
    }

    /// Whether a message is to be dead-lettered (its removal and its copies must then be
    /// stored together).
    pub fn has_dead_letters(&self) -> bool {
        self.items
            .iter()
            .any(|e| matches!(e, Effect::DeadLetter { .. }))
    }

    /// Whether no effect is pending.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The pending effects.
    pub fn as_slice(&self) -> &[Effect<C>] {
        &self.items
    }
}
