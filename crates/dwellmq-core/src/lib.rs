//! dwellmq's broker semantics, without IO.
#![warn(missing_docs, unreachable_pub)]

pub mod arguments;
mod body;
pub mod dead_letter;
mod error;
mod message;
mod packed;
pub mod paging;
pub mod policy;
pub mod queue;
mod queue_messages;
pub mod routing;
pub mod schedule;
pub mod stream;

pub use body::Body;
pub use error::{BrokerError, BrokerResult};
pub use message::{Message, MessageGuard};
pub use packed::PackedMessage;
pub use queue_messages::{
    packed_footprint, QueueEntry, QueueMessages, ReadyMessage, SpilledMessage, PACK_BODY_LIMIT,
};
