//! Policies over HTTP, as RabbitMQ's management API has them: `GET /api/policies[/{vhost}]`,
//! `GET`/`PUT`/`DELETE /api/policies/{vhost}/{name}`, and their JSON in definitions.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use dwellmq_core::policy::{ApplyTo, Policy, PolicyDefinition, PolicyValue};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::auth::{Authed, ADMINISTRATOR};
use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathOf};
use super::resource::{committed, created_status, Deletable, Listed, Named, NoQuery};
use super::Api;
use crate::broker::persist::DefinitionWrites;
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

/// `/api/policies`: listed, shown and deleted as `resource` does it.
pub(crate) struct Policies;

impl Listed for Policies {
    fn list(_api: &Api, vhost: &VHost) -> Vec<Value> {
        vhost
            .policies()
            .iter()
            .map(|p| policy_json(&vhost.name, p))
            .collect()
    }
}

impl Named for Policies {
    fn show(_api: &Api, vhost: &VHost, name: &str) -> Option<Value> {
        let policy = vhost.policies().into_iter().find(|p| p.name == name)?;
        Some(policy_json(&vhost.name, &policy))
    }
}

/// Deleting takes an administrator, and nothing more. A failed write is a 500; the removal
/// holds in memory and the store retries it until it is written (as a user's deletion).
impl Deletable for Policies {
    type Query = NoQuery;

    fn permit_delete<const N: u8>(_user: &Authed<N>, _vhost: &VHost, _name: &str) -> ApiResult<()> {
        Ok(())
    }

    fn delete(
        vhost: &Arc<VHost>,
        name: &str,
        _query: NoQuery,
        writes: DefinitionWrites<'_>,
    ) -> ApiResult<()> {
        if vhost.clear_policy(name, writes) {
            Ok(())
        } else {
            Err(ApiError::not_found())
        }
    }
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
    let policy = body.into_policy(&name)?;
    committed(|writes| set(&vhost, policy, writes)).await?;
    Ok(created_status(!existed))
}
