//! dwellmq's broker semantics, without IO.
#![warn(missing_docs, unreachable_pub)]

pub mod arguments;
mod body;
mod error;
mod message;
mod queue_messages;
pub mod routing;

pub use body::Body;
pub use error::{BrokerError, BrokerResult};
pub use message::Message;
pub use queue_messages::{QueueEntry, QueueMessages};
