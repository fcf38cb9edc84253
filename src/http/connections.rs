//! `/api/connections`, `/api/channels` and `/api/consumers`: who is connected and consuming;
//! closing a connection as an operator.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde_json::{json, Value};

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::PathOf;
use super::fields::table_to_json;
use super::sampler::channel_counts;
use super::{Api, NODE};
use crate::broker::connections::ConnectionInfo;
use crate::broker::queue::consumer::Consumer;
use crate::broker::queue::Queue;
use crate::broker::rates::RateKey;

/// RabbitMQ's default reason when the request names none.
const DEFAULT_REASON: &str = "Closed via management plugin";

fn connection_json(c: &ConnectionInfo) -> Value {
    json!({
        "name": c.name,
        "node": NODE,
        "user": c.user,
        "vhost": c.vhost,
        "host": c.local.ip().to_string(),
        "port": c.local.port(),
        "peer_host": c.peer.ip().to_string(),
        "peer_port": c.peer.port(),
        "protocol": "AMQP 0-9-1",
        "type": "network",
        "state": "running",
        "ssl": false,
        "channels": c.channel_count(),
        "connected_at": c.connected_at_ms,
        "timeout": c.heartbeat_secs,
        "frame_max": c.frame_max,
        "channel_max": c.channel_max,
        "client_properties": table_to_json(&c.client_properties),
    })
}

/// Monitoring users and administrators see every connection; others their own.
fn visible<const N: u8>(user: &Authed<N>, c: &ConnectionInfo) -> bool {
    user.sees_everything() || c.user == user.user.name
}

/// `GET /api/connections`.
pub(crate) async fn list(user: Authed<MANAGEMENT>, State(api): State<Arc<Api>>) -> Json<Value> {
    let list: Vec<Value> = api
        .state
        .connections
        .list()
        .iter()
        .filter(|c| visible(&user, c))
        .map(|c| connection_json(c))
        .collect();
    Json(Value::Array(list))
}

/// `GET /api/connections/{name}`.
pub(crate) async fn show(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<Json<Value>> {
    let c = api
        .state
        .connections
        .find(&name)
        .filter(|c| visible(&user, c))
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(connection_json(&c)))
}

/// `DELETE /api/connections/{name}`: closes it with `CONNECTION_FORCED` and the reason from
/// the `X-Reason` header, as RabbitMQ does. Users other than administrators may close only
/// their own connections.
pub(crate) async fn close(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
    headers: HeaderMap,
) -> ApiResult<StatusCode> {
    let c = api
        .state
        .connections
        .find(&name)
        .filter(|c| visible(&user, c))
        .ok_or_else(ApiError::not_found)?;
    if !user.is_administrator() && c.user != user.user.name {
        return Err(ApiError::forbidden("Not administrator user"));
    }
    let reason = headers
        .get("x-reason")
        .and_then(|v| v.to_str().ok())
        .filter(|r| !r.is_empty())
        .unwrap_or(DEFAULT_REASON);
    tracing::info!(connection = %c.name, by = %user.user.name, reason, "closing connection on request");
    c.close(reason.to_string());
    Ok(StatusCode::NO_CONTENT)
}

/// A connection's channels as RabbitMQ lists them (asked of the connection's task, which owns
/// them; a connection that does not answer in time is left out).
async fn channels_of(api: &Api, c: &ConnectionInfo) -> Vec<Value> {
    let Some(channels) = c.channels().await else {
        return Vec::new();
    };
    channels
        .iter()
        .map(|ch| {
            json!({
                "name": format!("{} ({})", c.name, ch.number),
                "number": ch.number,
                "node": NODE,
                "user": c.user,
                "vhost": c.vhost,
                "connection_details": {
                    "name": c.name,
                    "peer_host": c.peer.ip().to_string(),
                    "peer_port": c.peer.port(),
                },
                "state": "running",
                "consumer_count": ch.consumers,
                "prefetch_count": ch.prefetch_count,
                "global_prefetch_count": ch.global_prefetch_count,
                "messages_unacknowledged": ch.unacked,
                "confirm": ch.confirm,
                "transactional": ch.transactional,
                "message_stats": api.state.rates.message_stats(
                    &RateKey::Channel(c.id, ch.number),
                    &channel_counts(ch),
                ),
            })
        })
        .collect()
}

/// `GET /api/channels`.
pub(crate) async fn channels(user: Authed<MANAGEMENT>, State(api): State<Arc<Api>>) -> Json<Value> {
    let mut out = Vec::new();
    for c in api.state.connections.list() {
        if visible(&user, &c) {
            out.extend(channels_of(&api, &c).await);
        }
    }
    Json(Value::Array(out))
}

/// `GET /api/connections/{name}/channels`.
pub(crate) async fn channels_of_connection(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<Json<Value>> {
    let c = api
        .state
        .connections
        .find(&name)
        .filter(|c| visible(&user, c))
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(Value::Array(channels_of(&api, &c).await)))
}

/// `GET /api/consumers`.
/// One consumer as RabbitMQ's `/api/consumers` and a queue's `consumer_details` show it.
pub(crate) fn consumer_json(queue: &Queue, consumer: &Consumer, conn: &ConnectionInfo) -> Value {
    let number = consumer.channel;
    json!({
        "consumer_tag": consumer.tag.as_str(),
        "queue": {"name": queue.name.as_str(), "vhost": queue.vhost.as_str()},
        "channel_details": {
            "name": format!("{} ({number})", conn.name),
            "number": number,
            "connection_name": conn.name,
            "peer_host": conn.peer.ip().to_string(),
            "peer_port": conn.peer.port(),
            "user": conn.user,
            "node": NODE,
        },
        "ack_required": !consumer.credit.no_ack,
        "exclusive": consumer.exclusive,
        "prefetch_count": consumer.credit.prefetch,
        "priority": consumer.priority,
        "active": true,
        "activity_status": "up",
        "arguments": {},
    })
}

pub(crate) async fn consumers(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
) -> Json<Value> {
    let connections = api.state.connections.list();
    let mut out = Vec::new();
    for vhost in api.vhosts().iter().filter(|v| user.sees(&v.name)) {
        let mut queues = vhost.queues();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        for queue in &queues {
            for consumer in queue.consumers() {
                let Some(conn) = connections.iter().find(|c| c.id == consumer.connection) else {
                    continue;
                };
                if !visible(&user, conn) {
                    continue;
                }
                out.push(consumer_json(queue, &consumer, conn));
            }
        }
    }
    Json(Value::Array(out))
}
