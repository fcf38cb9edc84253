//! The codec against its contract: round trips, the specification's vectors, corrupt and
//! truncated input, zero-copy bodies and the fuzz corpus. One test binary (one link) with a module
//! per feature; `alloc.rs` stays a binary of its own, as its counting global allocator would see
//! every other test's allocations.

#[path = "../common/mod.rs"]
mod common;

mod corrupt;
mod fuzz_corpus;
mod roundtrip;
mod truncation;
mod vectors;
mod zero_copy;
