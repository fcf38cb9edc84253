//! `DELETE /api/vhosts/{vhost}`: deletes a vhost with everything in it, as RabbitMQ does:
//! its connections are closed, its queues (with their messages) and exchanges (with what
//! delayed ones hold) and the permissions granted in it go.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;

use super::auth::{Authed, ADMINISTRATOR};
use super::error::{ApiError, ApiResult};
use super::extract::PathOf;
use super::Api;

pub(crate) async fn delete_vhost(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<StatusCode> {
    if !api.state.delete_vhost(&name) {
        return Err(ApiError::not_found());
    }
    tracing::info!(vhost = %name, "vhost deleted");
    Ok(StatusCode::NO_CONTENT)
}
