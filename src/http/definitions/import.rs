//! Importing definitions (`POST /api/definitions[/{vhost}]`, `--definitions FILE`): every
//! object's vhost found and every object checked first, then users, permissions, policies,
//! exchanges, queues and bindings applied in that order.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use dwellmq_core::policy::Policy;
use dwellmq_core::routing::{Binding, Destination};
use serde::Deserialize;
use serde_json::Value;

use super::exported_exchange;
use crate::broker::access::{Permission, Stored, User};
use crate::broker::exchange::DeclaredBy;
use crate::broker::persist::DefinitionWrites;
use crate::broker::vhost::VHost;
use crate::broker::BrokerState;
use crate::http::auth::{Authed, ADMINISTRATOR};
use crate::http::error::{ApiError, ApiResult};
use crate::http::exchanges::{declare_exchange, ExchangeBody};
use crate::http::extract::{JsonBody, PathOf};
use crate::http::fields::{json_to_table, short};
use crate::http::policies::{set as set_policy, PolicyBody};
use crate::http::queues::{declare_queue, QueueBody};
use crate::http::resource::committed;
use crate::http::users::{PermissionBody, UserBody};
use crate::http::Api;

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

/// Applies `defs` to the broker on behalf of `acting` (who declares the exchanges, as
/// RabbitMQ's acting user). `scope` is the vhost of a per-vhost import (whose objects carry no
/// `vhost`); otherwise each object names its vhost. Vhosts, exchanges, queues, bindings and
/// policies report their writes to `writes`; the returned [`Stored`] are the writes of users
/// and permissions.
fn import(
    state: &BrokerState,
    defs: Definitions,
    scope: Option<&str>,
    acting: &DeclaredBy,
    writes: DefinitionWrites<'_>,
) -> ApiResult<Vec<Stored>> {
    let scope = Scope {
        state,
        vhost: scope,
    };
    scope.check_vhosts_known(&defs)?;
    if scope.vhost.is_none() {
        for v in &defs.vhosts {
            state.add_vhost(&v.name, writes);
        }
    }
    let plan = Plan::resolve(&scope, defs)?;
    plan.apply(state, acting, writes)
}

/// Where an import's objects live: the one vhost of a per-vhost import, or each object's own.
struct Scope<'a> {
    state: &'a BrokerState,
    vhost: Option<&'a str>,
}

impl Scope<'_> {
    /// The file's vhosts are created first, as RabbitMQ does; an object naming a vhost that
    /// neither exists nor is in the file is refused before anything is created.
    fn check_vhosts_known(&self, defs: &Definitions) -> ApiResult<()> {
        let named = defs
            .exchanges
            .iter()
            .map(|x| &x.vhost)
            .chain(defs.queues.iter().map(|q| &q.vhost))
            .chain(defs.bindings.iter().map(|b| &b.vhost))
            .chain(defs.policies.iter().map(|p| &p.vhost));
        for name in named.filter_map(|n| self.vhost.or(n.as_deref())) {
            if self.state.vhost(name).is_none() && !defs.vhosts.iter().any(|v| v.name == name) {
                return Err(ApiError::bad_request(format!(
                    "vhost '{name}' does not exist and the file does not define it"
                )));
            }
        }
        Ok(())
    }

    /// The vhost of an object that names `named` (or none).
    fn vhost_of(&self, named: &Option<String>) -> ApiResult<Arc<VHost>> {
        let name = self.vhost.or(named.as_deref()).ok_or_else(|| {
            ApiError::bad_request("every exchange, queue and binding must name its vhost")
        })?;
        self.state
            .vhost(name)
            .ok_or_else(|| ApiError::bad_request(format!("vhost '{name}' does not exist")))
    }

    /// Each object with its vhost.
    fn placed<T>(
        &self,
        objects: Vec<T>,
        named: impl Fn(&T) -> &Option<String>,
    ) -> ApiResult<Vec<(Arc<VHost>, T)>> {
        objects
            .into_iter()
            .map(|object| Ok((self.vhost_of(named(&object))?, object)))
            .collect()
    }
}

/// A permission to set: (vhost, user, permission).
type VhostPermission = (String, String, Permission);

/// An import checked and not yet applied.
struct Plan {
    users: Vec<User>,
    permissions: Vec<VhostPermission>,
    policies: Vec<(Arc<VHost>, Policy)>,
    exchanges: Vec<(Arc<VHost>, ExchangeDef)>,
    queues: Vec<(Arc<VHost>, QueueDef)>,
    bindings: Vec<(Arc<VHost>, BindingDef)>,
}

impl Plan {
    fn resolve(scope: &Scope<'_>, defs: Definitions) -> ApiResult<Plan> {
        let exchanges = scope.placed(defs.exchanges, |x| &x.vhost)?;
        let queues = scope.placed(defs.queues, |q| &q.vhost)?;
        let bindings = scope.placed(defs.bindings, |b| &b.vhost)?;
        let policies = defs
            .policies
            .into_iter()
            .map(|p| {
                let vhost = scope.vhost_of(&p.vhost)?;
                Ok((vhost, p.body.into_policy(&p.name)?))
            })
            .collect::<ApiResult<Vec<_>>>()?;
        // Users and permissions belong to a whole-broker import, as in RabbitMQ.
        let (users, permissions) = match scope.vhost {
            None => users_and_permissions(scope.state, defs.users, defs.permissions)?,
            Some(_) => (Vec::new(), Vec::new()),
        };
        if !defs.topic_permissions.is_empty() {
            tracing::warn!(
                count = defs.topic_permissions.len(),
                "definitions import: topic permissions are not supported and were not applied"
            );
        }
        Ok(Plan {
            users,
            permissions,
            policies,
            exchanges,
            queues,
            bindings,
        })
    }

