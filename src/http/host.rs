//! Which `Host` the API listener answers to, so that DNS rebinding fails.
//!
//! A rebinding page lives at a name its owner controls (`evil.example`) and re-points that
//! name at this host once loaded; its scripts then reach the API as same-origin requests from
//! the operator's browser, on the operator's machine (where `guest` may log in), and read the
//! answers. The browser still sends the page's own name as `Host`, so refusing names this
//! listener was not given stops it. Allowed: `localhost` (browsers resolve it themselves),
//! any IP literal (there is no name to re-point: the origin is the address itself) and the
//! names configured in `BrokerConfig::http_allowed_hosts`. The port is not compared: a
//! rebinding page must use the listener's port anyway, and port mapping (containers, proxies)
//! legitimately changes it.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::HOST;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::Api;

/// The names a listener answers to besides `localhost` and IP literals.
#[derive(Debug, Clone, Default)]
pub(crate) struct AllowedHosts {
    names: Vec<String>,
}

impl AllowedHosts {
    pub(crate) fn new<'a>(configured: impl IntoIterator<Item = &'a String>) -> Self {
        AllowedHosts {
            names: configured.into_iter().map(|n| normalize(n)).collect(),
        }
    }

    /// Whether a `Host` value (`name`, `name:port`, `1.2.3.4:port`, `[::1]:port`) is one
    /// this listener answers to.
    pub(crate) fn allows(&self, host: &str) -> bool {
        let Some(name) = host_name(host) else {
            return false;
        };
        if name.parse::<IpAddr>().is_ok() {
            return true;
        }
        let name = normalize(name);
        name == "localhost" || self.names.contains(&name)
    }
}

/// Lower case, without the root's trailing dot (`Localhost.` is `localhost`).
fn normalize(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// The name part of a `Host` value: an IPv6 literal without its brackets, anything else
/// without its port. `None` when malformed.
fn host_name(host: &str) -> Option<&str> {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        let (literal, after) = rest.split_once(']')?;
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(is_port);
        return port_ok.then_some(literal);
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if is_port(port) => name,
        Some(_) => return None,
        None => host,
    };
    (!name.is_empty() && !name.contains(':')).then_some(name)
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// Refuses (403) a request whose `Host` (or HTTP/2 authority) names something this listener
/// does not answer to. A request without any (HTTP/1.0) passes: browsers always send one,
/// so it cannot come from a rebinding page.
pub(crate) async fn check_host(
    State(api): State<Arc<Api>>,
    request: Request,
    next: Next,
) -> Response {
    let authority = request.uri().authority().map(|a| a.host().to_owned());
    let headers = request.headers().get_all(HOST).iter();
    let mut named = authority
        .into_iter()
        .chain(headers.map(|value| value.to_str().map(str::to_owned).unwrap_or_default()));
    if let Some(refused) = named.find(|host| !api.hosts.allows(host)) {
        tracing::debug!(host = %refused, "HTTP request for a host this listener does not serve");
        return ApiError::foreign_host(&refused).into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> AllowedHosts {
        AllowedHosts::new(&["Broker.Internal".to_string()])
    }

    #[test]
    fn localhost_ip_literals_and_configured_names_pass() {
        let hosts = allowed();
        for host in [
            "localhost",
            "LOCALHOST:15672",
            "localhost.:1",
            "127.0.0.1",
            "127.0.0.1:15672",
            "10.1.2.3:8080",
            "[::1]:15672",
            "[::1]",
            "[fe80::1]:80",
            "broker.internal",
            "broker.internal.:15672",
            "BROKER.INTERNAL:9",
        ] {
            assert!(hosts.allows(host), "{host}");
        }
    }

    #[test]
    fn other_names_and_malformed_values_are_refused() {
        let hosts = allowed();
        for host in [
            "evil.example",
            "evil.example:15672",
            "localhost.evil.example",
            "broker.internal.evil.example",
            "sub.broker.internal",
            "127.0.0.1.nip.io",
            "0x7f.1",
            "",
            ":15672",
            "localhost:port",
            "[::1",
            "[::1]x",
            "::1",
        ] {
            assert!(!hosts.allows(host), "{host}");
        }
    }
}
