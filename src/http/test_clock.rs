//! The test double's clock over HTTP, for tests in any language.
//!
//! - `GET /test/clock`: `{"manual", "now_ms", "now", "next_due_ms"}`.
//! - `POST /test/clock/advance` with `{"ms": N}` or `{"to": "<RFC 3339>" | ms}`: moves a manual
//!   clock forward and answers only once everything due up to the new time has been routed
//!   and written to the consumers' sockets, as `BrokerHandle::advance` followed by `settle`.
//!   `{"now_ms", "now", "released"}`.
//!
//! Moving the clock needs a broker started with a manual clock (`--manual-clock`); otherwise
//! the answer is 409 `no_manual_clock`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, ADMINISTRATOR, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::JsonBody;
use super::Api;
use crate::handle::{release_due, settle};
use crate::rfc3339;

/// How long an advance waits for the deliveries it caused to reach the sockets.
const SETTLE_LIMIT: Duration = Duration::from_secs(10);

/// `GET /test/clock`.
pub(crate) async fn show(_user: Authed<MANAGEMENT>, State(api): State<Arc<Api>>) -> Json<Value> {
    let now = api.state.clock.now_ms();
    Json(json!({
        "manual": api.state.manual_clock.is_some(),
        "now_ms": now,
        "now": rfc3339::format(now),
        "next_due_ms": api.state.next_wake(),
    }))
}

/// The body of an advance: exactly one of `ms` and `to`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Advance {
    ms: Option<u64>,
    to: Option<Value>,
}

/// `POST /test/clock/advance`.
pub(crate) async fn advance(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    JsonBody(body): JsonBody<Advance>,
) -> ApiResult<Json<Value>> {
    let Some(clock) = api.state.manual_clock.clone() else {
        return Err(ApiError::status(
            StatusCode::CONFLICT,
            "no_manual_clock",
            "the broker runs on the system clock; start it with --manual-clock to move time",
        ));
    };
    let now = clock_now(&api);
    let target = match (body.ms, body.to) {
        (Some(ms), None) => now.saturating_add(ms),
        (None, Some(Value::Number(n))) => n.as_u64().ok_or_else(|| {
            ApiError::bad_request("'to' must be milliseconds since 1970 or RFC 3339")
        })?,
        (None, Some(Value::String(text))) => {
            rfc3339::parse(&text).map_err(ApiError::bad_request)?
        }
        _ => {
            return Err(ApiError::bad_request(
                "give either {\"ms\": N} or {\"to\": \"<RFC 3339 time>\"}",
            ))
        }
    };
    if target < now {
        return Err(ApiError::bad_request(format!(
            "the clock never goes back: it is at {} ({now}), 'to' is {} ({target})",
            rfc3339::format(now),
            rfc3339::format(target),
        )));
    }
    // Releasing can route many thousands of messages: off the runtime's worker threads, so
    // that the connection tasks writing those deliveries keep running meanwhile.
    let state = Arc::clone(&api.state);
    let released = tokio::task::spawn_blocking(move || release_due(&state, &clock, target))
        .await
        .map_err(|e| {
            ApiError::status(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })?;
    settle(&api.state, SETTLE_LIMIT)
        .await
        .map_err(|e| ApiError::status(StatusCode::GATEWAY_TIMEOUT, "not_settled", e.to_string()))?;
    let now = clock_now(&api);
    Ok(Json(json!({
        "now_ms": now,
        "now": rfc3339::format(now),
        "released": released,
    })))
}

fn clock_now(api: &Api) -> u64 {
    api.state.clock.now_ms()
}
