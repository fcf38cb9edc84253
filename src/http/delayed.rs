//! dwellmq's own endpoints for messages held by delayed exchanges: list (paged, filterable by
//! due time), cancel one, purge all.
//!
//! - `GET /api/delayed`: every delayed exchange with its count, bytes and next due time.
//! - `GET /api/delayed/{vhost}/{exchange}?limit=&after=&due_from=&due_until=`: held messages
//!   in due order; `next_page` is the `after` of the following page (`null` at the end).
//! - `GET /api/delayed/{vhost}/{exchange}/histogram?from=&bucket_ms=&buckets=`: how many fall
//!   due in each interval (a timeline, without listing a million messages).
//! - `DELETE /api/delayed/{vhost}/{exchange}/messages/{id}`: cancels one (204, 404 if gone).
//! - `POST /api/delayed/{vhost}/{exchange}/messages/{id}/move` with `{"now": true}`,
//!   `{"delay_ms": N}` (from now) or `{"due": "<RFC 3339>" | ms since 1970}`: moves one to
//!   another due time, headers and body kept; `{"id", "due_ms", "due"}` with its new id (an id
//!   names its due time). 404 if it is not held, 400 for a due time in the past or more than
//!   ten years away.
//! - `DELETE /api/delayed/{vhost}/{exchange}/contents`: drops all; `{"purged": n}`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathOf, QueryOf};
use super::fields::table_to_json;
use super::resource::checked_vhost;
use super::Api;
use crate::broker::delayed::{DelayedId, DelayedMove, ListPage, MoveDelayedError};
use crate::broker::exchange::{Exchange, ExchangeKind};
use crate::broker::vhost::VHost;
use crate::rfc3339;

/// Messages per page when the request does not say, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// An exchange's count, bytes and next due time (`next_due` when the caller already knows it).
fn summary(api: &Api, vhost: &VHost, exchange: &Exchange, next_due: Option<Option<u64>>) -> Value {
    let (count, bytes) = api.state.delayed.stats(&vhost.name, &exchange.name);
    let next_due =
        next_due.unwrap_or_else(|| api.state.delayed.next_due(&vhost.name, &exchange.name));
    json!({
        "vhost": vhost.name.as_str(),
        "exchange": exchange.name.as_str(),
        "messages_delayed": count,
        "bytes": bytes,
        "next_due_ms": next_due,
    })
}

/// `GET /api/delayed`.
pub(crate) async fn list_exchanges(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
) -> Json<Value> {
    let mut out = Vec::new();
    let next_due = api.state.delayed.next_due_all();
    for vhost in api.vhosts().iter().filter(|v| user.sees(&v.name)) {
        let mut exchanges = vhost.exchanges();
        exchanges.sort_by(|a, b| a.name.cmp(&b.name));
        for x in exchanges.iter().filter(|x| is_delayed(x)) {
            let next = next_due.get(&(vhost.name.clone(), x.name.clone())).copied();
            out.push(summary(&api, vhost, x, Some(next)));
        }
    }
    Json(Value::Array(out))
}

fn is_delayed(x: &Exchange) -> bool {
    matches!(x.kind, ExchangeKind::Delayed(_))
}

/// The vhost and delayed exchange a path names; 404 unless both exist and it is delayed.
fn delayed_exchange(
    api: &Api,
    user: &Authed<MANAGEMENT>,
    vhost: &str,
    exchange: &str,
) -> ApiResult<(Arc<VHost>, Arc<Exchange>)> {
    let vhost = checked_vhost(api, user, vhost)?;
    let exchange = vhost
        .exchange(exchange)
        .ok()
        .filter(|x| is_delayed(x))
        .ok_or_else(ApiError::not_found)?;
    Ok((vhost, exchange))
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    limit: Option<usize>,
    after: Option<String>,
    due_from: Option<u64>,
    due_until: Option<u64>,
}

fn parse_id(text: &str) -> ApiResult<DelayedId> {
    text.parse()
        .map_err(|e: crate::broker::delayed::ParseDelayedIdError| {
            ApiError::bad_request(e.to_string())
        })
}

/// `GET /api/delayed/{vhost}/{exchange}`.
pub(crate) async fn list_messages(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, exchange)): PathOf<(String, String)>,
    QueryOf(query): QueryOf<ListQuery>,
) -> ApiResult<Json<Value>> {
    let (vhost, exchange) = delayed_exchange(&api, &user, &vhost, &exchange)?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let page = ListPage {
        after: query.after.as_deref().map(parse_id).transpose()?,
        due_from_ms: query.due_from.unwrap_or(0),
        due_until_ms: query.due_until.unwrap_or(u64::MAX),
        // One more than asked: whether it exists says if there is a next page.
        limit: limit + 1,
    };
    let mut items = api
        .state
        .delayed
        .list_page(&vhost.name, &exchange.name, &page)
        .map_err(|e| {
            tracing::warn!(error = %e, "listing held messages: the store cannot be read");
            ApiError::unavailable(format!(
                "the messages held on disk cannot be read now: {e}; retry later"
            ))
        })?;
    let next_page = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|m| m.id.to_string())
    } else {
        None
    };
    let now = api.state.clock.now_ms();
    let items: Vec<Value> = items
        .iter()
        .map(|m| {
            json!({
                "id": m.id.to_string(),
                "due_ms": m.due_ms,
                "due_in_ms": (m.due_ms as i64).saturating_sub(now as i64),
                "routing_key": m.routing_key,
                "headers": m.headers.as_ref().map(table_to_json),
                "payload_bytes": m.body_size,
            })
        })
        .collect();
    let mut out = summary(&api, &vhost, &exchange, None);
    out["items"] = Value::Array(items);
    out["next_page"] = next_page.into();
    Ok(Json(out))
}

