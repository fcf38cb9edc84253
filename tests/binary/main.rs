//! The `dwellmq` binary as a process: its command line, signals, the test double mode and the
//! SIGKILL crash harness. Needs the `binary` feature (Cargo.toml's `[[test]]` entry says so).
//! One test binary (one link, as CI's build time wants) with a module per feature; a new test file
//! joins it with a `mod` line here and `use crate::common::...` inside.

#[path = "../common/mod.rs"]
mod common;

#[path = "../http_client/mod.rs"]
mod http_client;

mod binary;
mod crash_definitions;
mod crash_delayed;
mod crash_support;
mod durability_crash;
mod output;
mod test_double_binary;
