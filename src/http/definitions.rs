//! Definitions: the broker's topology as RabbitMQ's definitions JSON, for export and import
//! (`GET`/`POST /api/definitions[/{vhost}]`, and `--definitions FILE` at start).
//!
//! Import declares exchanges, queues and bindings, in that order, as the API's own `PUT` and
//! `POST` would; an equivalent existing object is left as it is, an inequivalent one fails the
//! import with RabbitMQ's text. Users (with their `password_hash`) and permissions are
//! imported and exported as RabbitMQ's; the file's vhosts are created first, and an object
//! naming a vhost that neither exists nor is in the file fails the import before anything
//! changes. Topic permissions are not supported (an import that has some says so in the log).

use super::policies::{policy_json, set as set_policy, PolicyBody};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, ADMINISTRATOR};
use super::error::{ApiError, ApiResult};
use super::exchanges::{declare_exchange, ExchangeBody};
use super::extract::{JsonBody, PathOf};
use super::fields::{json_to_table, short, table_to_json};
use super::overview::RABBITMQ_API_VERSION;
use super::queues::{declare_queue, QueueBody};
use super::users::{permission_list, user_json, PermissionBody, UserBody};
use super::Api;
use crate::broker::access::Stored;
use crate::broker::persist::{AwaitedWrites, DefinitionWrites};
use crate::broker::vhost::VHost;
use crate::broker::BrokerState;
use dwellmq_core::routing::{Binding, Destination};

/// Whether an exchange belongs in definitions: not the default one, not a predeclared `amq.*`.
fn exported_exchange(name: &str) -> bool {
    !name.is_empty() && !name.starts_with("amq.")
}

/// The topology of one vhost: (exchanges, queues, bindings), sorted, without the `vhost`
/// member when `with_vhost` is false (the per-vhost export's shape).
fn topology(vhost: &VHost, with_vhost: bool) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    let tag = |mut v: Value| {
        if with_vhost {
            v["vhost"] = vhost.name.as_str().into();
        }
        v
    };
    let mut exchanges = vhost.exchanges();
    exchanges.retain(|x| exported_exchange(&x.name));
    exchanges.sort_by(|a, b| a.name.cmp(&b.name));
    let mut queues = vhost.queues();
    // Exclusive queues die with their connection; RabbitMQ leaves them out too.
    queues.retain(|q| q.exclusive_owner.is_none());
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let mut bindings: Vec<Binding> = vhost
        .exchanges()
        .iter()
        .filter(|x| !x.is_default())
        .flat_map(|x| x.bindings.read().iter().cloned().collect::<Vec<_>>())
        .collect();
    bindings.sort_by(|a, b| {
        (&a.source, &a.destination, &a.routing_key).cmp(&(
            &b.source,
            &b.destination,
            &b.routing_key,
        ))
    });
    let exchanges = exchanges
        .iter()
        .map(|x| {
            tag(json!({
                "name": x.name.as_str(),
                "type": x.kind.type_name(),
                "durable": x.durable,
                "auto_delete": x.auto_delete,
                "internal": x.internal,
                "arguments": table_to_json(&x.arguments),
            }))
        })
        .collect();
    let queues = queues
        .iter()
        .map(|q| {
            tag(json!({
                "name": q.name.as_str(),
                "durable": q.durable,
                "auto_delete": q.auto_delete,
                "arguments": table_to_json(&q.arguments),
            }))
        })
        .collect();
    let bindings = bindings
        .iter()
        .map(|b| {
            let (kind, name) = match &b.destination {
                Destination::Queue(q) => ("queue", q),
                Destination::Exchange(x) => ("exchange", x),
            };
            tag(json!({
                "source": b.source.as_str(),
                "destination": name.as_str(),
                "destination_type": kind,
                "routing_key": b.routing_key.as_str(),
                "arguments": table_to_json(&b.arguments),
            }))
        })
        .collect();
    (exchanges, queues, bindings)
}

/// `GET /api/definitions`.
pub(crate) async fn export(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
) -> Json<Value> {
    let (mut exchanges, mut queues, mut bindings) = (Vec::new(), Vec::new(), Vec::new());
    let vhosts = api.vhosts();
    for vhost in &vhosts {
        let (x, q, b) = topology(vhost, true);
        exchanges.extend(x);
        queues.extend(q);
        bindings.extend(b);
    }
    let users: Vec<Value> = api
        .state
        .access
        .users()
        .iter()
        .map(|u| user_json(u))
        .collect();
    let vhosts_objects = vhosts;
    let vhosts: Vec<Value> = vhosts_objects
        .iter()
        .map(|v| json!({"name": v.name.as_str(), "limits": [], "metadata": {"description": "", "tags": []}}))
        .collect();
    Json(json!({
        "rabbit_version": RABBITMQ_API_VERSION,
        "rabbitmq_version": RABBITMQ_API_VERSION,
        "product_name": "dwellmq",
        "product_version": env!("CARGO_PKG_VERSION"),
        "users": users,
        "vhosts": vhosts,
        "permissions": permission_list(&api),
        "topic_permissions": [],
        "parameters": [],
        "global_parameters": [],
        "policies": policies_of(&vhosts_objects, true),
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    }))
}

