//! `/api/bindings`: list, create, delete by properties key.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::Json;
use base64::Engine;
use dwellmq_codec::FieldTable;
use dwellmq_core::routing::{Binding, Destination};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::exchanges::broker_name;
use super::extract::{JsonBody, PathOf};
use super::fields::{json_to_table, short, table_to_json};
use super::resource::{checked_vhost, committed, Listed};
use super::Api;
use crate::broker::access::{Operation, ResourceKind};
use crate::broker::vhost::VHost;

/// RabbitMQ's `properties_key`: the routing key, URL-quoted, then `~` and a hash of the
/// arguments when there are any; `~` alone for an empty key without arguments. A client reads
/// it from a listing and sends it back to delete that binding, so it only has to be stable and
/// distinct (RabbitMQ hashes the Erlang term; dwellmq hashes the arguments as JSON).
pub(crate) fn properties_key(routing_key: &str, arguments: &FieldTable) -> String {
    if arguments.is_empty() {
        return if routing_key.is_empty() {
            "~".into()
        } else {
            quote(routing_key)
        };
    }
    let mut sorted: Vec<(String, Value)> = arguments
        .iter()
        .map(|(k, v)| (k.to_string(), super::fields::value_to_json(v)))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let text = serde_json::to_string(&sorted).unwrap_or_default();
    // FNV-1a, 32 bits: short keys, as RabbitMQ's.
    let hash = text.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let hash = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.to_be_bytes());
    format!("{}~{}", quote(routing_key), quote(&hash))
}

/// `quote_plus`, with `~` escaped too (it separates key and hash).
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn binding_json(vhost: &VHost, b: &Binding) -> Value {
    let (kind, name) = match &b.destination {
        Destination::Queue(q) => ("queue", q),
        Destination::Exchange(x) => ("exchange", x),
    };
    json!({
        "source": b.source.as_str(),
        "vhost": vhost.name.as_str(),
        "destination": name.as_str(),
        "destination_type": kind,
        "routing_key": b.routing_key.as_str(),
        "arguments": table_to_json(&b.arguments),
        "properties_key": properties_key(&b.routing_key, &b.arguments),
    })
}

/// Every binding of a vhost, as RabbitMQ lists them: first the default exchange's implicit
/// binding of each queue, then the declared ones.
fn vhost_bindings(vhost: &VHost) -> Vec<Binding> {
    let mut queues = vhost.queues();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out: Vec<Binding> = queues
        .iter()
        .map(|q| Binding::new("", Destination::Queue(q.name.clone()), q.name.clone()))
        .collect();
    let mut exchanges = vhost.exchanges();
    exchanges.sort_by(|a, b| a.name.cmp(&b.name));
    for exchange in exchanges.iter().filter(|x| !x.is_default()) {
        out.extend(exchange.bindings.read().iter().cloned());
    }
    out
}

fn to_json(vhost: &VHost, bindings: impl Iterator<Item = Binding>) -> Json<Value> {
    Json(bindings.map(|b| binding_json(vhost, &b)).collect())
}

/// `/api/bindings` and `/api/bindings/{vhost}`: listed as `resource` does it.
pub(crate) struct Bindings;

