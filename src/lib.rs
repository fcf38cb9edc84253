//! dwellmq: an embedded, single-node AMQP 0-9-1 broker that does delayed messaging properly.
//!
//! Existing RabbitMQ clients connect to it unchanged. Embed it in a Rust program or a test:
//!
//! ```no_run
//! # async fn demo() -> Result<(), dwellmq::StartError> {
//! let broker = dwellmq::Broker::start(dwellmq::BrokerConfig::ephemeral()).await?;
//! println!("connect to {}", broker.amqp_url());
//! broker.shutdown().await;
//! # Ok(()) }
//! ```
#![warn(missing_docs, unreachable_pub)]

mod broker;
mod check;
mod config;
#[doc(hidden)]
pub mod fuzzing;
mod handle;
mod http;
mod rfc3339;
mod server;

pub use broker::delayed::{
    DelayedId, DelayedMessageInfo, DelayedMove, MoveDelayedError, ParseDelayedIdError,
};
pub use broker::memory::{
    queued_message_footprint, HELD_MESSAGE_MEMORY_OVERHEAD, MESSAGE_MEMORY_OVERHEAD,
};
pub use check::{check_data_dir, CheckError, CheckReport};
pub use config::{
    ApplyTo, BrokerConfig, ClockConfig, DiskFreeLimit, ExpiryMode, Limits, MemoryWatermark,
    PermissionConfig, Policy, PolicyConfig, PolicyDefinition, PolicyError, PolicyValue, TlsConfig,
    TlsVerify, UserConfig,
};
/// The wire types (field tables, properties) that appear in this crate's API.
pub use dwellmq_codec as codec;
#[doc(hidden)]
pub use dwellmq_store::faults::Faults as StoreFaults;
pub use handle::{
    Broker, BrokerHandle, Condition, Counters, DeathReason, FaultError, ListenerRole,
    PeekedMessage, QueueInfo, ResetError, RetryingMessageInfo, SettleTimeout, StartError,
    UnwrittenOutput, WaitTimeout, DEATH_REASONS, SETTLE_TIMEOUT,
};
pub use server::tls::TlsError;