    fn apply(
        self,
        state: &BrokerState,
        acting: &DeclaredBy,
        writes: DefinitionWrites<'_>,
    ) -> ApiResult<Vec<Stored>> {
        let mut stored = Vec::new();
        for user in self.users {
            stored.push(state.access.put_user(user).1);
        }
        for (vhost, user, permission) in self.permissions {
            stored.push(state.access.set_permission(&vhost, &user, permission).1);
        }
        for (vhost, policy) in self.policies {
            set_policy(&vhost, policy, writes)?;
        }
        for (vhost, x) in self.exchanges {
            if exported_exchange(&x.name) {
                declare_exchange(&vhost, &x.name, x.body, acting.clone(), writes)?;
            }
        }
        for (vhost, q) in self.queues {
            declare_queue(&vhost, &q.name, q.body, writes)?;
        }
        for (vhost, b) in self.bindings {
            vhost.bind_reporting(b.into_binding()?, writes)?;
        }
        Ok(stored)
    }
}

/// The users and permissions of a whole-broker import; a permission must name a user (of the
/// file or existing) and an existing vhost.
fn users_and_permissions(
    state: &BrokerState,
    users: Vec<UserDef>,
    permissions: Vec<PermissionDef>,
) -> ApiResult<(Vec<User>, Vec<VhostPermission>)> {
    let access = &state.access;
    let users = users
        .into_iter()
        .map(|u| {
            let previous = access.user(&u.name);
            u.body.into_user(&u.name, previous.as_deref())
        })
        .collect::<ApiResult<Vec<_>>>()?;
    let permissions = permissions
        .into_iter()
        .map(|p| {
            let known = users.iter().any(|u| u.name == p.user) || access.user(&p.user).is_some();
            if !known || state.vhost(&p.vhost).is_none() {
                return Err(ApiError::bad_request(format!(
                    "permissions of user '{}' in vhost '{}': vhost_or_user_not_found",
                    p.user, p.vhost
                )));
            }
            Ok((p.vhost, p.user, p.body.into_permission()?))
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok((users, permissions))
}

impl BindingDef {
    fn into_binding(self) -> ApiResult<Binding> {
        let destination = match self.destination_type.as_str() {
            "queue" => Destination::Queue(short(&self.destination, "queue name")?),
            "exchange" => Destination::Exchange(short(&self.destination, "exchange name")?),
            other => {
                return Err(ApiError::bad_request(format!(
                    "destination_type must be queue or exchange, not '{other}'"
                )))
            }
        };
        Ok(Binding {
            source: short(&self.source, "exchange name")?,
            destination,
            routing_key: short(&self.routing_key, "routing key")?,
            arguments: json_to_table(self.arguments.as_ref())?,
        })
    }
}

/// Imports `defs` and answers once everything it wrote is on disk, as RabbitMQ answers after
/// its metadata store.
async fn import_committed(
    state: &BrokerState,
    defs: Definitions,
    scope: Option<&str>,
    acting: &DeclaredBy,
) -> ApiResult<()> {
    let stored = committed(|writes| import(state, defs, scope, acting, writes)).await?;
    for change in stored {
        change.committed().await.map_err(ApiError::not_stored)?;
    }
    Ok(())
}

/// `POST /api/definitions`: 204 once applied.
pub(crate) async fn import_all(
    user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    JsonBody(defs): JsonBody<Definitions>,
) -> ApiResult<StatusCode> {
    let acting = DeclaredBy::user(&user.user.name);
    import_committed(&api.state, defs, None, &acting).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /api/definitions/{vhost}`: 204 once applied.
pub(crate) async fn import_vhost(
    user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(vhost): PathOf<String>,
    JsonBody(defs): JsonBody<Definitions>,
) -> ApiResult<StatusCode> {
    api.vhost(&vhost)?;
    let acting = DeclaredBy::user(&user.user.name);
    import_committed(&api.state, defs, Some(&vhost), &acting).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Reads and applies a definitions file at start (`--definitions FILE`).
pub(crate) fn import_file(state: &BrokerState, path: &std::path::Path) -> Result<(), String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let defs: Definitions = serde_json::from_slice(&text)
        .map_err(|e| format!("{}: not a definitions file: {e}", path.display()))?;
    // At start (or a test double's reset) nobody waits: everything is on disk with the next
    // commit. The broker itself declares, as RabbitMQ's import at boot does.
    import(
        state,
        defs,
        None,
        &DeclaredBy::Broker,
        DefinitionWrites::UNAWAITED,
    )
    .map(drop)
    .map_err(|e| format!("{}: {}", path.display(), e.reason()))
}
