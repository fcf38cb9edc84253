//! Users and permissions: `GET/PUT/DELETE /api/users[/{name}]`, `/api/users/{name}/permissions`,
//! `GET /api/permissions`, `GET/PUT/DELETE /api/permissions/{vhost}/{user}` and
//! `/api/vhosts/{vhost}/permissions`, with RabbitMQ's fields and status codes (administrators
//! only). The same shapes serve definitions import and export.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, ADMINISTRATOR};
use super::error::{ApiError, ApiResult};
use super::extract::{JsonBody, PathOf};
use super::Api;
use crate::broker::access::password::{HashingAlgorithm, PasswordHash};
use crate::broker::access::{Permission, User};

/// A user as RabbitMQ 3.13 shows it (tags as a list).
pub(crate) fn user_json(user: &User) -> Value {
    json!({
        "name": user.name,
        "password_hash": user.password.encode(),
        "hashing_algorithm": user.password.algorithm().name(),
        "tags": user.tags,
        "limits": {},
    })
}

/// A permission as RabbitMQ shows it.
pub(crate) fn permission_json(vhost: &str, user: &str, p: &Permission) -> Value {
    json!({
        "user": user,
        "vhost": vhost,
        "configure": p.configure.as_str(),
        "write": p.write.as_str(),
        "read": p.read.as_str(),
    })
}

/// Tags as RabbitMQ takes them: a comma-separated string (the API's form, and definitions
/// before 3.9) or a list (definitions since).
#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum Tags {
    Text(String),
    List(Vec<String>),
}

impl Tags {
    fn into_list(self) -> Vec<String> {
        match self {
            Tags::Text(text) => text
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect(),
            Tags::List(list) => list,
        }
    }
}

/// The body of `PUT /api/users/{name}`, and a user in definitions.
#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct UserBody {
    password: Option<String>,
    password_hash: Option<String>,
    hashing_algorithm: Option<String>,
    tags: Option<Tags>,
    /// Before tags, RabbitMQ took `administrator: true`; it still does when `tags` is absent.
    administrator: Option<Value>,
}

impl UserBody {
    /// The user it describes. Neither `password` nor `password_hash`: a user who cannot log
    /// in with a password, as in RabbitMQ.
    pub(crate) fn into_user(self, name: &str, previous: Option<&User>) -> ApiResult<User> {
        // As RabbitMQ: tags (or the old `administrator` flag) are required.
        let tags = match (self.tags, &self.administrator) {
            (Some(tags), _) => tags.into_list(),
            (None, Some(flag)) if is_true(flag) => vec!["administrator".to_string()],
            (None, Some(_)) => Vec::new(),
            (None, None) => return Err(ApiError::bad_request("tags_not_present")),
        };
        let algorithm = match &self.hashing_algorithm {
            Some(name) => HashingAlgorithm::parse(name),
            None => Ok(HashingAlgorithm::Sha256),
        }
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
        let password = match (self.password, self.password_hash) {
            (Some(_), Some(_)) => {
                return Err(ApiError::bad_request(
                    "both_password_and_password_hash_are_provided",
                ))
            }
            (Some(password), None) => PasswordHash::new(algorithm, &password),
            (None, Some(hash)) => PasswordHash::decode(algorithm, &hash),
            (None, None) => Ok(PasswordHash::none()),
        }
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
        if name.is_empty() {
            return Err(ApiError::bad_request("a user needs a name"));
        }
        Ok(User {
            name: name.to_string(),
            password,
            tags,
            // RabbitMQ's loopback_users is `guest` by default; a user redefined keeps its rule.
            loopback_only: previous.map_or(name == "guest", |u| u.loopback_only),
        })
    }
}

/// `true` or `"true"`, as RabbitMQ's `parse_bool` reads a flag.
fn is_true(value: &Value) -> bool {
    value.as_bool() == Some(true) || value.as_str() == Some("true")
}

/// The body of `PUT /api/permissions/{vhost}/{user}`, and a permission in definitions.
#[derive(Deserialize)]
pub(crate) struct PermissionBody {
    configure: String,
    write: String,
    read: String,
}

impl PermissionBody {
    pub(crate) fn into_permission(self) -> ApiResult<Permission> {
        Permission::new(&self.configure, &self.write, &self.read)
            .map_err(|e| ApiError::bad_request(e.to_string()))
    }
}

/// `GET /api/users`.
pub(crate) async fn list(_user: Authed<ADMINISTRATOR>, State(api): State<Arc<Api>>) -> Json<Value> {
    Json(
        api.state
            .access
            .users()
            .iter()
            .map(|u| user_json(u))
            .collect(),
    )
}

