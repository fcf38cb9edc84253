//! Fault injection for tests: the broker closes a connection or a channel with a chosen reply
//! code, nacks publisher confirms, holds deliveries to a queue back. The same faults are
//! reachable over HTTP (`/test/faults/...`).

use std::time::Duration;

use dwellmq_core::BrokerError;

use super::BrokerHandle;
use crate::broker::connections::ForcedClose;
use crate::broker::BrokerState;

/// A fault that could not be injected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FaultError {
    /// The reply code is not one of AMQP 0-9-1's error codes.
    #[error("reply code {0} is not an AMQP error code (320, 403-406, 501-506, 530, 540, 541)")]
    ReplyCode(u16),
    /// No open connection has that name.
    #[error("no open connection named '{0}'")]
    NoConnection(String),
    /// The queue does not exist.
    #[error("no queue '{queue}' in vhost '{vhost}'")]
    NoQueue {
        /// The vhost.
        vhost: String,
        /// The queue.
        queue: String,
    },
}

/// The error a forced close carries: its reply code, and `text` after the code's name, as
/// RabbitMQ words its own closes (`NOT_FOUND - ...`).
pub(crate) fn error_for(code: u16, text: &str) -> Result<BrokerError, FaultError> {
    let text = text.to_string();
    Ok(match code {
        320 => BrokerError::ConnectionForced(text),
        403 => BrokerError::AccessRefused(text),
        404 => BrokerError::NotFound(text),
        405 => BrokerError::ResourceLocked(text),
        406 => BrokerError::PreconditionFailed(text),
        501 => BrokerError::FrameError(text),
        502 => BrokerError::SyntaxError(text),
        503 => BrokerError::CommandInvalid(text),
        504 => BrokerError::ChannelError(text),
        505 => BrokerError::UnexpectedFrame(text),
        506 => BrokerError::ResourceError(text),
        530 => BrokerError::NotAllowed(text),
        540 => BrokerError::NotImplemented(text),
        541 => BrokerError::InternalError(text),
        other => return Err(FaultError::ReplyCode(other)),
    })
}

/// Asks the connections `name` selects to close themselves (`channel` `None`) or that channel:
/// `name` is the management API's connection name (`peer -> local`) or the name the client
/// gave (`connection_name`); `None` selects every connection. Returns how many were asked.
pub(crate) fn force_close(
    state: &BrokerState,
    name: Option<&str>,
    channel: Option<u16>,
    code: u16,
    text: &str,
) -> Result<usize, FaultError> {
    let error = error_for(code, text)?;
    let chosen: Vec<_> = state
        .connections
        .list()
        .into_iter()
        .filter(|c| name.is_none_or(|n| c.name == n || c.client_name().as_deref() == Some(n)))
        .collect();
    if chosen.is_empty() {
        if let Some(name) = name {
            return Err(FaultError::NoConnection(name.into()));
        }
    }
    for connection in &chosen {
        connection.force_close(ForcedClose {
            channel,
            error: error.clone(),
        });
    }
    Ok(chosen.len())
}

/// Sets (or with 0 removes) a delivery delay on a queue that exists.
pub(crate) fn delay_deliveries(
    state: &BrokerState,
    vhost: &str,
    queue: &str,
    delay_ms: u64,
) -> Result<(), FaultError> {
    let exists = state.vhost(vhost).is_some_and(|v| v.queue(queue).is_ok());
    if !exists && delay_ms > 0 {
        return Err(FaultError::NoQueue {
            vhost: vhost.into(),
            queue: queue.into(),
        });
    }
    state.hooks().delay_deliveries(vhost, queue, delay_ms);
    Ok(())
}

impl BrokerHandle {
    /// Closes the connection(s) `name` selects from the broker's side with `connection.close`
    /// carrying `code` and `text` (e.g. 320 for a forced close). `name` is the management
    /// API's connection name or the client's `connection_name`; `None` closes every
    /// connection. Returns how many were closed.
    pub fn close_connection(
        &self,
        name: Option<&str>,
        code: u16,
        text: &str,
    ) -> Result<usize, FaultError> {
        force_close(&self.state, name, None, code, text)
    }

    /// Closes channel `channel` of the connection(s) `name` selects with `channel.close`
    /// carrying `code` and `text` (e.g. 406); connections without that channel open are left
    /// alone.
    pub fn close_channel(
        &self,
        name: Option<&str>,
        channel: u16,
        code: u16,
        text: &str,
    ) -> Result<usize, FaultError> {
        force_close(&self.state, name, Some(channel), code, text)
    }

    /// Answers the next `n` publisher confirms (on any channel) with `basic.nack` instead of
    /// `basic.ack`; the messages are routed as usual. 0 cancels what is left.
    pub fn nack_next_confirms(&self, n: u64) {
        self.state.hooks().nack_next_confirms(n);
    }

    /// Holds every message published to `queue` from now on for `delay` of broker time before
    /// it enters the queue (so consumers see it that much later; a manual clock releases it
    /// with [`BrokerHandle::advance`]). A zero delay removes the fault.
    pub fn delay_deliveries(
        &self,
        vhost: &str,
        queue: &str,
        delay: Duration,
    ) -> Result<(), FaultError> {
        delay_deliveries(&self.state, vhost, queue, delay.as_millis() as u64)
    }
}
