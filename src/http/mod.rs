//! The operator's surface over HTTP: a subset of RabbitMQ's management API (paths, JSON field
//! names, status codes and error bodies as RabbitMQ's), dwellmq's delayed-message endpoints,
//! and Prometheus metrics at `/metrics`.
//!
//! It runs on the broker's tokio runtime and reads broker state through the same calls the
//! AMQP side uses; one file per resource group.

mod auth;
mod bindings;
mod connections;
pub(crate) mod definitions;
mod delayed;
mod error;
mod exchanges;
mod extract;
mod fields;
mod listener;
mod metrics;
mod overview;
mod page;
mod policies;
mod publish_get;
mod queue_shape;
mod queues;
pub(crate) mod sampler;
mod test_clock;
mod test_faults;
mod test_inspect;
mod test_reset;
mod test_wait;
mod users;
mod vhost_delete;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::vhost::VHost;
use crate::broker::BrokerState;
use crate::server::shutdown_requested;
use error::{ApiError, ApiResult};

/// Largest request body accepted (of the order of RabbitMQ's management default); a publish
/// over HTTP is also bounded by `max_message_size`.
pub(crate) const MAX_BODY: usize = 20 << 20;

/// The node name the API reports (RabbitMQ's `rabbit@host`).
pub(crate) const NODE: &str = "dwellmq@localhost";

/// What every handler reads: the broker and where it listens.
pub(crate) struct Api {
    pub(crate) state: Arc<BrokerState>,
    /// The AMQP listeners, as bound.
    pub(crate) amqp: Vec<SocketAddr>,
    /// This listener, as bound.
    pub(crate) http: SocketAddr,
}

impl Api {
    /// The vhost, or 404.
    pub(crate) fn vhost(&self, name: &str) -> ApiResult<Arc<VHost>> {
        self.state.vhost(name).ok_or_else(ApiError::not_found)
    }

    /// Every vhost, sorted by name.
    pub(crate) fn vhosts(&self) -> Vec<Arc<VHost>> {
        self.state.all_vhosts()
    }
}

/// Serves the API on `listener` until the broker shuts down.
pub(crate) async fn serve(
    state: Arc<BrokerState>,
    amqp: Vec<SocketAddr>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let http = match listener.local_addr() {
        Ok(addr) => addr,
        Err(error) => {
            tracing::error!(%error, "HTTP listener has no address");
            return;
        }
    };
    let api = Arc::new(Api { state, amqp, http });
    tokio::spawn(sampler::run(Arc::clone(&api), shutdown.clone()));
    let app = router(api).into_make_service_with_connect_info::<listener::Peer>();
    let listener = listener::CappedListener::new(
        listener,
        listener::MAX_HTTP_CONNECTIONS,
        listener::IDLE_TIMEOUT,
    );
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown_requested(&mut shutdown).await })
        .await;
    if let Err(error) = result {
        tracing::error!(%error, "HTTP listener failed");
    }
}

/// Serves Prometheus `/metrics`, and nothing else, on a listener of its own (RabbitMQ's
/// `rabbitmq_prometheus` port) until the broker shuts down.
pub(crate) async fn serve_metrics(
    state: Arc<BrokerState>,
    amqp: Vec<SocketAddr>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let http = match listener.local_addr() {
        Ok(addr) => addr,
        Err(error) => {
            tracing::error!(%error, "metrics listener has no address");
            return;
        }
    };
    let api = Arc::new(Api { state, amqp, http });
    let app = Router::new()
        .route("/metrics", get(metrics::aggregated))
        .route("/metrics/per-object", get(metrics::per_object))
        .route("/metrics/detailed", get(metrics::detailed))
        .fallback(|| async { ApiError::not_found() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .with_state(api)
        .into_make_service_with_connect_info::<listener::Peer>();
    let listener = listener::CappedListener::new(
        listener,
        listener::MAX_HTTP_CONNECTIONS,
        listener::IDLE_TIMEOUT,
    );
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown_requested(&mut shutdown).await })
        .await;
    if let Err(error) = result {
        tracing::error!(%error, "metrics listener failed");
    }
}

/// Every route. Paths with a vhost take it percent-encoded (`%2F` for `/`).
fn router(api: Arc<Api>) -> Router {
    Router::new()
        .route("/", get(page::index))
        .route("/api/overview", get(overview::overview))
        .route("/api/whoami", get(overview::whoami))
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
        .route("/api/health/checks/alarms", get(overview::alarms))
        .route(
            "/api/health/checks/definitions",
            get(overview::unrestored_definitions),
        )
        .route("/api/aliveness-test/{vhost}", get(publish_get::aliveness))
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
        .route("/api/exchanges", get(exchanges::list_all))
        .route("/api/exchanges/{vhost}", get(exchanges::list_vhost))
        .route(
            "/api/exchanges/{vhost}/{name}",
            get(exchanges::show)
                .put(exchanges::declare)
                .delete(exchanges::delete),
        )
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
        .route("/api/queues", get(queues::list_all))
        .route("/api/queues/{vhost}", get(queues::list_vhost))
        .route(
            "/api/queues/{vhost}/{name}",
            get(queues::show)
                .put(queues::declare)
                .delete(queues::delete),
        )
        .route("/api/queues/{vhost}/{name}/contents", delete(queues::purge))
        .route("/api/queues/{vhost}/{name}/get", post(publish_get::get))
        .route(
            "/api/queues/{vhost}/{name}/bindings",
            get(bindings::of_queue_destination),
        )
        .route("/api/bindings", get(bindings::list_all))
        .route("/api/bindings/{vhost}", get(bindings::list_vhost))
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}",
            get(bindings::between).post(bindings::create),
        )
        .route(
            "/api/bindings/{vhost}/e/{source}/{kind}/{destination}/{props}",
            get(bindings::show).delete(bindings::delete),
        )
        .route(
            "/api/definitions",
            get(definitions::export).post(definitions::import_all),
        )
        .route(
            "/api/definitions/{vhost}",
            get(definitions::export_vhost).post(definitions::import_vhost),
        )
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
        .route("/api/policies", get(policies::list_all))
        .route("/api/policies/{vhost}", get(policies::list_vhost))
        .route(
            "/api/policies/{vhost}/{name}",
            get(policies::show)
                .put(policies::put)
                .delete(policies::delete),
        )
        .route("/metrics", get(metrics::aggregated))
        .route("/metrics/per-object", get(metrics::per_object))
        .route("/metrics/detailed", get(metrics::detailed))
        // The test double's endpoints (src/http/test_*.rs).
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
            axum::routing::put(test_faults::set_delay).delete(test_faults::clear_delay),
        )
        .fallback(|| async { ApiError::not_found() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(api)
}
