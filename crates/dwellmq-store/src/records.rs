//! The records the store keeps, and their value encodings (DESIGN.md, "Values").
//!
//! Arguments, policy definitions and vhost metadata are opaque octets to the store: the broker
//! writes them in the AMQP field-table encoding it already has, so the store needs no knowledge
//! of their meaning and a new argument needs no new format.
//!
//! One file per family: `definitions` (everything durable but messages), `messages` (a queue's
//! messages and their delivery state), `held` (what delayed exchanges hold).

mod definitions;
mod held;
mod messages;

pub use definitions::{
    BindingDef, Definitions, DestinationKind, ExchangeDef, PermissionDef, PermissionPatterns,
    PolicyDef, QueueDef, UserDef, VhostDef,
};
pub use held::DelayedMessage;
pub(crate) use held::{decode_held_value, HeldBody, HeldBy, HeldHeader, HELD_HEADER};
pub(crate) use messages::{decode_message_value, expiry_word, MESSAGE_HEADER};
pub use messages::{DeliveryState, Payload, StoredMessage};
