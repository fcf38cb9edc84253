//! What a listening address serves, so that an error naming a port says whose port it is.

use std::fmt;
use std::net::SocketAddr;

use tokio::net::TcpListener;

use super::StartError;

/// The job of a listener the broker binds at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ListenerRole {
    /// Plain AMQP (`BrokerConfig::listen`; RabbitMQ's port 5672).
    Amqp,
    /// AMQP over TLS (`TlsConfig::listen`; RabbitMQ's port 5671).
    AmqpTls,
    /// The HTTP management API, page and `/metrics` (`BrokerConfig::http`; RabbitMQ's
    /// management port 15672).
    Http,
    /// Prometheus `/metrics` on a listener of its own (`BrokerConfig::metrics`; RabbitMQ's
    /// port 15692).
    Metrics,
}

impl fmt::Display for ListenerRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ListenerRole::Amqp => "AMQP",
            ListenerRole::AmqpTls => "AMQP over TLS",
            ListenerRole::Http => "the HTTP management API",
            ListenerRole::Metrics => "Prometheus metrics",
        })
    }
}

/// Binds `addr` for `role`; the error names both.
pub(super) async fn bind(addr: SocketAddr, role: ListenerRole) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, role, source })
}
