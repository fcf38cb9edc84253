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
//!
//! Cargo features, all on by default: `http` (the management API, the page, `/metrics`, the
//! test double's `/test/...` endpoints and definitions files), `tls` (AMQP over TLS) and
//! `binary` (the `dwellmq` server binary, which turns on both). With `default-features = false`
//! only what AMQP needs is compiled; [`Broker::start`] then refuses a [`BrokerConfig`] that asks
//! for a left-out feature ([`StartError::NotBuilt`]).
#![warn(missing_docs, unreachable_pub)]
// Much of the broker's reading side (listings, rates, connection and user details, the test
// double's controls) is there for the HTTP API: a build without the `http` feature leaves it
// unused. Marking each item would scatter cfgs over the broker; the default build, which has
// every feature, still reports dead code.
#![cfg_attr(not(feature = "http"), allow(dead_code, unused_imports))]

mod broker;
mod check;
mod config;
#[doc(hidden)]
pub mod fuzzing;
mod handle;
#[cfg(feature = "http")]
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
pub use server::tls_error::TlsError;
