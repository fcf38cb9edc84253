//! Queues, consumers and acknowledgements through a real client (lapin), with `common::raw`
//! where lapin cannot go. One test binary (one link, as CI's build time wants) with a module
//! per feature.

#[path = "../common/mod.rs"]
mod common;

mod acks_and_channels;
mod consumers;
mod declare;
mod waiting_messages;
