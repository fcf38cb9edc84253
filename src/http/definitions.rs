//! Definitions: the broker's topology as RabbitMQ's definitions JSON, for export and import
//! (`GET`/`POST /api/definitions[/{vhost}]`, and `--definitions FILE` at start).
//!
//! Import declares exchanges, queues and bindings, in that order, as the API's own `PUT` and
//! `POST` would; an equivalent existing object is left as it is, an inequivalent one fails the
//! import with RabbitMQ's text. Users (with their `password_hash`) and permissions are
//! imported and exported as RabbitMQ's; the file's vhosts are created first, and an object
//! naming a vhost that neither exists nor is in the file fails the import before anything
//! changes. Topic permissions are not supported (an import that has some says so in the log).

mod import;

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::auth::{Authed, ADMINISTRATOR};
use super::error::ApiResult;
use super::extract::PathOf;
use super::fields::table_to_json;
use super::overview::RABBITMQ_API_VERSION;
use super::policies::policy_json;
use super::users::{permission_list, user_json};
use super::Api;
use crate::broker::vhost::VHost;
use dwellmq_core::routing::{Binding, Destination};

pub(crate) use import::{import_all, import_file, import_vhost};

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
