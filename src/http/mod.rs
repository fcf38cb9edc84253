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
mod host;
mod json_only;
mod listener;
mod metrics;
mod overview;
mod page;
mod policies;
mod publish_get;
mod queue_shape;
mod queues;
mod resource;
mod routes;
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
    /// The names this listener answers to (`Host`).
    pub(crate) hosts: host::AllowedHosts,
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
    let hosts = host::AllowedHosts::new(&state.config.http_allowed_hosts);
    let api = Arc::new(Api {
        state,
        amqp,
        http,
        hosts,
    });
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
    // Only `/metrics`, read-only and without login, for scrapers that may name this host
    // anything: no `Host` check here.
    let api = Arc::new(Api {
        state,
        amqp,
        http,
        hosts: host::AllowedHosts::default(),
    });
    let app = routes::metrics()
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

/// Every route (`routes.rs`). Every request
/// must name a host this listener answers to (`host.rs`); every state-changing one must be
/// JSON (`json_only.rs`). The test double's endpoints exist only when the configuration asks
/// for the test double (elsewhere they are 404, like any unknown path).
fn router(api: Arc<Api>) -> Router {
    let routes = routes::api();
    let routes = if api.state.config.serves_test_api() {
        routes.merge(routes::test())
    } else {
        routes
    };
    routes
        .route_layer(axum::middleware::from_fn(json_only::require_json))
        .fallback(|| async { ApiError::not_found() })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&api),
            host::check_host,
        ))
        .with_state(api)
}