#[derive(Deserialize)]
pub(crate) struct HistogramQuery {
    from: Option<u64>,
    bucket_ms: Option<u64>,
    buckets: Option<usize>,
}

/// Buckets per histogram at most.
const MAX_BUCKETS: usize = 10_000;

/// `GET /api/delayed/{vhost}/{exchange}/histogram`: defaults to a minute per bucket for the
/// hour from now.
pub(crate) async fn histogram(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, exchange)): PathOf<(String, String)>,
    QueryOf(query): QueryOf<HistogramQuery>,
) -> ApiResult<Json<Value>> {
    let (vhost, exchange) = delayed_exchange(&api, &user, &vhost, &exchange)?;
    let from_ms = query.from.unwrap_or_else(|| api.state.clock.now_ms());
    let bucket_ms = query.bucket_ms.unwrap_or(60_000);
    let buckets = query.buckets.unwrap_or(60);
    if bucket_ms == 0 || buckets == 0 || buckets > MAX_BUCKETS {
        return Err(ApiError::bad_request(format!(
            "bucket_ms must be positive and buckets from 1 to {MAX_BUCKETS}"
        )));
    }
    let counts =
        api.state
            .delayed
            .due_histogram(&vhost.name, &exchange.name, from_ms, bucket_ms, buckets);
    let mut out = summary(&api, &vhost, &exchange, None);
    out["from_ms"] = from_ms.into();
    out["bucket_ms"] = bucket_ms.into();
    out["counts"] = counts.into();
    Ok(Json(out))
}

/// `DELETE /api/delayed/{vhost}/{exchange}/messages/{id}`.
pub(crate) async fn cancel(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, exchange, id)): PathOf<(String, String, String)>,
) -> ApiResult<StatusCode> {
    let (vhost, exchange) = delayed_exchange(&api, &user, &vhost, &exchange)?;
    let id = parse_id(&id)?;
    if api
        .state
        .delayed
        .cancel_held_by(&vhost.name, &exchange.name, id)
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found())
    }
}

/// `DELETE /api/delayed/{vhost}/{exchange}/contents`.
pub(crate) async fn purge(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, exchange)): PathOf<(String, String)>,
) -> ApiResult<Json<Value>> {
    let (vhost, exchange) = delayed_exchange(&api, &user, &vhost, &exchange)?;
    let purged = api
        .state
        .delayed
        .purge_exchange(&vhost.name, &exchange.name);
    Ok(Json(json!({ "purged": purged })))
}

/// The body of a move: exactly one of `now`, `delay_ms` and `due`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MoveBody {
    now: Option<bool>,
    delay_ms: Option<u64>,
    due: Option<Value>,
}

impl MoveBody {
    fn destination(self) -> ApiResult<DelayedMove> {
        match (self.now, self.delay_ms, self.due) {
            (Some(true), None, None) => Ok(DelayedMove::Now),
            (None, Some(ms), None) => Ok(DelayedMove::After(ms)),
            (None, None, Some(Value::Number(n))) => {
                n.as_u64().map(DelayedMove::At).ok_or_else(|| {
                    ApiError::bad_request("'due' must be milliseconds since 1970 or RFC 3339")
                })
            }
            (None, None, Some(Value::String(text))) => rfc3339::parse(&text)
                .map(DelayedMove::At)
                .map_err(ApiError::bad_request),
            _ => Err(ApiError::bad_request(
                "give one of {\"now\": true}, {\"delay_ms\": N} or {\"due\": \"<RFC 3339 time>\"}",
            )),
        }
    }
}

/// `POST /api/delayed/{vhost}/{exchange}/messages/{id}/move`.
pub(crate) async fn move_message(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, exchange, id)): PathOf<(String, String, String)>,
    JsonBody(body): JsonBody<MoveBody>,
) -> ApiResult<Json<Value>> {
    let (vhost, exchange) = delayed_exchange(&api, &user, &vhost, &exchange)?;
    let id = parse_id(&id)?;
    let to = body.destination()?;
    // Under a manual clock a move to now releases the message before it answers: routing,
    // off the runtime's worker threads.
    let state = Arc::clone(&api.state);
    let moved = tokio::task::spawn_blocking(move || {
        let of = Some((vhost.name.as_str(), exchange.name.as_str()));
        crate::handle::move_held(&state, of, id, to)
    })
    .await
    .map_err(|e| ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    match moved {
        Ok(id) => Ok(Json(json!({
            "id": id.to_string(),
            "due_ms": id.due_ms,
            "due": rfc3339::format(id.due_ms),
        }))),
        Err(e @ MoveDelayedError::NotFound(_)) => Err(ApiError::status(
            StatusCode::NOT_FOUND,
            "not_found",
            e.to_string(),
        )),
        Err(e @ (MoveDelayedError::InThePast { .. } | MoveDelayedError::TooFar { .. })) => {
            Err(ApiError::bad_request(e.to_string()))
        }
        Err(e @ MoveDelayedError::Unreadable(_)) => Err(ApiError::unavailable(e.to_string())),
    }
}
