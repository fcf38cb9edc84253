//! `/api/exchanges`: list, show, declare, delete.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::{lenient_bool, JsonBody, PathOf, QueryOf};
use super::fields::{json_to_table, short, table_to_json};
use super::Api;
use crate::broker::access::{Operation, ResourceKind};
use crate::broker::exchange::{DeclaredType, Exchange, ExchangeKind};
use crate::broker::persist::{AwaitedWrites, DefinitionWrites};
use crate::broker::rates::RateKey;
use crate::broker::vhost::{ExchangeSpec, VHost};

/// The name the API uses for the nameless default exchange.
const DEFAULT_EXCHANGE: &str = "amq.default";

/// A path's exchange name as the broker knows it (`amq.default` is `""`).
pub(crate) fn broker_name(path_name: &str) -> &str {
    if path_name == DEFAULT_EXCHANGE {
        ""
    } else {
        path_name
    }
}

pub(crate) fn exchange_json(api: &Api, vhost: &VHost, x: &Exchange) -> Value {
    let mut value = json!({
        "name": x.name.as_str(),
        "vhost": vhost.name.as_str(),
        "type": x.kind.type_name(),
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": table_to_json(&x.arguments),
        "message_stats": api.state.rates.message_stats(
            &RateKey::Exchange(vhost.name.to_string(), x.name.to_string()),
            &x.counters.counts(),
        ),
        // Per-channel and per-queue rates: RabbitMQ lists them only with `rates_mode`
        // detailed; dwellmq's is basic, as RabbitMQ's default.
        "incoming": [],
        "outgoing": [],
    });
    value["user_who_performed_action"] = declared_by(&x.name).into();
    if let ExchangeKind::Delayed(_) = x.kind {
        // As the delayed-message plugin reports it.
        value["messages_delayed"] = api.state.delayed.stats(&vhost.name, &x.name).0.into();
    }
    value
}

/// Who declared the exchange, as RabbitMQ reports it: `rmq-internal` (its name for the broker
/// itself) for the ones every vhost is born with. The broker does not record who declared the
/// others, so they show RabbitMQ's word for an unrecorded user, `unknown`, rather than no
/// field at all.
fn declared_by(name: &str) -> &'static str {
    if is_predeclared(name) {
        "rmq-internal"
    } else {
        "unknown"
    }
}

/// The default exchange and the `amq.*` ones every vhost is born with.
fn is_predeclared(name: &str) -> bool {
    name.is_empty() || name.starts_with("amq.")
}

fn vhost_exchanges(api: &Api, vhost: &VHost) -> Vec<Value> {
    let mut exchanges = vhost.exchanges();
    exchanges.sort_by(|a, b| a.name.cmp(&b.name));
    exchanges
        .iter()
        .map(|x| exchange_json(api, vhost, x))
        .collect()
}

/// `GET /api/exchanges`.
pub(crate) async fn list_all(user: Authed<MANAGEMENT>, State(api): State<Arc<Api>>) -> Json<Value> {
    let list: Vec<Value> = api
        .vhosts()
        .iter()
        .filter(|v| user.sees(&v.name))
        .flat_map(|v| vhost_exchanges(&api, v))
        .collect();
    Json(Value::Array(list))
}

/// `GET /api/exchanges/{vhost}`.
pub(crate) async fn list_vhost(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf(vhost): PathOf<String>,
) -> ApiResult<Json<Value>> {
    let vhost = api.vhost(&vhost)?;
    user.check_vhost(&vhost.name)?;
    Ok(Json(Value::Array(vhost_exchanges(&api, &vhost))))
}

/// `GET /api/exchanges/{vhost}/{name}`.
pub(crate) async fn show(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<Json<Value>> {
    let vhost = api.vhost(&vhost)?;
    user.check_vhost(&vhost.name)?;
    let exchange = vhost
        .exchange(broker_name(&name))
        .map_err(|_| ApiError::not_found())?;
    Ok(Json(exchange_json(&api, &vhost, &exchange)))
}

/// The body of `PUT /api/exchanges/{vhost}/{name}`.
#[derive(Deserialize)]
pub(crate) struct ExchangeBody {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default = "yes", deserialize_with = "lenient_bool")]
    durable: bool,
    #[serde(default, deserialize_with = "lenient_bool")]
    auto_delete: bool,
    #[serde(default, deserialize_with = "lenient_bool")]
    internal: bool,
    #[serde(default)]
    arguments: Option<Value>,
}

pub(crate) fn yes() -> bool {
    true
}

/// Parses an exchange type (and, for delayed exchanges, `x-delayed-type`), as
/// `exchange.declare` does.
/// Declares an exchange; true if it was created (false: an equivalent one existed).
/// Its write reports to `writes`.
pub(crate) fn declare_exchange(
    vhost: &VHost,
    name: &str,
    body: ExchangeBody,
    writes: DefinitionWrites<'_>,
) -> ApiResult<bool> {
    let arguments = json_to_table(body.arguments.as_ref())?;
    let kind = DeclaredType::parse(&body.kind)?;
    let existed = vhost.exchange(name).is_ok();
    let spec = ExchangeSpec {
        name: short(name, "exchange name")?,
        kind,
        passive: false,
        durable: body.durable,
        auto_delete: body.auto_delete,
        internal: body.internal,
        arguments,
    };
    vhost.declare_exchange_reporting(spec, writes)?;
    Ok(!existed)
}

/// `PUT /api/exchanges/{vhost}/{name}`: 201 when created, 204 when an equivalent one exists.
pub(crate) async fn declare(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    JsonBody(body): JsonBody<ExchangeBody>,
) -> ApiResult<StatusCode> {
    let vhost = api.vhost(&vhost)?;
    user.check_vhost(&vhost.name)?;
    let name = broker_name(&name);
    user.permit(
        &vhost.name,
        Operation::Configure,
        ResourceKind::Exchange,
        name,
    )?;
    let written = AwaitedWrites::new();
    let created = declare_exchange(&vhost, name, body, written.writes())?;
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
}

/// `DELETE /api/exchanges/{vhost}/{name}[?if-unused=true]`.
pub(crate) async fn delete(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    QueryOf(query): QueryOf<DeleteQuery>,
) -> ApiResult<StatusCode> {
    let vhost = api.vhost(&vhost)?;
    user.check_vhost(&vhost.name)?;
    let name = broker_name(&name);
    if vhost.exchange(name).is_err() {
        return Err(ApiError::not_found());
    }
    user.permit(
        &vhost.name,
        Operation::Configure,
        ResourceKind::Exchange,
        name,
    )?;
    let written = AwaitedWrites::new();
    vhost.delete_exchange_reporting(name, query.if_unused, written.writes())?;
    written.committed().await.map_err(ApiError::not_stored)?;
    Ok(StatusCode::NO_CONTENT)
}
