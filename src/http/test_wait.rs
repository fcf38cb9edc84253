//! `POST /test/wait`: answers once a condition holds, or 408 with what was seen when
//! `timeout_ms` (default 5000, at most 60000) passes. The body names the condition:
//!
//! - `{"condition": "ready", "queue": "q", "count": 1}` (and `"vhost"`, default `/`)
//! - `{"condition": "unacked", ...}`, `{"condition": "consumers", ...}` likewise
//! - `{"condition": "idle"}`: nothing due at the current time is still in flight, and every
//!   delivery has been written to its socket.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::JsonBody;
use super::Api;
use crate::handle::{check, Condition};

const DEFAULT_TIMEOUT_MS: u64 = 5_000;
const MAX_TIMEOUT_MS: u64 = 60_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WaitBody {
    condition: String,
    vhost: Option<String>,
    queue: Option<String>,
    count: Option<usize>,
    timeout_ms: Option<u64>,
}

fn condition(body: &WaitBody) -> ApiResult<Condition> {
    if body.condition == "idle" {
        return Ok(Condition::Idle);
    }
    let (Some(queue), Some(count)) = (body.queue.clone(), body.count) else {
        return Err(ApiError::bad_request(format!(
            "condition '{}' needs \"queue\" and \"count\"",
            body.condition
        )));
    };
    let vhost = body.vhost.clone().unwrap_or_else(|| "/".into());
    Ok(match body.condition.as_str() {
        "ready" => Condition::Ready {
            vhost,
            queue,
            count,
        },
        "unacked" => Condition::Unacked {
            vhost,
            queue,
            count,
        },
        "consumers" => Condition::Consumers {
            vhost,
            queue,
            count,
        },
        other => {
            return Err(ApiError::bad_request(format!(
                "unknown condition '{other}' (ready, unacked, consumers, idle)"
            )))
        }
    })
}

/// `POST /test/wait`.
pub(crate) async fn wait(
    _user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    JsonBody(body): JsonBody<WaitBody>,
) -> ApiResult<Json<Value>> {
    let wanted = condition(&body)?;
    let timeout = Duration::from_millis(
        body.timeout_ms
            .unwrap_or(DEFAULT_TIMEOUT_MS)
            .min(MAX_TIMEOUT_MS),
    );
    let started = tokio::time::Instant::now();
    loop {
        let (holds, seen) = check(&api.state, &wanted);
        if holds {
            return Ok(Json(json!({
                "condition": body.condition,
                "seen": seen,
                "waited_ms": started.elapsed().as_millis() as u64,
            })));
        }
        if started.elapsed() >= timeout {
            return Err(ApiError::status(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                format!(
                    "timed out after {} ms waiting for {wanted:?}; last seen: {seen}",
                    timeout.as_millis()
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
