//! Every path the API serves, in groups of one resource each. Paths with a vhost take it
//! percent-encoded (`%2F` for `/`).

use std::sync::Arc;

use axum::handler::Handler;
use axum::routing::{delete, get, post, put};
use axum::Router;

use super::auth::{ADMINISTRATOR, MANAGEMENT};
use super::bindings::{self, Bindings};
use super::exchanges::{self, Exchanges};
use super::policies::{self, Policies};
use super::queues::{self, Queues};
use super::resource::{self, Deletable, Named};
use super::{
    connections, definitions, delayed, metrics, overview, page, publish_get, test_clock,
    test_faults, test_inspect, test_reset, test_wait, users, vhost_delete, Api,
};

type Routes = Router<Arc<Api>>;

/// The management API, the page and `/metrics`.
pub(super) fn api() -> Routes {
    Router::new()
        .route("/", get(page::index))
        .merge(overview())
        .merge(vhosts())
        .merge(users())
        .merge(health())
        .merge(connections())
        .merge(exchange_routes())
        .merge(queue_routes())
        .merge(binding_routes())
        .merge(definitions())
        .merge(delayed())
        .merge(policy_routes())
        .merge(metrics())
}

/// A resource listed, shown and deleted as `resource` does it, declared by `declare`:
/// `{base}`, `{base}/{vhost}` and `{base}/{vhost}/{name}`. Changes take a user tagged `N`.
fn vhost_resource<R, const N: u8, H, T>(base: &str, declare: H) -> Routes
where
    R: Named + Deletable + 'static,
    R::Query: Send,
    H: Handler<T, Arc<Api>>,
    T: 'static,
{
    Router::new()
        .route(base, get(resource::list_all::<R>))
        .route(&format!("{base}/{{vhost}}"), get(resource::list_vhost::<R>))
        .route(
            &format!("{base}/{{vhost}}/{{name}}"),
            get(resource::show::<R>)
                .put(declare)
                .delete(resource::delete::<R, N>),
        )
}

fn overview() -> Routes {
    Router::new()
        .route("/api/overview", get(overview::overview))
        .route("/api/whoami", get(overview::whoami))
}

fn vhosts() -> Routes {
    Router::new()
        .route("/api/vhosts", get(overview::vhosts))
        .route(
            "/api/vhosts/{vhost}",
            get(overview::vhost)
                .put(overview::put_vhost)
                .delete(vhost_delete::delete_vhost),
        )
        .route(
            "/api/vhosts/{vhost}/permissions",
            get(users::permissions_of_vhost),
        )
}

fn users() -> Routes {
    Router::new()
        .route("/api/users", get(users::list))
        .route(
            "/api/users/{name}",
            get(users::show).put(users::put).delete(users::delete),
        )
        .route(
            "/api/users/{name}/permissions",
            get(users::permissions_of_user),
        )
        .route("/api/permissions", get(users::permissions))
        .route(
            "/api/permissions/{vhost}/{user}",
            get(users::show_permission)
                .put(users::put_permission)
                .delete(users::delete_permission),
        )
}

fn health() -> Routes {
    Router::new()
        .route("/api/health/checks/alarms", get(overview::alarms))
        .route(
            "/api/health/checks/definitions",
            get(overview::unrestored_definitions),
        )
        .route("/api/aliveness-test/{vhost}", get(publish_get::aliveness))
}

fn connections() -> Routes {
    Router::new()
        .route("/api/connections", get(connections::list))
        .route(
            "/api/connections/{name}",
            get(connections::show).delete(connections::close),
        )
        .route(
            "/api/connections/{name}/channels",
            get(connections::channels_of_connection),
        )
        .route("/api/channels", get(connections::channels))
        .route("/api/consumers", get(connections::consumers))
}

fn exchange_routes() -> Routes {
    vhost_resource::<Exchanges, MANAGEMENT, _, _>("/api/exchanges", exchanges::declare)
        .route(
            "/api/exchanges/{vhost}/{name}/publish",
            post(publish_get::publish),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/source",
            get(bindings::of_source),
        )
        .route(
            "/api/exchanges/{vhost}/{name}/bindings/destination",
            get(bindings::of_exchange_destination),
        )
}

fn queue_routes() -> Routes {
    vhost_resource::<Queues, MANAGEMENT, _, _>("/api/queues", queues::declare)
        .route("/api/queues/{vhost}/{name}/contents", delete(queues::purge))
        .route("/api/queues/{vhost}/{name}/get", post(publish_get::get))
        .route(
            "/api/queues/{vhost}/{name}/bindings",
            get(bindings::of_queue_destination),
        )
}

fn binding_routes() -> Routes {
    Router::new()
        .route("/api/bindings", get(resource::list_all::<Bindings>))
        .route(
            "/api/bindings/{vhost}",
            get(resource::list_vhost::<Bindings>),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
            get(bindings::between).post(bindings::create),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
            get(bindings::show).delete(bindings::delete),
        )
}

fn definitions() -> Routes {
    Router::new()
        .route(
            "/api/definitions",
            get(definitions::export).post(definitions::import_all),
        )
        .route(
            "/api/definitions/{vhost}",
            get(definitions::export_vhost).post(definitions::import_vhost),
        )
}

fn delayed() -> Routes {
    Router::new()
        .route("/api/delayed", get(delayed::list_exchanges))
        .route(
            "/api/delayed/{vhost}/{exchange}",
            get(delayed::list_messages),
        )
        .route(
            "/api/delayed/{vhost}/{exchange}/histogram",
            get(delayed::histogram),
        )
        .route(
            "/api/delayed/{vhost}/{exchange}/contents",
            delete(delayed::purge),
        )
        .route(
            "/api/delayed/{vhost}/{exchange}/messages/{id}",
            delete(delayed::cancel),
        )
        .route(
            "/api/delayed/{vhost}/{exchange}/messages/{id}/move",
            post(delayed::move_message),
        )
}

fn policy_routes() -> Routes {
    vhost_resource::<Policies, ADMINISTRATOR, _, _>("/api/policies", policies::put)
}

/// Prometheus `/metrics`; also served alone on the metrics listener.
pub(super) fn metrics() -> Routes {
    Router::new()
        .route("/metrics", get(metrics::aggregated))
        .route("/metrics/per-object", get(metrics::per_object))
        .route("/metrics/detailed", get(metrics::detailed))
}

/// The test double's endpoints (src/http/test_*.rs).
pub(super) fn test() -> Routes {
    Router::new()
        .route("/test/clock", get(test_clock::show))
        .route("/test/clock/advance", post(test_clock::advance))
        .route("/test/queues/{vhost}/{name}", get(test_inspect::queue))
        .route(
            "/test/exchanges/{vhost}/{name}/held",
            get(test_inspect::held),
        )
        .route("/test/counters", get(test_inspect::show_counters))
        .route("/test/wait", post(test_wait::wait))
        .route("/test/reset", post(test_reset::reset_broker))
        .route(
            "/test/restart",
            get(test_faults::restarts).post(test_faults::restart),
        )
        .merge(test_faults())
}

fn test_faults() -> Routes {
    Router::new()
        .route("/test/faults/fail-writes", post(test_faults::fail_writes))
        .route(
            "/test/faults/close-connection",
            post(test_faults::close_connection),
        )
        .route(
            "/test/faults/close-channel",
            post(test_faults::close_channel),
        )
        .route(
            "/test/faults/nack-confirms",
            post(test_faults::nack_confirms),
        )
        .route(
            "/test/faults/delay/{vhost}/{queue}",
            put(test_faults::set_delay).delete(test_faults::clear_delay),
        )
}