/// `GET /api/definitions/{vhost}`: that vhost's topology, without `vhost` members.
pub(crate) async fn export_vhost(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(vhost): PathOf<String>,
) -> ApiResult<Json<Value>> {
    let vhost = api.vhost(&vhost)?;
    let (exchanges, queues, bindings) = topology(&vhost, false);
    Ok(Json(json!({
        "rabbit_version": RABBITMQ_API_VERSION,
        "rabbitmq_version": RABBITMQ_API_VERSION,
        "product_name": "dwellmq",
        "product_version": env!("CARGO_PKG_VERSION"),
        "parameters": [],
        "policies": policies_of(std::slice::from_ref(&vhost), false),
        "queues": queues,
        "exchanges": exchanges,
        "bindings": bindings,
    })))
}

/// The parts of a definitions document that import reads.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct Definitions {
    users: Vec<UserDef>,
    permissions: Vec<PermissionDef>,
    topic_permissions: Vec<Value>,
    vhosts: Vec<NamedVhost>,
    exchanges: Vec<ExchangeDef>,
    queues: Vec<QueueDef>,
    bindings: Vec<BindingDef>,
    policies: Vec<PolicyDef>,
}

#[derive(Deserialize)]
struct UserDef {
    name: String,
    #[serde(flatten)]
    body: UserBody,
}

#[derive(Deserialize)]
struct PermissionDef {
    user: String,
    vhost: String,
    #[serde(flatten)]
    body: PermissionBody,
}

#[derive(Deserialize)]
struct PolicyDef {
    name: String,
    vhost: Option<String>,
    #[serde(flatten)]
    body: PolicyBody,
}

