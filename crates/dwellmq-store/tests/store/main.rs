//! The store through its public API: opening, messages, definitions, group commit, injected
//! faults and SIGKILL crashes. One test binary (one link) with a module per feature.

#[path = "../common/mod.rs"]
mod common;

mod carry;
mod crash;
mod definitions;
mod disk_model;
mod faults;
mod group_commit;
mod held_lag;
mod held_order;
mod messages;
mod open;
#[path = "../sim/mod.rs"]
mod sim;
mod simulate;
mod spilled;
mod streams;
