//! `POST /test/reset`: back to a clean broker between tests without a restart. Body
//! `{"to": "fixture"}` (the default: the `--definitions` file and configured policies are
//! declared again) or `{"to": "empty"}`. Answers what was removed and how long it took.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, ADMINISTRATOR};
use super::error::{ApiError, ApiResult};
use super::extract::JsonBody;
use super::Api;
use crate::handle::reset;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResetBody {
    to: Option<String>,
}

/// `POST /test/reset`.
pub(crate) async fn reset_broker(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    JsonBody(body): JsonBody<ResetBody>,
) -> ApiResult<Json<Value>> {
    let fixture = match body.to.as_deref() {
        None | Some("fixture") => true,
        Some("empty") => false,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "reset to 'fixture' or 'empty', not '{other}'"
            )))
        }
    };
    let removed = reset(&api.state, fixture).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Json(json!({
        "queues_removed": removed.queues,
        "exchanges_removed": removed.exchanges,
        "fixture": fixture && api.state.config.definitions.is_some(),
        "took_us": removed.took.as_micros() as u64,
    })))
}
