//! What a submission asks the store to write.

use dwellmq_core::schedule::DeadlineId;

use crate::error::StoreError;
use crate::records::{
    BindingDef, DeliveryState, ExchangeDef, Payload, PermissionDef, PolicyDef, QueueDef, UserDef,
    VhostDef,
};

/// One change. A submission's changes are applied in order, in one commit with everything else
/// that arrived while the previous commit ran.
#[derive(Debug, Clone)]
pub enum Op {
    /// Adds or replaces a vhost.
    PutVhost(VhostDef),
    /// Removes a vhost with every definition and message under it.
    DeleteVhost {
        /// Its name.
        name: String,
    },
    /// Adds or replaces a user.
    PutUser(UserDef),
    /// Removes a user.
    DeleteUser {
        /// Its name.
        name: String,
    },
    /// Adds or replaces a user's permissions in a vhost (or the mark that they were cleared).
    PutPermission(PermissionDef),
    /// Removes a user's permissions record in a vhost.
    DeletePermission {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
    },
    /// Adds or replaces a durable exchange.
    PutExchange(ExchangeDef),
    /// Removes an exchange and the bindings whose source it is. (Bindings leading *to* it, from
    /// other exchanges, are removed by their own [`Op::DeleteBinding`].)
    DeleteExchange {
        /// Its vhost.
        vhost: String,
        /// Its name.
        name: String,
    },
    /// Adds or replaces a durable queue.
    PutQueue(QueueDef),
    /// Removes a queue and its messages, or a stream and its log (the stream's id is its
    /// queue's). (Its bindings go by [`Op::DeleteBinding`].)
    DeleteQueue {
        /// Its vhost.
        vhost: String,
        /// Its name.
        name: String,
        /// Its id.
        id: u64,
    },
    /// Adds a binding.
    PutBinding(BindingDef),
    /// Removes a binding.
    DeleteBinding(BindingDef),
    /// Adds or replaces a policy.
    PutPolicy(PolicyDef),
    /// Removes a policy.
    DeletePolicy {
        /// Its vhost.
        vhost: String,
        /// Its name.
        name: String,
    },
    /// A persistent message entered a durable queue (`Effect::Persist`).
    Persist {
        /// The queue's id.
        queue: u64,
        /// The message's position in the queue.
        seq: u64,
        /// When it expires (ms since the epoch; 0 = never), so TTL continues after a restart.
        expires_at_ms: u64,
        /// It was delivered (to a consumer that must ack it) before this op was submitted: it
        /// comes back with `redelivered` set, with no [`Op::SetState`] written for it.
        delivered: bool,
        /// The message.
        message: Payload,
    },
    /// A persisted message's delivery state changed (first delivery, requeued, waiting for a
    /// retry). Ignored for a message that is not stored; dropped by the writer when the
    /// message is forgotten later in the same batch.
    SetState {
        /// The queue's id.
        queue: u64,
        /// The message's position.
        seq: u64,
        /// Its new state.
        state: DeliveryState,
    },
    /// A persisted message left its queue for good (`Effect::Forget`).
    Forget {
        /// The queue's id.
        queue: u64,
        /// The message's position.
        seq: u64,
    },
    /// The stored messages of a queue at positions `from_seq..end_seq` left it (the purge of
    /// a paged-out run: none of them is unacknowledged).
    ForgetRange {
        /// The queue's id.
        queue: u64,
        /// The first position.
        from_seq: u64,
        /// The first position after the range.
        end_seq: u64,
    },
    /// A queue under memory pressure leaves a transient message on disk
    /// (`Effect::Spill`). It lives in a table the next start drops whole: a restart brings
    /// none of it back, as a transient message should not come back.
    Spill {
        /// The queue's spill id (per process, not its store id: a transient queue has none).
        spill: u64,
        /// The message's position in the queue.
        seq: u64,
        /// When it expires (ms since the epoch; 0 = never).
        expires_at_ms: u64,
        /// The message.
        message: Payload,
    },
    /// The spilled messages of a queue at positions `from_seq..end_seq` are no longer needed
    /// there (read back into memory, taken out, purged, or the queue deleted).
    Unspill {
        /// The queue's spill id.
        spill: u64,
        /// The first position.
        from_seq: u64,
        /// The first position after the range.
        end_seq: u64,
    },
    /// Every message of a queue left it (purge).
    Purge {
        /// The queue's id.
        queue: u64,
    },
    /// A delayed exchange holds a message until `id.due_ms`.
    Hold {
        /// Due time and sequence number (the scheduler's id).
        id: DeadlineId,
        /// When it was held (the broker's clock, ms since the epoch). It sets how finely the
        /// store buckets the due time (finer when due sooner); it never changes what is read.
        held_at_ms: u64,
        /// The exchange's vhost.
        vhost: String,
        /// The exchange.
        exchange: String,
        /// The message.
        message: Payload,
    },
    /// A held message was released (routed) or dropped.
    Release {
        /// Its id.
        id: DeadlineId,
    },
    /// A stream appended a record (core's `StreamEffect::Append`). A plain write, like a
    /// persist: after a failed commit it is not retried (its publisher was nacked, and the
    /// stream counts the offset as a gap). Written once: an append of an offset the stream
    /// holds already, or below its retention cut, changes nothing.
    StreamAppend {
        /// The stream (the queue's store id).
        stream: u64,
        /// The record's offset.
        offset: u64,
        /// Its timestamp (ms since the epoch).
        timestamp_ms: u64,
        /// The first offset of its segment.
        segment: u64,
        /// The first offset of its index entry (chunk).
        chunk: u64,
        /// The message.
        message: Payload,
    },
    /// Retention dropped a stream's segments before `before_offset` (core's
    /// `StreamEffect::Truncate`): its records and index entries below it go. Retried like
    /// every removal. `before_offset` must start an index entry (core cuts at a segment's
    /// first offset, which starts its first chunk): an entry that began below it goes whole.
    StreamTruncate {
        /// The stream.
        stream: u64,
        /// The first offset kept.
        before_offset: u64,
    },
}

