//! Routing: the bindings of an exchange and which destinations a message goes to.
//!
//! One [`BindingSet`] per exchange, built for its [`RoutingKind`]; the semantics are RabbitMQ's
//! (`rabbit_exchange_type_direct`, `_fanout`, `_topic`, `_headers`). [`route`] walks a vhost's
//! exchange graph over them (`rabbit_exchange:route/2`).

mod binding;
mod binding_set;
mod destinations;
mod direct;
mod graph;
mod headers;
mod sender_selected;
mod topic;

pub use binding::{Binding, Destination, RoutingKind};
pub use binding_set::BindingSet;
pub use graph::{route, ExchangeGraph, RouteKeys, Routed};
pub use headers::validate_headers_binding_args;
pub use sender_selected::{bcc_keys, extra_routing_keys, BCC, CC};
