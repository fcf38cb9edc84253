//! Policies over HTTP, as RabbitMQ's management API has them: `GET /api/policies[/{vhost}]`,
//! `GET`/`PUT`/`DELETE /api/policies/{vhost}/{name}`, and their JSON in definitions.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use dwellmq_core::policy::{ApplyTo, Policy, PolicyDefinition, PolicyValue};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::auth::{Authed, ADMINISTRATOR, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathOf};
use super::Api;
use crate::broker::persist::{AwaitedWrites, DefinitionWrites};
use crate::broker::vhost::VHost;

/// A policy as RabbitMQ writes it in JSON.
pub(crate) fn policy_json(vhost: &str, policy: &Policy) -> Value {
    let definition: Map<String, Value> = policy
        .definition
        .entries()
        .into_iter()
        .map(|(key, value)| {
            let value = match value {
                PolicyValue::Integer(n) => json!(n),
                PolicyValue::Text(t) => json!(t),
            };
            (key.to_string(), value)
        })
        .collect();
    json!({
        "vhost": vhost,
        "name": policy.name,
        "pattern": policy.pattern,
        "apply-to": policy.apply_to.name(),
        "definition": definition,
        "priority": policy.priority,
    })
}

/// A policy's body as `PUT` or a definitions file gives it.
#[derive(Deserialize)]
pub(crate) struct PolicyBody {
    pattern: String,
    #[serde(default)]
    definition: Map<String, Value>,
    #[serde(default)]
    priority: Option<Value>,
    #[serde(default, rename = "apply-to")]
    apply_to: Option<String>,
}

impl PolicyBody {
    /// The policy called `name`, validated.
    pub(crate) fn into_policy(self, name: &str) -> ApiResult<Policy> {
        let invalid = |reason: String| ApiError::bad_request(reason);
        let apply_to = ApplyTo::from_name(self.apply_to.as_deref().unwrap_or("all"))
            .map_err(|e| invalid(e.to_string()))?;
        // rabbitmqadmin sends numbers as strings.
        let priority = match &self.priority {
            None => 0,
            Some(Value::Number(n)) => n.as_i64().ok_or_else(|| invalid("priority".into()))?,
            Some(Value::String(s)) => s
                .parse()
                .map_err(|_| invalid(format!("'{s}' is not a valid priority")))?,
            Some(other) => return Err(invalid(format!("{other} is not a valid priority"))),
        };
        let entries = self
            .definition
            .iter()
            .map(|(key, value)| {
                let value = match value {
                    Value::Number(n) => n.as_i64().map(PolicyValue::Integer),
                    Value::String(s) => Some(PolicyValue::Text(s.clone())),
                    _ => None,
                };
                value
                    .map(|v| (key.as_str(), v))
                    .ok_or_else(|| invalid(format!("{key} must be an integer or a string")))
            })
            .collect::<ApiResult<Vec<_>>>()?;
        let definition =
            PolicyDefinition::from_entries(entries).map_err(|e| invalid(e.to_string()))?;
        Ok(Policy {
            name: name.to_string(),
            pattern: self.pattern,
            apply_to,
            priority,
            definition,
        })
    }
}

/// Sets a policy in `vhost`; its write reports to `writes`.
pub(crate) fn set(
    vhost: &Arc<VHost>,
    policy: Policy,
    writes: DefinitionWrites<'_>,
) -> ApiResult<()> {
    vhost
        .set_policy(policy, writes)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

fn listed(vhosts: &[Arc<VHost>]) -> Vec<Value> {
    vhosts
        .iter()
        .flat_map(|v| {
            v.policies()
                .into_iter()
                .map(|p| policy_json(&v.name, &p))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `GET /api/policies`.
pub(crate) async fn list_all(user: Authed<MANAGEMENT>, State(api): State<Arc<Api>>) -> Json<Value> {
    let visible: Vec<Arc<VHost>> = api
        .vhosts()
        .into_iter()
        .filter(|v| user.sees(&v.name))
        .collect();
    Json(Value::Array(listed(&visible)))
}

/// `GET /api/policies/{vhost}`.
pub(crate) async fn list_vhost(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf(vhost): PathOf<String>,
) -> ApiResult<Json<Value>> {
    let vhost = api.vhost(&vhost)?;
    user.check_vhost(&vhost.name)?;
    Ok(Json(Value::Array(listed(&[vhost]))))
}

/// `GET /api/policies/{vhost}/{name}`.
pub(crate) async fn show(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<Json<Value>> {
    let vhost = api.vhost(&vhost)?;
    user.check_vhost(&vhost.name)?;
    let policy = vhost
        .policies()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(policy_json(&vhost.name, &policy)))
}

/// `PUT /api/policies/{vhost}/{name}`: 201 when created, 204 when replaced; answered once the
/// policy is on disk, as RabbitMQ answers after its metadata store. A failed write is a 500 and
/// takes the change back (the replaced policy, or none, is in effect again).
pub(crate) async fn put(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    JsonBody(body): JsonBody<PolicyBody>,
) -> ApiResult<StatusCode> {
    let vhost = api.vhost(&vhost)?;
    let existed = vhost.policies().iter().any(|p| p.name == name);
    let written = AwaitedWrites::new();
    set(&vhost, body.into_policy(&name)?, written.writes())?;
    written.committed().await.map_err(ApiError::not_stored)?;
    Ok(if existed {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    })
}

/// `DELETE /api/policies/{vhost}/{name}`: answered once the removal is on disk. A failed write
/// is a 500; the removal holds in memory and the store retries it until it is written (as a
/// user's deletion).
pub(crate) async fn delete(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
) -> ApiResult<StatusCode> {
    let vhost = api.vhost(&vhost)?;
    let written = AwaitedWrites::new();
    if vhost.clear_policy(&name, written.writes()) {
        written.committed().await.map_err(ApiError::not_stored)?;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found())
    }
}
