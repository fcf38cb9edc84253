//! `/api/exchanges`: list, show, declare, delete.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::{lenient_bool, JsonBody, PathOf};
use super::fields::{json_to_table, short, table_to_json};
use super::resource::{checked_vhost, committed, created_status, Deletable, Listed, Named};
use super::Api;
use crate::broker::access::{Operation, ResourceKind};
use crate::broker::exchange::{DeclaredBy, DeclaredType, Exchange, ExchangeKind};
use crate::broker::persist::DefinitionWrites;
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
        "user_who_performed_action": x.declared_by.name(),
    });
    if let ExchangeKind::Delayed(_) = x.kind {
        // As the delayed-message plugin reports it.
        value["messages_delayed"] = api.state.delayed.stats(&vhost.name, &x.name).0.into();
    }
    value
}

/// `/api/exchanges`: listed, shown and deleted as `resource` does it.
pub(crate) struct Exchanges;

impl Listed for Exchanges {
    fn list(api: &Api, vhost: &VHost) -> Vec<Value> {
        let mut exchanges = vhost.exchanges();
        exchanges.sort_by(|a, b| a.name.cmp(&b.name));
        exchanges
            .iter()
            .map(|x| exchange_json(api, vhost, x))
            .collect()
    }
}

impl Named for Exchanges {
    fn show(api: &Api, vhost: &VHost, name: &str) -> Option<Value> {
        let exchange = vhost.exchange(broker_name(name)).ok()?;
        Some(exchange_json(api, vhost, &exchange))
    }
}

impl Deletable for Exchanges {
    type Query = DeleteQuery;

    /// Configure permission on the exchange, as `exchange.delete` asks.
    fn permit_delete<const N: u8>(user: &Authed<N>, vhost: &VHost, name: &str) -> ApiResult<()> {
        user.check_vhost(&vhost.name)?;
        let name = broker_name(name);
        vhost.exchange(name).map_err(|_| ApiError::not_found())?;
        user.permit(
            &vhost.name,
            Operation::Configure,
            ResourceKind::Exchange,
            name,
        )
    }

    /// `?if-unused=true`: refused while it has bindings.
    fn delete(
        vhost: &Arc<VHost>,
        name: &str,
        query: DeleteQuery,
        writes: DefinitionWrites<'_>,
    ) -> ApiResult<()> {
        vhost.delete_exchange_reporting(broker_name(name), query.if_unused, writes)?;
        Ok(())
    }
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

/// Declares an exchange (its type, and for delayed exchanges `x-delayed-type`, parsed as
/// `exchange.declare` parses them) on behalf of `declared_by`; true if it was created (false:
/// an equivalent one existed, which keeps its declarer). Its write reports to `writes`.
pub(crate) fn declare_exchange(
    vhost: &VHost,
    name: &str,
    body: ExchangeBody,
    declared_by: DeclaredBy,
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
        declared_by,
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
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let name = broker_name(&name);
    user.permit(
        &vhost.name,
        Operation::Configure,
        ResourceKind::Exchange,
        name,
    )?;
    let declared_by = DeclaredBy::user(&user.user.name);
    let created =
        committed(|writes| declare_exchange(&vhost, name, body, declared_by, writes)).await?;
    Ok(created_status(created))
}

/// The query of `DELETE /api/exchanges/{vhost}/{name}`.
#[derive(Deserialize)]
pub(crate) struct DeleteQuery {
    #[serde(rename = "if-unused", default, deserialize_with = "lenient_bool")]
    if_unused: bool,
}
