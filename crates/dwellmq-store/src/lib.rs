//! dwellmq's durable store (redb): definitions, persistent messages, queue indexes and the
//! delayed index, with group commit.
//!
//! Empty on purpose: the workspace reserves the crate so the dependency direction (store
//! depends on core, the broker on the store) is fixed from the start. The store arrives with
//! its own issue; until then the broker keeps everything in memory (see README.md).
