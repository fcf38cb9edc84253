//! Queues, consumers and acknowledgements through a real client (lapin), with `common::raw`
//! where lapin cannot go. One test binary (one link, as CI's build time wants) with a module
//! per feature.

#[path = "../common/mod.rs"]
mod common;

mod acks_and_channels;
mod consumers;
mod declare;
mod heap;
mod memory_charges;
mod waiting_messages;

/// Counts what the heap holds, for the memory charge tests (`heap`).
#[global_allocator]
static HEAP: heap::Counting = heap::Counting;
