//! HTTP basic auth against the broker's users (their stored password hashes), RabbitMQ's user
//! tags, and the vhost and resource permissions the API's operations are checked against.
//!
//! Tags nest as in RabbitMQ: `administrator` can do everything `monitoring` can, which can do
//! everything `management` can. `policymaker` is accepted as management-level (changing
//! policies takes an administrator here). A user without any of these tags cannot use the API.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::{AUTHORIZATION, ORIGIN, USER_AGENT};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use base64::Engine;

use super::error::{ApiError, ApiResult};
use super::listener::Peer;
use super::Api;
use crate::broker::access::{refused_text, Operation, ResourceKind, User};
use crate::broker::BrokerState;

/// What an endpoint needs: a user with at least this tag.
pub(crate) const MANAGEMENT: u8 = 1;
pub(crate) const MONITORING: u8 = 2;
pub(crate) const ADMINISTRATOR: u8 = 3;

/// The highest level the user's tags grant (0: none, AMQP only).
fn level(user: &User) -> u8 {
    user.tags
        .iter()
        .map(|tag| match tag.as_str() {
            "administrator" => ADMINISTRATOR,
            "monitoring" => MONITORING,
            "management" | "policymaker" => MANAGEMENT,
            _ => 0,
        })
        .max()
        .unwrap_or(0)
}

fn need_text(need: u8) -> &'static str {
    match need {
        ADMINISTRATOR => "Not administrator user",
        MONITORING => "Not monitor user",
        _ => "Not management user",
    }
}

/// An authenticated user whose tags allow level `NEED`.
pub(crate) struct Authed<const NEED: u8> {
    pub(crate) user: Arc<User>,
    state: Arc<BrokerState>,
}

impl<const NEED: u8> Authed<NEED> {
    /// Monitoring users and administrators see every vhost; others the ones they may open.
    pub(crate) fn sees(&self, vhost: &str) -> bool {
        self.sees_everything() || self.may_open(vhost)
    }

    /// Monitoring users and administrators see every vhost and connection.
    pub(crate) fn sees_everything(&self) -> bool {
        level(&self.user) >= MONITORING
    }

    /// Whether the user has permissions in `vhost` (RabbitMQ's vhost access).
    fn may_open(&self, vhost: &str) -> bool {
        self.state.access.may_open(&self.user.name, vhost)
    }

    /// Checks a resource permission as the AMQP side does (configure to declare or delete,
    /// write to publish or bind to, read to get, purge or bind from). Refused: 401
    /// `not_authorised` with the AMQP refusal as the reason, as RabbitMQ's management API
    /// answers an operation its channel was refused.
    pub(crate) fn permit(
        &self,
        vhost: &str,
        operation: Operation,
        kind: ResourceKind,
        name: &str,
    ) -> ApiResult<()> {
        let allowed = self
            .state
            .access
            .permission(vhost, &self.user.name)
            .is_some_and(|p| p.allows(operation, kind, name));
        if allowed {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "ACCESS_REFUSED - {}",
                refused_text(kind, name, vhost, &self.user.name)
            )))
        }
    }

    pub(crate) fn is_administrator(&self) -> bool {
        level(&self.user) >= ADMINISTRATOR
    }

    /// Refuses (as RabbitMQ: 401 `not_authorised`) a vhost the user may not open.
    pub(crate) fn check_vhost(&self, vhost: &str) -> ApiResult<()> {
        if self.may_open(vhost) {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "User not authorised to access virtual host",
            ))
        }
    }
}

impl<const NEED: u8> FromRequestParts<Arc<Api>> for Authed<NEED> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &Arc<Api>) -> ApiResult<Self> {
        let challenge = challenges(&parts.headers);
        let (name, password) = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_basic)
            .ok_or_else(|| ApiError::unauthenticated("Not_Authorized", challenge))?;
        let user = api
            .state
            .user(&name)
            .filter(|u| u.check_password(&password))
            .ok_or_else(|| ApiError::unauthenticated("Login failed", challenge))?;
        if user.loopback_only {
            let peer = parts.extensions.get::<ConnectInfo<Peer>>();
            if !peer.is_some_and(|ConnectInfo(Peer(addr))| is_loopback(addr)) {
                // RabbitMQ's words and error (`not_authorised`), naming no user.
                return Err(ApiError::forbidden("User can only log in via localhost"));
            }
        }
        if level(&user) < NEED {
            return Err(ApiError::forbidden(need_text(NEED)));
        }
        Ok(Authed {
            user,
            state: Arc::clone(&api.state),
        })
    }
}

