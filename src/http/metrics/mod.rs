//! Prometheus metrics as `rabbitmq_prometheus` serves them, with dwellmq's own families:
//!
//! - `GET /metrics`: aggregated (RabbitMQ's default): one sample per metric, summed over
//!   queues, exchanges, channels and connections;
//! - `GET /metrics/per-object`: the same metrics per object, labelled as RabbitMQ labels them;
//! - `GET /metrics/detailed?family=...&vhost=...`: only the named groups
//!   (`queue_coarse_metrics`, `channel_metrics`, ...; the parameters repeat), only the named
//!   vhosts' objects, under `rabbitmq_detailed_`.
//!
//! Written by hand rather than through a metrics crate: every value is read from broker
//! state or from a counter the broker already keeps, at scrape time. Like
//! `rabbitmq_prometheus`, the endpoints need no credentials (scrapers rarely have any); bind
//! the HTTP listener accordingly.

mod core;
mod dwellmq;
mod global;
mod node;
mod snapshot;
mod text;

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;

use self::core::Scope;
use super::extract::QueryOf;
use super::overview::RABBITMQ_API_VERSION;
use super::{Api, NODE};
use snapshot::Snapshot;
use text::{Exposition, Kind};

/// What an endpoint shows.
enum Endpoint {
    Aggregated,
    PerObject,
    Detailed {
        families: HashSet<String>,
        /// `None`: every vhost.
        vhosts: Option<HashSet<String>>,
    },
}

/// The exposition text.
async fn render(api: &Api, endpoint: Endpoint) -> String {
    let snapshot = Snapshot::read(api).await;
    let mut out = Exposition::default();
    match &endpoint {
        Endpoint::Aggregated | Endpoint::PerObject => {
            let per_object = matches!(endpoint, Endpoint::PerObject);
            let scope = Scope {
                prefix: "rabbitmq_",
                per_object,
                vhosts: None,
            };
            for (_, group) in core::selected(None) {
                group(&snapshot, &scope, &mut out);
            }
            core::totals(&snapshot, &mut out);
            if per_object {
                core::queue_info(&snapshot, &scope, &mut out);
            }
            identity(
                &mut out,
                if per_object {
                    "per-object"
                } else {
                    "aggregated"
                },
            );
            global::write(&snapshot, &mut out);
            dwellmq::write(api, &snapshot, &mut out);
        }
        Endpoint::Detailed { families, vhosts } => {
            let scope = Scope {
                prefix: "rabbitmq_detailed_",
                per_object: true,
                vhosts: vhosts.as_ref(),
            };
            for (_, group) in core::selected(Some(families)) {
                group(&snapshot, &scope, &mut out);
            }
            core::cluster(&snapshot, families, vhosts.as_ref(), &mut out);
            let queue_groups = [
                "queue_coarse_metrics",
                "queue_consumer_count",
                "queue_metrics",
            ];
            if queue_groups.iter().any(|g| families.contains(*g)) {
                core::queue_info(&snapshot, &scope, &mut out);
            }
            identity(&mut out, "detailed");
        }
    }
    out.finish()
}

/// `rabbitmq_build_info` and `rabbitmq_identity_info`, which dashboards join every panel on.
fn identity(out: &mut Exposition, endpoint: &str) {
    out.family(
        "rabbitmq_build_info",
        Kind::Untyped,
        "RabbitMQ & Erlang/OTP version info",
    )
    .sample(
        &[
            ("rabbitmq_version", RABBITMQ_API_VERSION),
            ("product_name", "dwellmq"),
            ("product_version", env!("CARGO_PKG_VERSION")),
        ],
        1,
    );
    out.family(
        "rabbitmq_identity_info",
        Kind::Untyped,
        "RabbitMQ node & cluster identity info",
    )
    .sample(
        &[
            ("rabbitmq_node", NODE),
            ("rabbitmq_cluster", NODE),
            ("rabbitmq_endpoint", endpoint),
        ],
        1,
    );
}

fn reply(text: String) -> impl IntoResponse {
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
}

/// `GET /metrics`.
pub(crate) async fn aggregated(State(api): State<Arc<Api>>) -> impl IntoResponse {
    reply(render(&api, Endpoint::Aggregated).await)
}

/// `GET /metrics/per-object`.
pub(crate) async fn per_object(State(api): State<Arc<Api>>) -> impl IntoResponse {
    reply(render(&api, Endpoint::PerObject).await)
}

/// `GET /metrics/detailed?family=...&vhost=...`. As RabbitMQ: without a `family`, only the
/// identity families; unknown families and vhosts are ignored; without a `vhost`, all.
pub(crate) async fn detailed(
    State(api): State<Arc<Api>>,
    QueryOf(query): QueryOf<Vec<(String, String)>>,
) -> impl IntoResponse {
    let values = |key: &str| -> Vec<String> {
        query
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    };
    let families = values("family").into_iter().collect();
    let asked = values("vhost");
    let vhosts = (!asked.is_empty()).then(|| {
        asked
            .into_iter()
            .filter(|v| api.state.vhost(v).is_some())
            .collect()
    });
    reply(render(&api, Endpoint::Detailed { families, vhosts }).await)
}