/// The policies of `vhosts` as definitions list them (`with_vhost`: each names its vhost).
fn policies_of(vhosts: &[Arc<VHost>], with_vhost: bool) -> Vec<Value> {
    vhosts
        .iter()
        .flat_map(|v| {
            v.policies()
                .into_iter()
                .map(|p| {
                    let mut value = policy_json(&v.name, &p);
                    if !with_vhost {
                        if let Some(object) = value.as_object_mut() {
                            object.remove("vhost");
                        }
                    }
                    value
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[derive(Deserialize)]
struct NamedVhost {
    name: String,
}

#[derive(Deserialize)]
struct ExchangeDef {
    name: String,
    vhost: Option<String>,
    #[serde(flatten)]
    body: ExchangeBody,
}

#[derive(Deserialize)]
struct QueueDef {
    name: String,
    vhost: Option<String>,
    #[serde(flatten)]
    body: QueueBody,
}

#[derive(Deserialize)]
struct BindingDef {
    source: String,
    vhost: Option<String>,
    destination: String,
    destination_type: String,
    #[serde(default)]
    routing_key: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// Applies `defs` to the broker. `scope` is the vhost of a per-vhost import (whose objects
/// carry no `vhost`); otherwise each object names its vhost. Vhosts, exchanges, queues,
/// bindings and policies report their writes to `writes`; the returned [`Stored`] are the
/// writes of users and permissions.
pub(crate) fn import(
    state: &BrokerState,
    defs: Definitions,
    scope: Option<&str>,
    writes: DefinitionWrites<'_>,
) -> ApiResult<Vec<Stored>> {
    let vhost_of = |named: &Option<String>| -> ApiResult<Arc<VHost>> {
        let name = scope.or(named.as_deref()).ok_or_else(|| {
            ApiError::bad_request("every exchange, queue and binding must name its vhost")
        })?;
        state
            .vhost(name)
            .ok_or_else(|| ApiError::bad_request(format!("vhost '{name}' does not exist")))
    };
    // The file's vhosts are created first, as RabbitMQ does; an object naming a vhost that
    // neither exists nor is in the file is refused before anything is created.
    let named = defs
        .exchanges
        .iter()
        .map(|x| &x.vhost)
        .chain(defs.queues.iter().map(|q| &q.vhost))
        .chain(defs.bindings.iter().map(|b| &b.vhost))
        .chain(defs.policies.iter().map(|p| &p.vhost));
    for name in named.filter_map(|n| scope.or(n.as_deref())) {
        if state.vhost(name).is_none() && !defs.vhosts.iter().any(|v| v.name == name) {
            return Err(ApiError::bad_request(format!(
                "vhost '{name}' does not exist and the file does not define it"
            )));
        }
    }
    if scope.is_none() {
        for v in &defs.vhosts {
            state.add_vhost(&v.name, writes);
        }
    }
    let exchanges = defs
        .exchanges
        .into_iter()
        .map(|x| Ok((vhost_of(&x.vhost)?, x)))
        .collect::<ApiResult<Vec<_>>>()?;
    let queues = defs
        .queues
        .into_iter()
        .map(|q| Ok((vhost_of(&q.vhost)?, q)))
        .collect::<ApiResult<Vec<_>>>()?;
    let bindings = defs
        .bindings
        .into_iter()
        .map(|b| Ok((vhost_of(&b.vhost)?, b)))
        .collect::<ApiResult<Vec<_>>>()?;
    let policies = defs
        .policies
        .into_iter()
        .map(|p| {
            let vhost = vhost_of(&p.vhost)?;
            Ok((vhost, p.body.into_policy(&p.name)?))
        })
        .collect::<ApiResult<Vec<_>>>()?;
    // Users and permissions belong to a whole-broker import, as in RabbitMQ.
    let (users, permissions) = if scope.is_none() {
        let access = &state.access;
        let users = defs
            .users
            .into_iter()
            .map(|u| {
                let previous = access.user(&u.name);
                u.body.into_user(&u.name, previous.as_deref())
            })
            .collect::<ApiResult<Vec<_>>>()?;
        let permissions = defs
            .permissions
            .into_iter()
            .map(|p| {
                let known =
                    users.iter().any(|u| u.name == p.user) || access.user(&p.user).is_some();
                if !known || state.vhost(&p.vhost).is_none() {
                    return Err(ApiError::bad_request(format!(
                        "permissions of user '{}' in vhost '{}': vhost_or_user_not_found",
                        p.user, p.vhost
                    )));
                }
                Ok((p.vhost, p.user, p.body.into_permission()?))
            })
            .collect::<ApiResult<Vec<_>>>()?;
        (users, permissions)
    } else {
        (Vec::new(), Vec::new())
    };
    if !defs.topic_permissions.is_empty() {
        tracing::warn!(
            count = defs.topic_permissions.len(),
            "definitions import: topic permissions are not supported and were not applied"
        );
    }
    let mut stored = Vec::new();
    for user in users {
        stored.push(state.access.put_user(user).1);
    }
    for (vhost, user, permission) in permissions {
        stored.push(state.access.set_permission(&vhost, &user, permission).1);
    }
    for (vhost, policy) in policies {
        set_policy(&vhost, policy, writes)?;
    }
    for (vhost, x) in exchanges {
        if exported_exchange(&x.name) {
            declare_exchange(&vhost, &x.name, x.body, writes)?;
        }
    }
    for (vhost, q) in queues {
        declare_queue(&vhost, &q.name, q.body, writes)?;
    }
    for (vhost, b) in bindings {
        let destination = match b.destination_type.as_str() {
            "queue" => Destination::Queue(short(&b.destination, "queue name")?),
            "exchange" => Destination::Exchange(short(&b.destination, "exchange name")?),
            other => {
                return Err(ApiError::bad_request(format!(
                    "destination_type must be queue or exchange, not '{other}'"
                )))
            }
        };
        let binding = Binding {
            source: short(&b.source, "exchange name")?,
            destination,
            routing_key: short(&b.routing_key, "routing key")?,
            arguments: json_to_table(b.arguments.as_ref())?,
        };
        vhost.bind_reporting(binding, writes)?;
    }
    Ok(stored)
}

/// Imports `defs` and answers once everything it wrote is on disk, as RabbitMQ answers after
/// its metadata store.
async fn import_committed(
    state: &BrokerState,
    defs: Definitions,
    scope: Option<&str>,
) -> ApiResult<()> {
    let written = AwaitedWrites::new();
    let stored = import(state, defs, scope, written.writes())?;
    written.committed().await.map_err(ApiError::not_stored)?;
    for change in stored {
        change.committed().await.map_err(ApiError::not_stored)?;
    }
    Ok(())
}

/// `POST /api/definitions`: 204 once applied.
pub(crate) async fn import_all(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    JsonBody(defs): JsonBody<Definitions>,
) -> ApiResult<StatusCode> {
    import_committed(&api.state, defs, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/definitions/{vhost}`: 204 once applied.
pub(crate) async fn import_vhost(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(vhost): PathOf<String>,
    JsonBody(defs): JsonBody<Definitions>,
) -> ApiResult<StatusCode> {
    api.vhost(&vhost)?;
    import_committed(&api.state, defs, Some(&vhost)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Reads and applies a definitions file at start (`--definitions FILE`).
pub(crate) fn import_file(state: &BrokerState, path: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let defs: Definitions = serde_json::from_slice(&text)
        .map_err(|e| format!("{}: not a definitions file: {e}", path.display()))?;
    // At start (or a test double's reset) nobody waits: everything is on disk with the next
    // commit.
    import(state, defs, None, DefinitionWrites::UNAWAITED)
        .map(drop)
        .map_err(|e| format!("{}: {}", path.display(), e.reason()))
}
