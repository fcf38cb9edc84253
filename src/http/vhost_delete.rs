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
use crate::broker::persist::AwaitedWrites;

pub(crate) async fn delete_vhost(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<StatusCode> {
    let written = AwaitedWrites::new();
    if !api.state.delete_vhost(&name, written.writes()) {
        return Err(ApiError::not_found());
    }
    // Answered once the deletion is on disk (a failed one is retried by the store).
    written.committed().await.map_err(ApiError::not_stored)?;
    tracing::info!(vhost = %name, "vhost deleted");
    Ok(StatusCode::NO_CONTENT)
}
