//! A `queue.declare`'s arguments as the validators read them: by key, with a refusal worded
//! as RabbitMQ words it for that queue.

use dwellmq_codec::{FieldTable, FieldValue};

use super::types::{QueueKind, QueueType};
use crate::error::BrokerError;

/// Errors for one queue, with RabbitMQ's wording.
pub(super) struct QueueErrors<'a> {
    pub(super) queue: &'a str,
    pub(super) vhost: &'a str,
}

impl QueueErrors<'_> {
    /// `invalid arg 'K' for queue 'Q' in vhost 'V': REASON` (`rabbit_amqqueue`).
    pub(super) fn invalid_arg(&self, key: &str, reason: &str) -> BrokerError {
        BrokerError::PreconditionFailed(format!(
            "invalid arg '{key}' for queue '{}' in vhost '{}': {reason}",
            self.queue, self.vhost
        ))
    }

    /// `invalid arg 'K' for queue 'Q' in vhost 'V' of queue type rabbit_stream_queue`: an
    /// argument (of the declare, or of a consumer) that another queue kind takes.
    pub(super) fn foreign_arg(&self, key: &str, kind: impl Into<QueueKind>) -> BrokerError {
        BrokerError::PreconditionFailed(format!(
            "invalid arg '{key}' for queue '{}' in vhost '{}' of queue type {}",
            self.queue,
            self.vhost,
            kind.into().module_name()
        ))
    }

    pub(super) fn invalid_property(&self, property: &str) -> BrokerError {
        BrokerError::PreconditionFailed(format!(
            "invalid property '{property}' for queue '{}' in vhost '{}'",
            self.queue, self.vhost
        ))
    }
}

/// The arguments of one declare, once its queue type is known.
pub(super) struct Declared<'a> {
    pub(super) args: &'a FieldTable,
    pub(super) errors: QueueErrors<'a>,
    pub(super) queue_type: QueueType,
}

impl Declared<'_> {
    /// The argument `key` as `read` reads it, `None` when it is absent; a value `read`
    /// refuses is RabbitMQ's `invalid arg` with `read`'s reason.
    pub(super) fn read<T>(
        &self,
        key: &str,
        read: impl FnOnce(&FieldValue) -> Result<T, String>,
    ) -> Result<Option<T>, BrokerError> {
        self.args
            .get(key)
            .map(|v| read(v).map_err(|reason| self.errors.invalid_arg(key, &reason)))
            .transpose()
    }

    /// Checks the argument `key` as `read` reads it, keeping nothing (arguments that only
    /// matter to a cluster or to RabbitMQ's storage).
    pub(super) fn check<T>(
        &self,
        key: &str,
        read: impl FnOnce(&FieldValue) -> Result<T, String>,
    ) -> Result<(), BrokerError> {
        self.read(key, read).map(drop)
    }

    pub(super) fn quorum(&self) -> bool {
        self.queue_type == QueueType::Quorum
    }

    pub(super) fn classic(&self) -> bool {
        !self.quorum()
    }
}
