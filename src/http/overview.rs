//! The broker as a whole: overview, whoami, vhosts, users, permissions, health.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::auth::{self, Authed, ADMINISTRATOR, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::PathOf;
use super::sampler::{depth, overview_counts, vhost_counts, vhost_octets};
use super::{Api, NODE};
use crate::broker::persist::AwaitedWrites;
use crate::broker::rates::RateKey;
use crate::broker::vhost::VHost;

/// The management API version dwellmq follows (what `rabbitmq_version` reports, so that tools
/// which check it pick the matching dialect).
pub(crate) const RABBITMQ_API_VERSION: &str = "3.13.7";

/// (ready, unacked) over a vhost's queues.
fn vhost_totals(vhost: &VHost) -> (usize, usize) {
    vhost.queues().iter().fold((0, 0), |(r, u), q| {
        (r + q.message_count(vhost), u + q.unacked_count())
    })
}

/// `GET /api/overview`.
pub(crate) async fn overview(user: Authed<MANAGEMENT>, State(api): State<Arc<Api>>) -> Json<Value> {
    let (mut ready, mut unacked, mut queues, mut exchanges, mut consumers) = (0, 0, 0, 0, 0);
    for vhost in api.vhosts().iter().filter(|v| user.sees(&v.name)) {
        let (r, u) = vhost_totals(vhost);
        ready += r;
        unacked += u;
        let vhost_queues = vhost.queues();
        queues += vhost_queues.len();
        consumers += vhost_queues
            .iter()
            .map(|q| q.consumer_count())
            .sum::<usize>();
        exchanges += vhost.exchanges().len();
    }
    let listeners: Vec<Value> = api
        .amqp
        .iter()
        .map(|a| json!({"node": NODE, "protocol": "amqp", "ip_address": a.ip().to_string(), "port": a.port()}))
        .collect();
    let exchange_types: Vec<Value> = ["direct", "fanout", "topic", "headers", "x-delayed-message"]
        .iter()
        .map(|t| json!({"name": t, "description": "", "enabled": true}))
        .collect();
    Json(json!({
        "management_version": RABBITMQ_API_VERSION,
        "rabbitmq_version": RABBITMQ_API_VERSION,
        "product_name": "dwellmq",
        "product_version": env!("CARGO_PKG_VERSION"),
        "cluster_name": NODE,
        "node": NODE,
        "rates_mode": "basic",
        "exchange_types": exchange_types,
        "object_totals": {
            "connections": api.state.open_connections.load(Ordering::Relaxed),
            "exchanges": exchanges,
            "queues": queues,
            "consumers": consumers,
        },
        "queue_totals": {
            "messages": ready + unacked,
            "messages_ready": ready,
            "messages_unacknowledged": unacked,
        },
        // Sampled every 5 s (`rates_mode` basic, RabbitMQ's default).
        "message_stats": api.state.rates.message_stats(&RateKey::Overview, &overview_counts(&api)),
        "delayed_totals": {
            "messages_delayed": api.state.delayed.len(),
        },
        "listeners": listeners,
        "contexts": [{"node": NODE, "description": "RabbitMQ Management", "path": "/",
                      "ip": api.http.ip().to_string(), "port": api.http.port().to_string()}],
    }))
}

/// `GET /api/whoami`.
pub(crate) async fn whoami(user: Authed<MANAGEMENT>) -> Json<Value> {
    Json(json!({"name": user.user.name, "tags": auth::tags(&user.user)}))
}