impl Listed for Bindings {
    fn list(_api: &Api, vhost: &VHost) -> Vec<Value> {
        vhost_bindings(vhost)
            .iter()
            .map(|b| binding_json(vhost, b))
            .collect()
    }
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/source`.
pub(crate) async fn of_source(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let name = broker_name(&name);
    vhost.exchange(name).map_err(|_| ApiError::not_found())?;
    let all = vhost_bindings(&vhost);
    Ok(to_json(
        &vhost,
        all.into_iter().filter(|b| b.source == name),
    ))
}

/// `GET /api/exchanges/{vhost}/{name}/bindings/destination`.
pub(crate) async fn of_exchange_destination(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    vhost.exchange(&name).map_err(|_| ApiError::not_found())?;
    let to = Destination::Exchange(name.into());
    let all = vhost_bindings(&vhost);
    Ok(to_json(
        &vhost,
        all.into_iter().filter(|b| b.destination == to),
    ))
}

/// `GET /api/queues/{vhost}/{name}/bindings`.
pub(crate) async fn of_queue_destination(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    vhost.queue(&name).map_err(|_| ApiError::not_found())?;
    let to = Destination::Queue(name.into());
    let all = vhost_bindings(&vhost);
    Ok(to_json(
        &vhost,
        all.into_iter().filter(|b| b.destination == to),
    ))
}

/// `q` or `e` in a binding path.
fn destination(kind: &str, name: &str) -> ApiResult<Destination> {
    match kind {
        "q" => Ok(Destination::Queue(short(name, "queue name")?)),
        "e" => Ok(Destination::Exchange(short(
            broker_name(name),
            "exchange name",
        )?)),
        _ => Err(ApiError::not_found()),
    }
}

/// The bindings from `source` to `to`, after checking both exist.
fn between_bindings(vhost: &VHost, source: &str, to: &Destination) -> ApiResult<Vec<Binding>> {
    let exchange = vhost.exchange(source).map_err(|_| ApiError::not_found())?;
    let exists = match to {
        Destination::Queue(q) => vhost.queue(q).is_ok(),
        Destination::Exchange(x) => vhost.exchange(x).is_ok(),
    };
    if !exists {
        return Err(ApiError::not_found());
    }
    if exchange.is_default() {
        let all = vhost_bindings(vhost);
        return Ok(all
            .into_iter()
            .filter(|b| b.source.is_empty() && b.destination == *to)
            .collect());
    }
    let bindings = exchange.bindings.read();
    Ok(bindings
        .iter()
        .filter(|b| b.destination == *to)
        .cloned()
        .collect())
}

type BindingPath = (String, String, String, String);

/// `GET /api/bindings/{vhost}/e/{source}/{q|e}/{destination}`.
pub(crate) async fn between(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, source, kind, to)): PathOf<BindingPath>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let to = destination(&kind, &to)?;
    let found = between_bindings(&vhost, broker_name(&source), &to)?;
    Ok(to_json(&vhost, found.into_iter()))
}

/// The body of a binding `POST`.
#[derive(Deserialize)]
pub(crate) struct BindingBody {
    #[serde(default)]
    routing_key: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// `POST /api/bindings/{vhost}/e/{source}/{q|e}/{destination}`: 201, with the new binding's
/// path in `Location` as RabbitMQ sends it.
pub(crate) async fn create(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, source, kind, to)): PathOf<BindingPath>,
    JsonBody(body): JsonBody<BindingBody>,
) -> ApiResult<(StatusCode, HeaderMap)> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let to = destination(&kind, &to)?;
    let source = broker_name(&source);
    if vhost.exchange(source).is_err() {
        return Err(ApiError::not_found());
    }
    permit_binding(&user, &vhost.name, source, &to)?;
    let binding = Binding {
        source: short(source, "exchange name")?,
        destination: to,
        routing_key: short(&body.routing_key, "routing key")?,
        arguments: json_to_table(body.arguments.as_ref())?,
    };
    let key = properties_key(&binding.routing_key, &binding.arguments);
    committed(|writes| Ok(vhost.bind_reporting(binding, writes)?)).await?;
    let mut headers = HeaderMap::new();
    if let Ok(location) = HeaderValue::from_str(&key) {
        headers.insert(header::LOCATION, location);
    }
    Ok((StatusCode::CREATED, headers))
}

/// As the AMQP side checks a binding: write on the destination, read on the source.
fn permit_binding(
    user: &Authed<MANAGEMENT>,
    vhost: &str,
    source: &str,
    to: &Destination,
) -> ApiResult<()> {
    let (kind, name) = match to {
        Destination::Queue(q) => (ResourceKind::Queue, q),
        Destination::Exchange(x) => (ResourceKind::Exchange, x),
    };
    user.permit(vhost, Operation::Write, kind, name)?;
    user.permit(vhost, Operation::Read, ResourceKind::Exchange, source)
}

type OneBindingPath = (String, String, String, String, String);

fn find_one(vhost: &VHost, source: &str, kind: &str, to: &str, props: &str) -> ApiResult<Binding> {
    let to = destination(kind, to)?;
    between_bindings(vhost, broker_name(source), &to)?
        .into_iter()
        .find(|b| properties_key(&b.routing_key, &b.arguments) == props)
        .ok_or_else(ApiError::not_found)
}

/// `GET /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}`.
pub(crate) async fn show(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, source, kind, to, props)): PathOf<OneBindingPath>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let binding = find_one(&vhost, &source, &kind, &to, &props)?;
    Ok(Json(binding_json(&vhost, &binding)))
}

/// `DELETE /api/bindings/{vhost}/e/{source}/{q|e}/{destination}/{props}`.
pub(crate) async fn delete(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, source, kind, to, props)): PathOf<OneBindingPath>,
) -> ApiResult<StatusCode> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let binding = find_one(&vhost, &source, &kind, &to, &props)?;
    permit_binding(&user, &vhost.name, &binding.source, &binding.destination)?;
    committed(|writes| Ok(vhost.unbind_reporting(&binding, writes)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dwellmq_codec::FieldValue;

    #[test]
    fn properties_keys_follow_rabbitmq_quoting() {
        let none = FieldTable::new();
        assert_eq!(properties_key("", &none), "~");
        assert_eq!(properties_key("a.b", &none), "a.b");
        assert_eq!(properties_key("a b~c/", &none), "a+b%7Ec%2F");
        let mut args = FieldTable::new();
        args.insert("x-match", FieldValue::from("all"));
        let with = properties_key("k", &args);
        assert!(with.starts_with("k~"), "{with}");
        assert_ne!(with, properties_key("k", &FieldTable::new()));
    }
}
