//! `/api/queues`: list, show, declare, delete, purge.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::exchanges::yes;
use super::extract::{lenient_bool, JsonBody, PathOf, QueryOf};
use super::fields::{json_to_table, short};
use super::queue_shape::queue_json;
use super::Api;
use crate::broker::access::{Operation, ResourceKind};
use crate::broker::persist::{AwaitedWrites, DefinitionWrites};
use crate::broker::queue::Queue;
use crate::broker::vhost::{QueueSpec, VHost};

fn vhost_queues(api: &Api, vhost: &VHost) -> Vec<Value> {
    let connections = api.state.connections.list();
    let mut queues = vhost.queues();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    queues
        .iter()
        .map(|q| queue_json(api, q, &connections))
        .collect()
}

/// `GET /api/queues`.
pub(crate) async fn list_all(user: Authed<MANAGEMENT>, State(api): State<Arc<Api>>) -> Json<Value> {
    let list: Vec<Value> = api
        .vhosts()
        .iter()
        .filter(|v| user.sees(&v.name))
        .flat_map(|v| vhost_queues(&api, v))
        .collect();
    Json(Value::Array(list))
}

/// `GET /api/queues/{vhost}`.
pub(crate) async fn list_vhost(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf(vhost): PathOf<String>,
) -> ApiResult<Json<Value>> {
    let vhost = api.vhost(&vhost)?;
    user.check_vhost(&vhost.name)?;
    Ok(Json(Value::Array(vhost_queues(&api, &vhost))))
}

/// The vhost and queue a path names, after checking access.
pub(crate) fn find_queue<const N: u8>(
    api: &Api,
    user: &Authed<N>,
    vhost: &str,
    name: &str,
) -> ApiResult<Arc<Queue>> {
    let vhost = api.vhost(vhost)?;
    user.check_vhost(&vhost.name)?;
    vhost.queue(name).map_err(|_| ApiError::not_found())
}

/// `GET /api/queues/{vhost}/{name}`.
pub(crate) async fn show(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<Json<Value>> {
    let queue = find_queue(&api, &user, &vhost, &name)?;
    Ok(Json(queue_json(
        &api,
        &queue,
        &api.state.connections.list(),
    )))
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
    let vhost = api.vhost(&vhost)?;
    user.check_vhost(&vhost.name)?;
    user.permit(
        &vhost.name,
        Operation::Configure,
        ResourceKind::Queue,
        &name,
    )?;
    let written = AwaitedWrites::new();
    let created = declare_queue(&vhost, &name, body, written.writes())?;
    // Answered once the definition is on disk, as RabbitMQ answers after its metadata store.
    written.committed().await.map_err(ApiError::not_stored)?;
    Ok(if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    })
}

#[derive(Deserialize)]
pub(crate) struct DeleteQuery {
    #[serde(rename = "if-unused", default, deserialize_with = "lenient_bool")]
    if_unused: bool,
    #[serde(rename = "if-empty", default, deserialize_with = "lenient_bool")]
    if_empty: bool,
}

/// `DELETE /api/queues/{vhost}/{name}[?if-unused=true][&if-empty=true]`.
pub(crate) async fn delete(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    QueryOf(query): QueryOf<DeleteQuery>,
) -> ApiResult<StatusCode> {
    find_queue(&api, &user, &vhost, &name)?;
    user.permit(&vhost, Operation::Configure, ResourceKind::Queue, &name)?;
    let vhost = api.vhost(&vhost)?;
    let written = AwaitedWrites::new();
    let writes = written.writes();
    vhost.delete_queue_reporting(&name, query.if_unused, query.if_empty, None, writes)?;
    written.committed().await.map_err(ApiError::not_stored)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /api/queues/{vhost}/{name}/contents`: purges the ready messages.
pub(crate) async fn purge(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<StatusCode> {
    let queue = find_queue(&api, &user, &vhost, &name)?;
    user.permit(&vhost, Operation::Read, ResourceKind::Queue, &name)?;
    queue.purge();
    Ok(StatusCode::NO_CONTENT)
}
