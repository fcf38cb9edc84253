//! A broker on a data directory: what survives a restart, store faults and recovery.
//! One test binary (one link, as CI's build time wants) with a module per feature; a new test file
//! joins it with a `mod` line here and `use crate::common::...` inside.

#[path = "../common/mod.rs"]
mod common;

#[path = "../http_client/mod.rs"]
mod http_client;

mod access_write_failures;
mod at_least_once_dead_letters;
mod data_dir;
mod delayed_listing_unreadable;
mod delayed_moves;
mod delayed_namesakes;
mod delayed_on_disk;
mod durability_faults;
mod failure_paths;
mod http_definition_writes;
mod kept_dead_letters_memory;
mod kept_exchange;
mod kept_exchange_due;
mod kept_queue_paged;
mod large_messages;
mod message_life;
mod non_ascii_names;
mod paging;
mod restart;
mod restart_state;
mod shell_sim;
mod spilling;
mod support;
mod upgraded_store;
mod wall_clock_steps;
mod write_failures;
