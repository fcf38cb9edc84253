//! `/api/queues`: list, show, declare, delete, purge.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::exchanges::yes;
use super::extract::{lenient_bool, JsonBody, PathOf};
use super::fields::{json_to_table, short};
use super::queue_shape::queue_json;
use super::resource::{checked_vhost, committed, created_status, Deletable, Listed, Named};
use super::Api;
use crate::broker::access::{Operation, ResourceKind};
use crate::broker::persist::DefinitionWrites;
use crate::broker::queue::Queue;
use crate::broker::vhost::{QueueSpec, VHost};

/// `/api/queues`: listed, shown and deleted as `resource` does it.
pub(crate) struct Queues;

impl Listed for Queues {
    fn list(api: &Api, vhost: &VHost) -> Vec<Value> {
        let connections = api.state.connections.list();
        let mut queues = vhost.queues();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        queues
            .iter()
            .map(|q| queue_json(api, vhost, q, &connections))
            .collect()
    }
}

impl Named for Queues {
    fn show(api: &Api, vhost: &VHost, name: &str) -> Option<Value> {
        let queue = vhost.queue(name).ok()?;
        Some(queue_json(
            api,
            vhost,
            &queue,
            &api.state.connections.list(),
        ))
    }
}

impl Deletable for Queues {
    type Query = DeleteQuery;

    /// Configure permission on the queue, as `queue.delete` asks.
    fn permit_delete<const N: u8>(user: &Authed<N>, vhost: &VHost, name: &str) -> ApiResult<()> {
        user.check_vhost(&vhost.name)?;
        vhost.queue(name).map_err(|_| ApiError::not_found())?;
        user.permit(&vhost.name, Operation::Configure, ResourceKind::Queue, name)
    }

    /// `?if-unused=true`: refused while it has consumers; `?if-empty=true`: while it holds
    /// messages.
    fn delete(
        vhost: &Arc<VHost>,
        name: &str,
        query: DeleteQuery,
        writes: DefinitionWrites<'_>,
    ) -> ApiResult<()> {
        vhost.delete_queue_reporting(name, query.if_unused, query.if_empty, None, writes)?;
        Ok(())
    }
}

/// The vhost and queue a path names, after checking access.
pub(crate) fn find_queue<const N: u8>(
    api: &Api,
    user: &Authed<N>,
    vhost: &str,
    name: &str,
) -> ApiResult<(Arc<VHost>, Arc<Queue>)> {
    let vhost = checked_vhost(api, user, vhost)?;
    let queue = vhost.queue(name).map_err(|_| ApiError::not_found())?;
    Ok((vhost, queue))
}

/// The body of `PUT /api/queues/{vhost}/{name}`.
#[derive(Deserialize)]
pub(crate) struct QueueBody {
    #[serde(default = "yes", deserialize_with = "lenient_bool")]
    durable: bool,
    #[serde(default, deserialize_with = "lenient_bool")]
    auto_delete: bool,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Declares a queue; true if it was created. Its write reports to `writes`.
pub(crate) fn declare_queue(
    vhost: &VHost,
    name: &str,
    body: QueueBody,
    writes: DefinitionWrites<'_>,
) -> ApiResult<bool> {
    if name.is_empty() {
        return Err(ApiError::bad_request(
            "a queue declared over HTTP needs a name",
        ));
    }
    let existed = vhost.queue(name).is_ok();
    vhost.declare_queue_reporting(
        QueueSpec {
            name: short(name, "queue name")?,
            passive: false,
            durable: body.durable,
            // Exclusive to what? An HTTP request has no connection to own the queue.
            exclusive: false,
            auto_delete: body.auto_delete,
            arguments: json_to_table(body.arguments.as_ref())?,
        },
        // No AMQP connection has id 0: a declare over HTTP owns nothing.
        0,
        writes,
    )?;
    Ok(!existed)
}

/// `PUT /api/queues/{vhost}/{name}`: 201 when created, 204 when an equivalent one exists.
pub(crate) async fn declare(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    JsonBody(body): JsonBody<QueueBody>,
) -> ApiResult<StatusCode> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    user.permit(
        &vhost.name,
        Operation::Configure,
        ResourceKind::Queue,
        &name,
    )?;
    let created = committed(|writes| declare_queue(&vhost, &name, body, writes)).await?;
    Ok(created_status(created))
}

/// The query of `DELETE /api/queues/{vhost}/{name}`.
#[derive(Deserialize)]
pub(crate) struct DeleteQuery {
    #[serde(rename = "if-unused", default, deserialize_with = "lenient_bool")]
    if_unused: bool,
    #[serde(rename = "if-empty", default, deserialize_with = "lenient_bool")]
    if_empty: bool,
}

/// `DELETE /api/queues/{vhost}/{name}/contents`: purges the ready messages.
pub(crate) async fn purge(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<StatusCode> {
    let (home, queue) = find_queue(&api, &user, &vhost, &name)?;
    user.permit(&vhost, Operation::Read, ResourceKind::Queue, &name)?;
    queue.purge(&*home);
    Ok(StatusCode::NO_CONTENT)
}
