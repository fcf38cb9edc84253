//! The shape the API's vhost-scoped resources share (exchanges, queues, policies; bindings
//! for their listing), written once: list them over every vhost the user sees or in one
//! vhost, show one by name, delete one; and any change answered once its writes are on disk.
//!
//! A resource says only what is its own (its JSON, how it is found, who may delete it and
//! how); the handlers here are the routes' (`resource::show::<Queues>`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::{PathOf, QueryOf};
use super::Api;
use crate::broker::persist::{AwaitedWrites, DefinitionWrites};
use crate::broker::vhost::VHost;

/// Objects that live in a vhost and are listed per vhost.
pub(crate) trait Listed {
    /// Every one in `vhost`, as JSON, in the order the API lists them.
    fn list(api: &Api, vhost: &VHost) -> Vec<Value>;
}

/// Listed objects that a path names one by one.
pub(crate) trait Named: Listed {
    /// The one a path calls `name`, as JSON; `None` if there is none.
    fn show(api: &Api, vhost: &VHost, name: &str) -> Option<Value>;
}

/// Objects the API deletes by name.
pub(crate) trait Deletable {
    /// What the delete's query string may ask (`if-unused`...).
    type Query: DeserializeOwned;

    /// Refuses the delete before anything changes: 404 for an object that is not there, 401
    /// for a user without the permission the AMQP side would ask for.
    fn permit_delete<const N: u8>(user: &Authed<N>, vhost: &VHost, name: &str) -> ApiResult<()>;

    /// Deletes it, its definition writes reported to `writes`.
    fn delete(
        vhost: &Arc<VHost>,
        name: &str,
        query: Self::Query,
        writes: DefinitionWrites<'_>,
    ) -> ApiResult<()>;
}

/// A delete that takes no query.
#[derive(Deserialize)]
pub(crate) struct NoQuery {}

/// The vhost a path names, after checking the user may open it (404, then 401).
pub(crate) fn checked_vhost<const N: u8>(
    api: &Api,
    user: &Authed<N>,
    name: &str,
) -> ApiResult<Arc<VHost>> {
    let vhost = api.vhost(name)?;
    user.check_vhost(&vhost.name)?;
    Ok(vhost)
}

/// Runs a change whose definition writes report to the `DefinitionWrites` it is given, and
/// returns once they are on disk, as RabbitMQ answers after its metadata store (a failed
/// write is a 500). A change refused is answered at once.
pub(crate) async fn committed<T>(
    change: impl FnOnce(DefinitionWrites<'_>) -> ApiResult<T>,
) -> ApiResult<T> {
    let written = AwaitedWrites::new();
    let done = change(written.writes())?;
    written.committed().await.map_err(ApiError::not_stored)?;
    Ok(done)
}

/// 201 for an object created, 204 for one that existed (declared again, or replaced).
pub(crate) fn created_status(created: bool) -> StatusCode {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    }
}

/// `GET /api/{resource}`: those of every vhost the user sees.
pub(crate) async fn list_all<R: Listed>(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
) -> Json<Value> {
    let list: Vec<Value> = api
        .vhosts()
        .iter()
        .filter(|v| user.sees(&v.name))
        .flat_map(|v| R::list(&api, v))
        .collect();
    Json(Value::Array(list))
}

/// `GET /api/{resource}/{vhost}`.
pub(crate) async fn list_vhost<R: Listed>(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf(vhost): PathOf<String>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    Ok(Json(Value::Array(R::list(&api, &vhost))))
}

/// `GET /api/{resource}/{vhost}/{name}`.
pub(crate) async fn show<R: Named>(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let found = R::show(&api, &vhost, &name).ok_or_else(ApiError::not_found)?;
    Ok(Json(found))
}

/// `DELETE /api/{resource}/{vhost}/{name}`: 204 once the removal is on disk. `N` is the
/// user tag the resource's changes need.
pub(crate) async fn delete<R: Deletable, const N: u8>(
    user: Authed<N>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    QueryOf(query): QueryOf<R::Query>,
) -> ApiResult<StatusCode> {
    let vhost = api.vhost(&vhost)?;
    R::permit_delete(&user, &vhost, &name)?;
    committed(|writes| R::delete(&vhost, &name, query, writes)).await?;
    Ok(StatusCode::NO_CONTENT)
}
