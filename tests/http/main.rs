//! The HTTP side: the management API, its authentication, rates, users, definitions, the
//! delayed-message endpoints, the metrics port and the test double's HTTP controls.
//! One test binary (one link, as CI's build time wants) with a module per feature; a new test file
//! joins it with a `mod` line here and `use crate::common::...` / `crate::http_client::...` inside.

#[path = "../common/mod.rs"]
mod common;

#[path = "../http_client/mod.rs"]
mod http_client;

mod consumer_cancel;
mod dead_letters_kept_in_source;
mod exchange_declarer;
mod http_api;
mod http_auth;
mod http_browser_safety;
mod http_connections;
mod http_definitions;
mod http_delayed;
mod http_delayed_move;
mod http_management_shapes;
mod http_metrics_families;
mod http_policies;
mod http_publish_pipeline;
mod http_rates;
mod http_users;
mod metrics_port;
mod prometheus_text;
mod test_double_faults;
mod test_double_http;
