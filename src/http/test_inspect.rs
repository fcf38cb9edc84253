//! The test double's inspection over HTTP (besides the management API):
//!
//! - `GET /test/queues/{vhost}/{name}?peek=N`: ready, unacked and consumer counts; held
//!   messages split by why they wait (`ttl`: ready with an expiry pending; `retrying`: a quorum
//!   queue's delayed retries; `delayed`: held back by a delivery-delay fault), their next due
//!   times, and a peek at the first N (default 10, at most 1000) ready messages with their
//!   properties and headers (`x-death` included), left in place.
//! - `GET /test/exchanges/{vhost}/{name}/held?limit=N`: the messages a delayed exchange holds,
//!   in due order, with due times and headers.
//! - `GET /test/counters`: published, routed, unroutable, returned, confirmed, nacked,
//!   redelivered, dead-lettered and dropped by reason, expired.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use base64::Engine;
use dwellmq_core::QueueEntry;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::{PathOf, QueryOf};
use super::fields::{properties_to_json, table_to_json};
use super::resource::checked_vhost;
use super::Api;
use crate::broker::exchange::ExchangeKind;
use crate::handle::counters;
use crate::rfc3339;

const DEFAULT_PEEK: usize = 10;
const MAX_PEEK: usize = 1000;

#[derive(Deserialize)]
pub(crate) struct PeekQuery {
    peek: Option<usize>,
}

/// `GET /test/queues/{vhost}/{name}`.
pub(crate) async fn queue(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    QueryOf(query): QueryOf<PeekQuery>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let queue = vhost.queue(&name).map_err(|_| ApiError::not_found())?;
    let peek = query.peek.unwrap_or(DEFAULT_PEEK).min(MAX_PEEK);
    let retrying = queue.retrying();
    let (ttl_count, next_expiry) = queue.expiring(1);
    let fault = api.state.hooks().delivery_delay(&vhost.name, &queue.name);
    let fault_held = fault
        .as_ref()
        .map_or(0, |d| d.pending.load(Ordering::Relaxed));
    let now = api.state.clock.now_ms();
    let messages: Vec<Value> = queue
        .peek(peek)
        .iter()
        .map(|e| entry_json(e, now))
        .collect();
    Ok(Json(json!({
        "vhost": vhost.name.as_str(),
        "name": queue.name.as_str(),
        "ready": queue.message_count(&*vhost),
        "unacked": queue.unacked_count(),
        "consumers": queue.consumer_count(),
        "held": {
            "ttl": ttl_count,
            "retrying": retrying.len(),
            "delayed": fault_held,
        },
        "next_due_ms": {
            "ttl": next_expiry.first(),
            "retrying": retrying.first().map(|(at, _)| *at),
        },
        "delivery_delay_ms": fault.map(|d| d.delay_ms),
        "retrying_messages": retrying.iter().take(peek).map(|(at, e)| {
            let mut m = entry_json(e, now);
            m["ready_at_ms"] = (*at).into();
            m
        }).collect::<Vec<_>>(),
        "messages": messages,
    })))
}

/// One message as the test endpoints show it.
fn entry_json(entry: &QueueEntry, now: u64) -> Value {
    let m = &entry.message;
    let mut payload = Vec::with_capacity(m.body_len());
    for chunk in m.body.chunks() {
        payload.extend_from_slice(chunk);
    }
    let (payload, encoding) = match String::from_utf8(payload) {
        Ok(text) => (text, "string"),
        Err(e) => (
            base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
            "base64",
        ),
    };
    let mut out = Map::new();
    out.insert("exchange".into(), m.exchange.as_str().into());
    out.insert("routing_key".into(), m.routing_key.as_str().into());
    out.insert("redelivered".into(), entry.redelivered.into());
    out.insert("delivery_count".into(), entry.delivery_count.into());
    out.insert("properties".into(), properties_to_json(&m.properties));
    out.insert("expires_at_ms".into(), entry.expires_at.into());
    out.insert(
        "expires_in_ms".into(),
        entry
            .expires_at
            .map(|at| (at as i64).saturating_sub(now as i64))
            .into(),
    );
    out.insert("payload".into(), payload.into());
    out.insert("payload_encoding".into(), encoding.into());
    Value::Object(out)
}

#[derive(Deserialize)]
pub(crate) struct HeldQuery {
    limit: Option<usize>,
}

/// `GET /test/exchanges/{vhost}/{name}/held`.
pub(crate) async fn held(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    QueryOf(query): QueryOf<HeldQuery>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let exchange = vhost
        .exchange(&name)
        .ok()
        .filter(|x| matches!(x.kind, ExchangeKind::Delayed(_)))
        .ok_or_else(ApiError::not_found)?;
    let limit = query.limit.unwrap_or(100).min(MAX_PEEK);
    let (count, bytes) = api.state.delayed.stats(&vhost.name, &exchange.name);
    let now = api.state.clock.now_ms();
    let items: Vec<Value> = api
        .state
        .delayed
        .list(&vhost.name, &exchange.name, limit)
        .into_iter()
        .map(|m| {
            json!({
                "id": m.id.to_string(),
                "due_ms": m.due_ms,
                "due": rfc3339::format(m.due_ms),
                "due_in_ms": (m.due_ms as i64).saturating_sub(now as i64),
                "routing_key": m.routing_key,
                "headers": m.headers.as_ref().map(table_to_json),
                "payload_bytes": m.body_size,
            })
        })
        .collect();
    Ok(Json(json!({
        "vhost": vhost.name.as_str(),
        "exchange": exchange.name.as_str(),
        "count": count,
        "bytes": bytes,
        "next_due_ms": items.first().map(|m| m["due_ms"].clone()),
        "messages": items,
    })))
}

/// `GET /test/counters`.
pub(crate) async fn show_counters(
    _user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
) -> Json<Value> {
    let c = counters(&api.state);
    let by_reason = |list: &[(dwellmq_core::queue::DeathReason, u64)]| {
        let map: Map<String, Value> = list
            .iter()
            .map(|(reason, n)| (reason.name().to_string(), (*n).into()))
            .collect();
        Value::Object(map)
    };
    Json(json!({
        "published": c.published,
        "routed": c.routed,
        "unroutable": c.unroutable,
        "returned": c.returned,
        "confirmed": c.confirmed,
        "nacked": c.nacked,
        "redelivered": c.redelivered,
        "dead_lettered": by_reason(&c.dead_lettered),
        "dropped": by_reason(&c.dropped),
        "expired": c.expired,
    }))
}