impl Op {
    /// Whether the writer must retry the op when the commit carrying it failed: it removes
    /// something (data, or a user or permission by its deletion mark), or it records a
    /// message's delivery state. Such ops are idempotent. A lost forget would bring an acked
    /// message back after a restart, a lost deletion mark a deleted user, and a lost state
    /// write a quorum queue's delivery count (so a crash could bypass its delivery limit).
    pub(crate) fn is_retried(&self) -> bool {
        match self {
            Op::PutUser(user) => return user.credential.is_empty(),
            Op::PutPermission(permission) => return permission.patterns.is_none(),
            _ => {}
        }
        matches!(
            self,
            Op::DeleteVhost { .. }
                | Op::DeleteUser { .. }
                | Op::DeletePermission { .. }
                | Op::DeleteExchange { .. }
                | Op::DeleteQueue { .. }
                | Op::DeleteBinding(_)
                | Op::DeletePolicy { .. }
                | Op::Forget { .. }
                | Op::ForgetRange { .. }
                | Op::Purge { .. }
                | Op::Unspill { .. }
                | Op::Release { .. }
                | Op::SetState { .. }
                | Op::StreamTruncate { .. }
        )
    }
}

/// What a completed submission learns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    /// The number of the durable commit that carried it; `None` if nothing needed writing (a
    /// message persisted and forgotten before its commit started).
    pub commit: Option<u64>,
}

/// The outcome of a submission.
pub type Completion = Result<Receipt, StoreError>;

/// Called once per submission on the writer thread, after the commit is durable (or failed).
/// Keep it short: the next commit waits for it (hand the result to a channel or a task).
pub type Done = Box<dyn FnOnce(Completion) + Send + 'static>;