fn vhost_json(api: &Api, vhost: &VHost) -> Value {
    let (ready, unacked) = vhost_totals(vhost);
    let rates = &api.state.rates;
    let name = vhost.name.to_string();
    let counts = vhost_counts(vhost);
    let octets = vhost_octets(api, &vhost.name);
    let all_rates = rates.rates_of(&RateKey::VHost(name.clone()), counts.len() + octets.len());
    let levels = depth(ready, unacked);
    let depth_rates = rates.rates_of(&RateKey::VHostDepth(name), levels.len());
    let mut out = Map::new();
    out.insert("name".into(), vhost.name.as_str().into());
    out.insert("description".into(), "".into());
    out.insert("tags".into(), json!([]));
    out.insert("default_queue_type".into(), "classic".into());
    out.insert(
        "metadata".into(),
        json!({"description": "", "tags": [], "default_queue_type": "classic"}),
    );
    out.insert("tracing".into(), false.into());
    out.insert("cluster_state".into(), json!({ NODE: "running" }));
    out.insert(
        "message_stats".into(),
        rates.message_stats(&RateKey::VHost(vhost.name.to_string()), &counts),
    );
    for ((key, n), rate) in levels.iter().zip(&depth_rates) {
        out.insert((*key).into(), (*n).into());
        out.insert(format!("{key}_details"), json!({ "rate": rate }));
    }
    for ((key, n), rate) in octets.iter().zip(&all_rates[counts.len()..]) {
        out.insert((*key).into(), (*n).into());
        out.insert(format!("{key}_details"), json!({ "rate": rate }));
    }
    Value::Object(out)
}

/// `GET /api/vhosts`: the vhosts the user may see.
pub(crate) async fn vhosts(user: Authed<MANAGEMENT>, State(api): State<Arc<Api>>) -> Json<Value> {
    let list: Vec<Value> = api
        .vhosts()
        .iter()
        .filter(|v| user.sees(&v.name))
        .map(|v| vhost_json(&api, v))
        .collect();
    Json(Value::Array(list))
}

/// `GET /api/vhosts/{vhost}`.
pub(crate) async fn vhost(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<Json<Value>> {
    let vhost = api.vhost(&name)?;
    if !user.sees(&name) {
        return Err(ApiError::not_found());
    }
    Ok(Json(vhost_json(&api, &vhost)))
}

/// `PUT /api/vhosts/{vhost}`: creates it (201), or leaves an existing one (204), as RabbitMQ.
pub(crate) async fn put_vhost(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<StatusCode> {
    if name.is_empty() || name.len() > 255 {
        return Err(ApiError::bad_request("a vhost name is 1 to 255 octets"));
    }
    let written = AwaitedWrites::new();
    let created = api.state.add_vhost(&name, written.writes());
    // Answered once the vhost is on disk, as RabbitMQ answers after its metadata store.
    written.committed().await.map_err(ApiError::not_stored)?;
    Ok(if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    })
}

/// `GET /api/health/checks/definitions` (dwellmq's): 200 when every stored definition came
/// back at start (or a kept queue or exchange was declared again since, taking its messages
/// back), else
/// 503 naming those kept on disk without being restored (a vhost no longer configured,
/// arguments this build refuses), in the shape of RabbitMQ's checks.
pub(crate) async fn unrestored_definitions(
    _user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
) -> Response {
    let mut kept = api.state.unrestored.lock().clone();
    // A queue a declare took back since is restored now.
    let runtime = &api.state.runtime;
    kept.retain(|d| {
        !runtime.kept_queues.was_reattached(d) && !runtime.kept_exchanges.was_reattached(d)
    });
    if kept.is_empty() {
        return Json(json!({"status": "ok"})).into_response();
    }
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({
            "status": "failed",
            "reason": "stored definitions were not restored; they are kept on disk untouched",
            "definitions": kept,
        })),
    )
        .into_response()
}

/// `GET /api/health/checks/alarms`: 200 while no alarm is in effect, else 503 with the alarms,
/// as RabbitMQ answers.
pub(crate) async fn alarms(_user: Authed<MANAGEMENT>, State(api): State<Arc<Api>>) -> Response {
    let memory_alarm = *api.state.memory.subscribe().borrow();
    let disk_alarm = api.state.disk.is_on();
    let alarms: Vec<_> = [(memory_alarm, "memory"), (disk_alarm, "disk")]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, resource)| json!({"node": NODE, "resource": resource}))
        .collect();
    if !alarms.is_empty() {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "failed",
                "reason": "resource alarm(s) in effect in the cluster",
                "alarms": alarms,
            })),
        )
            .into_response()
    } else {
        Json(json!({"status": "ok"})).into_response()
    }
}
