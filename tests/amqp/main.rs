//! AMQP 0-9-1 features through a real client (lapin): routing, exchanges, delayed messages,
//! dead lettering, TTLs and limits, policies, permissions, publish modes, TLS, the embedding API.
//! One test binary (one link, as CI's build time wants) with a module per feature; a new test file
//! joins it with a `mod` line here and `use crate::common::...` inside.

#[path = "../common/mod.rs"]
mod common;

mod at_least_once_by_policy;
mod at_least_once_dead_lettering;
mod basic_flow;
mod classic_queue_arguments;
mod concurrent_topology;
mod dead_lettering;
mod delayed_exchange;
mod direct_reply_to;
mod embedding;
mod errors;
mod exchanges;
mod fuzz_connection;
mod many_brokers;
mod peer_suites;
mod permissions;
mod policies;
mod predeclared_exchanges;
mod publish_modes;
mod quorum_queues;
mod readme_example;
mod server_names;
#[cfg(feature = "tls")]
mod tls;
mod ttl_and_limits;
