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
use crate::broker::exchange::ExchangeKind;
use crate::broker::persist;
use crate::server::channel::notify_cancelled;

pub(crate) async fn delete_vhost(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<StatusCode> {
    let state = &api.state;
    let vhost = state.remove_vhost(&name).ok_or_else(ApiError::not_found)?;
    // RabbitMQ's words, with CONNECTION_FORCED.
    let reason = format!("vhost '{name}' is deleted");
    for connection in state.connections.list().iter().filter(|c| c.vhost == name) {
        connection.close(reason.clone());
    }
    for queue in vhost.queues() {
        if let Ok(deleted) = vhost.delete_queue(&queue.name, false, false, None) {
            notify_cancelled(&deleted.consumers);
        }
    }
    for exchange in vhost.exchanges() {
        if matches!(exchange.kind, ExchangeKind::Delayed(_)) {
            state.delayed.forget_exchange(&vhost.name, &exchange.name);
        }
    }
    for (granted_in, user, _) in state.access.permissions() {
        if granted_in == name {
            state.access.clear_permission(&granted_in, &user);
        }
    }
    // Last: the store drops whatever the deletes above left under the vhost.
    persist::vhost_deleted(&state.runtime, &name);
    tracing::info!(vhost = %name, "vhost deleted");
    Ok(StatusCode::NO_CONTENT)
}