/// Whether a 401 asks for basic credentials (`WWW-Authenticate: Basic`). Tools that wait to
/// be asked (wget, urllib's auth handler) need it; a browser must never get it: it would
/// prompt, then cache the credentials for the origin and attach them to requests any other
/// site makes to it. The page logs in with a form and sends them from script instead. A
/// browser shows itself by its fetch metadata (`Sec-Fetch-*`, sent to loopback and HTTPS
/// origins), an `Origin`, or a `User-Agent` starting `Mozilla/` (every browser's, over plain
/// HTTP too).
fn challenges(headers: &HeaderMap) -> bool {
    let browser_metadata = headers
        .keys()
        .any(|name| name.as_str().starts_with("sec-fetch-") || *name == ORIGIN);
    let browser_agent = headers
        .get(USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|agent| agent.starts_with("Mozilla/"));
    !(browser_metadata || browser_agent)
}

/// Whether a peer is on this host (an IPv4 loopback may arrive IPv6-mapped).
fn is_loopback(addr: &SocketAddr) -> bool {
    match addr {
        SocketAddr::V4(a) => a.ip().is_loopback(),
        SocketAddr::V6(a) => {
            a.ip().is_loopback() || a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// `Basic <base64(name:password)>` → (name, password).
fn parse_basic(header: &str) -> Option<(String, String)> {
    let (scheme, encoded) = header.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (name, password) = text.split_once(':')?;
    Some((name.to_string(), password.to_string()))
}

/// The tags a user reports in `whoami` and `users`.
pub(crate) fn tags(user: &User) -> Vec<&str> {
    user.tags.iter().map(String::as_str).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_parse() {
        // "guest:gu:est" — a password may contain ':'.
        assert_eq!(
            parse_basic("Basic Z3Vlc3Q6Z3U6ZXN0"),
            Some(("guest".into(), "gu:est".into()))
        );
        assert_eq!(parse_basic("Bearer Z3Vlc3Q6Z3Vlc3Q="), None);
        assert_eq!(parse_basic("Basic !!!"), None);
        assert_eq!(parse_basic("Basic"), None);
    }

    #[test]
    fn tags_nest() {
        let config = crate::config::BrokerConfig::ephemeral();
        let access = crate::broker::access::Access::from_config(&config).unwrap();
        let mut user = (*access.user("guest").unwrap()).clone();
        assert_eq!(level(&user), ADMINISTRATOR);
        user.tags = vec!["monitoring".into(), "other".into()];
        assert_eq!(level(&user), MONITORING);
        user.tags = vec![];
        assert_eq!(level(&user), 0);
    }

    #[test]
    fn browsers_are_never_challenged() {
        let with = |name: &'static str, value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(name, axum::http::HeaderValue::from_static(value));
            challenges(&headers)
        };
        assert!(challenges(&HeaderMap::new()));
        assert!(with("user-agent", "curl/8.5.0"));
        assert!(with("user-agent", "Wget/1.21.3"));
        assert!(with("user-agent", "Python-urllib/3.12"));
        assert!(!with(
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) Chrome/126.0"
        ));
        assert!(!with("sec-fetch-mode", "cors"));
        assert!(!with("origin", "http://127.0.0.1:15672"));
    }

    #[test]
    fn mapped_loopback_is_loopback() {
        assert!(is_loopback(&"[::ffff:127.0.0.1]:1".parse().unwrap()));
        assert!(is_loopback(&"[::1]:1".parse().unwrap()));
        assert!(!is_loopback(&"10.0.0.1:1".parse().unwrap()));
    }
}
