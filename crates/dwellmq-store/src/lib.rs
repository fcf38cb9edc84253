//! dwellmq's durable store on redb: definitions, persistent messages in queue order, and the
//! messages delayed exchanges hold, written by one group-commit writer. DESIGN.md documents the
//! file byte by byte. This is the only crate that knows redb.
//!
//! The broker [`Store::submit`]s the store effects of all its connections (persist, forget,
//! hold, release, definition changes); the writer commits everything that arrived meanwhile in
//! one transaction with one fsync, then calls each submission's completion, which is when a
//! publisher confirm may go out. At start, a [`Snapshot`] gives definitions and counters
//! without reading a message, then queue contents page by page, and the delayed index without
//! bodies.

mod alarm;
mod apply;
mod backend;
mod carry;
mod codec;
mod error;
pub mod faults;
mod id_hash;
mod lag;
mod layout;
mod migrate;
mod open;
mod ops;
mod queue_counts;
mod read;
mod records;
mod store;
mod stream_records;
mod writer;

pub use alarm::{AlarmHook, StoreAlarm};
pub use backend::BackendFactory;
pub use dwellmq_core::schedule::DeadlineId;
pub use error::{Result, StoreError};
pub use lag::HeldView;
pub use layout::{DB_FILE, FORMAT_VERSION, LOCK_FILE};
pub use migrate::inspect::{inspect, Inspection, Opens, PageCheck};
pub use migrate::tally::{QueueTally, Tally};
pub use migrate::tally_held::HeldTally;
pub use migrate::tally_stream::StreamTally;
pub use migrate::OLDEST_FORMAT;
pub use open::{ForgetCache, StoreOptions, SyncDir};
pub use ops::{Completion, Done, Op, Receipt};
pub use read::{QueueStored, Recovery, Snapshot, STREAM_SCAN_LIMIT};
pub use records::{
    BindingDef, Definitions, DelayedMessage, DeliveryState, DestinationKind, ExchangeDef, Payload,
    PermissionDef, PermissionPatterns, PolicyDef, QueueDef, StoredMessage, UserDef, VhostDef,
};
pub use redb::{BackendError, StorageBackend};
pub use store::{Group, Store, StoreStats};
