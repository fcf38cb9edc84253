//! Fault injection over HTTP (the same faults as on `BrokerHandle`):
//!
//! - `POST /test/faults/close-connection` `{"connection": NAME?, "code": 320, "text": "..."}`:
//!   the broker sends `connection.close` with that code. NAME is the management API's name or
//!   the client's `connection_name`; without it every connection is closed.
//! - `POST /test/faults/close-channel` `{"connection": NAME?, "channel": 1, "code": 406,
//!   "text": "..."}`: `channel.close` on that channel.
//! - `POST /test/faults/nack-confirms` `{"count": N}`: the next N publisher confirms are
//!   `basic.nack`s (0 cancels).
//! - `PUT /test/faults/delay/{vhost}/{queue}` `{"ms": D}`: messages routed to the queue enter
//!   it D ms of broker time later; `DELETE` the same path removes the fault.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, ADMINISTRATOR};
use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathOf};
use super::Api;
use crate::handle::{delay_deliveries, force_close, FaultError};

fn fault_error(error: FaultError) -> ApiError {
    match error {
        FaultError::NoConnection(_) | FaultError::NoQueue { .. } => {
            ApiError::status(StatusCode::NOT_FOUND, "not_found", error.to_string())
        }
        other => ApiError::bad_request(other.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloseBody {
    connection: Option<String>,
    channel: Option<u16>,
    code: Option<u16>,
    text: Option<String>,
}

async fn close(api: &Api, body: CloseBody, channel: Option<u16>) -> ApiResult<Json<Value>> {
    let code = body
        .code
        .unwrap_or(if channel.is_some() { 406 } else { 320 });
    let text = body.text.unwrap_or_else(|| "closed by a test".into());
    let closed = force_close(&api.state, body.connection.as_deref(), channel, code, &text)
        .map_err(fault_error)?;
    Ok(Json(json!({ "closed": closed })))
}

/// `POST /test/faults/close-connection`.
pub(crate) async fn close_connection(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    JsonBody(body): JsonBody<CloseBody>,
) -> ApiResult<Json<Value>> {
    if body.channel.is_some() {
        return Err(ApiError::bad_request(
            "close-connection takes no \"channel\" (see close-channel)",
        ));
    }
    close(&api, body, None).await
}

/// `POST /test/faults/close-channel`.
pub(crate) async fn close_channel(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    JsonBody(body): JsonBody<CloseBody>,
) -> ApiResult<Json<Value>> {
    let Some(channel) = body.channel.filter(|&c| c > 0) else {
        return Err(ApiError::bad_request(
            "close-channel needs \"channel\" (1 or more)",
        ));
    };
    close(&api, body, Some(channel)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NackBody {
    count: u64,
}

/// `POST /test/faults/nack-confirms`.
pub(crate) async fn nack_confirms(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    JsonBody(body): JsonBody<NackBody>,
) -> Json<Value> {
    api.state.hooks().nack_next_confirms(body.count);
    Json(json!({ "pending": api.state.hooks().nacks_pending() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DelayBody {
    ms: u64,
}

/// `PUT /test/faults/delay/{vhost}/{queue}`.
pub(crate) async fn set_delay(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, queue)): PathOf<(String, String)>,
    JsonBody(body): JsonBody<DelayBody>,
) -> ApiResult<Json<Value>> {
    delay_deliveries(&api.state, &vhost, &queue, body.ms).map_err(fault_error)?;
    Ok(Json(
        json!({ "vhost": vhost, "queue": queue, "delay_ms": body.ms }),
    ))
}

/// `DELETE /test/faults/delay/{vhost}/{queue}`.
pub(crate) async fn clear_delay(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, queue)): PathOf<(String, String)>,
) -> ApiResult<StatusCode> {
    delay_deliveries(&api.state, &vhost, &queue, 0).map_err(fault_error)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FailWritesBody {
    count: u64,
}

/// `POST /test/faults/fail-writes` `{"count": N}`: the next N message writes to the store fail
/// (their publishers get `basic.nack`); 0 clears it.
pub(crate) async fn fail_writes(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    JsonBody(body): JsonBody<FailWritesBody>,
) -> Json<Value> {
    api.state.fail_next_writes(body.count);
    Json(json!({ "pending": api.state.writes_to_fail() }))
}

/// `POST /test/restart`: asks the binary to restart the broker on the same data directory and
/// addresses (202). The HTTP listener goes down with the broker: poll `GET /test/restart` until
/// `restarts` reaches the `restarts_after` this answers.
pub(crate) async fn restart(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
) -> (StatusCode, Json<Value>) {
    let after = api
        .state
        .restarts
        .load(std::sync::atomic::Ordering::Relaxed)
        + 1;
    api.state.restart.notify_one();
    (
        StatusCode::ACCEPTED,
        Json(json!({ "restarts_after": after })),
    )
}

/// `GET /test/restart`: how many restarts led to the broker answering.
pub(crate) async fn restarts(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
) -> Json<Value> {
    Json(json!({ "restarts": api.state.restarts.load(std::sync::atomic::Ordering::Relaxed) }))
}