/// `GET /api/users/{name}`.
pub(crate) async fn show(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<Json<Value>> {
    let user = api
        .state
        .access
        .user(&name)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(user_json(&user)))
}

/// `PUT /api/users/{name}`: 201 created, 204 updated.
pub(crate) async fn put(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
    JsonBody(body): JsonBody<UserBody>,
) -> ApiResult<StatusCode> {
    let previous = api.state.access.user(&name);
    let user = body.into_user(&name, previous.as_deref())?;
    let (created, stored) = api.state.access.put_user(user);
    // Answered once the change is on disk, as RabbitMQ answers after its metadata store.
    stored.committed().await.map_err(ApiError::not_stored)?;
    Ok(if created {
        tracing::info!(user = %name, "user created over HTTP");
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    })
}

/// `DELETE /api/users/{name}`: the user and its permissions.
pub(crate) async fn delete(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<StatusCode> {
    let (existed, stored) = api.state.access.delete_user(&name);
    stored.committed().await.map_err(ApiError::not_stored)?;
    if existed {
        tracing::info!(user = %name, "user deleted over HTTP");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found())
    }
}

/// Every permission, as RabbitMQ lists them.
pub(crate) fn permission_list(api: &Api) -> Vec<Value> {
    api.state
        .access
        .permissions()
        .iter()
        .map(|(vhost, user, p)| permission_json(vhost, user, p))
        .collect()
}

/// `GET /api/permissions`.
pub(crate) async fn permissions(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
) -> Json<Value> {
    Json(Value::Array(permission_list(&api)))
}

/// `GET /api/users/{name}/permissions`.
pub(crate) async fn permissions_of_user(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(name): PathOf<String>,
) -> ApiResult<Json<Value>> {
    api.state
        .access
        .user(&name)
        .ok_or_else(ApiError::not_found)?;
    let list = api.state.access.permissions();
    Ok(Json(
        list.iter()
            .filter(|(_, user, _)| *user == name)
            .map(|(vhost, user, p)| permission_json(vhost, user, p))
            .collect(),
    ))
}

/// `GET /api/vhosts/{vhost}/permissions`.
pub(crate) async fn permissions_of_vhost(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf(vhost): PathOf<String>,
) -> ApiResult<Json<Value>> {
    api.vhost(&vhost)?;
    let list = api.state.access.permissions();
    Ok(Json(
        list.iter()
            .filter(|(v, _, _)| *v == vhost)
            .map(|(vhost, user, p)| permission_json(vhost, user, p))
            .collect(),
    ))
}

/// `GET /api/permissions/{vhost}/{user}`.
pub(crate) async fn show_permission(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, user)): PathOf<(String, String)>,
) -> ApiResult<Json<Value>> {
    let p = api
        .state
        .access
        .permission(&vhost, &user)
        .ok_or_else(ApiError::not_found)?;
    Ok(Json(permission_json(&vhost, &user, &p)))
}

/// `PUT /api/permissions/{vhost}/{user}`: 201 created, 204 updated; an unknown user or vhost
/// is RabbitMQ's 400 `vhost_or_user_not_found`.
pub(crate) async fn put_permission(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, user)): PathOf<(String, String)>,
    JsonBody(body): JsonBody<PermissionBody>,
) -> ApiResult<StatusCode> {
    if api.state.vhost(&vhost).is_none() || api.state.access.user(&user).is_none() {
        return Err(ApiError::bad_request("vhost_or_user_not_found"));
    }
    let permission = body.into_permission()?;
    let (created, stored) = api.state.access.set_permission(&vhost, &user, permission);
    stored.committed().await.map_err(ApiError::not_stored)?;
    Ok(if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    })
}

/// `DELETE /api/permissions/{vhost}/{user}`.
pub(crate) async fn delete_permission(
    _user: Authed<ADMINISTRATOR>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, user)): PathOf<(String, String)>,
) -> ApiResult<StatusCode> {
    let (existed, stored) = api.state.access.clear_permission(&vhost, &user);
    stored.committed().await.map_err(ApiError::not_stored)?;
    if existed {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_come_as_text_or_list() {
        let text: Tags = serde_json::from_str("\"administrator, monitoring,\"").unwrap();
        assert_eq!(text.into_list(), ["administrator", "monitoring"]);
        let list: Tags = serde_json::from_str("[\"management\"]").unwrap();
        assert_eq!(list.into_list(), ["management"]);
        let empty: Tags = serde_json::from_str("\"\"").unwrap();
        assert!(empty.into_list().is_empty());
    }
}
