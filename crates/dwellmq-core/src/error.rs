//! Broker errors: each variant is an AMQP reply code, with RabbitMQ's wording in the text.

use dwellmq_codec::reply_code;

/// An error the broker reports to a peer with `channel.close` or `connection.close`.
///
/// The text is the part after RabbitMQ's `CODE_NAME - ` prefix, e.g. for
/// `NOT_FOUND - no queue 'q' in vhost '/'` the variant is `NotFound("no queue 'q' in vhost '/'")`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// 403: the user may not do this, or a reserved name was used.
    #[error("ACCESS_REFUSED - {0}")]
    AccessRefused(String),
    /// 404: an exchange or queue does not exist.
    #[error("NOT_FOUND - {0}")]
    NotFound(String),
    /// 405: an exclusive queue of another connection, or an exclusive consumer.
    #[error("RESOURCE_LOCKED - {0}")]
    ResourceLocked(String),
    /// 406: inequivalent redeclare, bad argument, unknown delivery tag, ...
    #[error("PRECONDITION_FAILED - {0}")]
    PreconditionFailed(String),
    /// 320: the broker closes the connection (shutdown, operator action).
    #[error("CONNECTION_FORCED - {0}")]
    ConnectionForced(String),
    /// 501: bad framing.
    #[error("FRAME_ERROR - {0}")]
    FrameError(String),
    /// 502: malformed method arguments.
    #[error("SYNTAX_ERROR - {0}")]
    SyntaxError(String),
    /// 503: a method not valid here.
    #[error("COMMAND_INVALID - {0}")]
    CommandInvalid(String),
    /// 504: a channel used wrongly (not open, already open, over channel-max).
    #[error("CHANNEL_ERROR - {0}")]
    ChannelError(String),
    /// 505: a frame out of sequence.
    #[error("UNEXPECTED_FRAME - {0}")]
    UnexpectedFrame(String),
    /// 506: a resource limit was hit.
    #[error("RESOURCE_ERROR - {0}")]
    ResourceError(String),
    /// 530: connection-level refusal (vhost access, ...).
    #[error("NOT_ALLOWED - {0}")]
    NotAllowed(String),
    /// 540: a feature dwellmq does not implement (e.g. `immediate`).
    #[error("NOT_IMPLEMENTED - {0}")]
    NotImplemented(String),
    /// 541: a broker fault.
    #[error("INTERNAL_ERROR - {0}")]
    InternalError(String),
}

impl BrokerError {
    /// The AMQP reply code.
    pub fn reply_code(&self) -> u16 {
        match self {
            BrokerError::AccessRefused(_) => reply_code::ACCESS_REFUSED,
            BrokerError::NotFound(_) => reply_code::NOT_FOUND,
            BrokerError::ResourceLocked(_) => reply_code::RESOURCE_LOCKED,
            BrokerError::PreconditionFailed(_) => reply_code::PRECONDITION_FAILED,
            BrokerError::ConnectionForced(_) => reply_code::CONNECTION_FORCED,
            BrokerError::FrameError(_) => reply_code::FRAME_ERROR,
            BrokerError::SyntaxError(_) => reply_code::SYNTAX_ERROR,
            BrokerError::CommandInvalid(_) => reply_code::COMMAND_INVALID,
            BrokerError::ChannelError(_) => reply_code::CHANNEL_ERROR,
            BrokerError::UnexpectedFrame(_) => reply_code::UNEXPECTED_FRAME,
            BrokerError::ResourceError(_) => reply_code::RESOURCE_ERROR,
            BrokerError::NotAllowed(_) => reply_code::NOT_ALLOWED,
            BrokerError::NotImplemented(_) => reply_code::NOT_IMPLEMENTED,
            BrokerError::InternalError(_) => reply_code::INTERNAL_ERROR,
        }
    }

    /// The full reply text as RabbitMQ writes it, e.g. `NOT_FOUND - no queue 'q' in vhost '/'`.
    ///
    /// A reply text is a short string: like RabbitMQ, a text over 255 octets keeps its first
    /// 252 octets (at a character boundary) followed by `...`.
    pub fn reply_text(&self) -> String {
        let mut text = self.to_string();
        if text.len() > 255 {
            let mut end = 252;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str("...");
        }
        text
    }

    /// Whether the error closes the connection rather than just the channel.
    pub fn is_connection_error(&self) -> bool {
        reply_code::is_hard_error(self.reply_code())
    }
}

/// Shorthand for results carrying a [`BrokerError`].
pub type BrokerResult<T> = Result<T, BrokerError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_reply_texts_are_cut_like_rabbitmq() {
        let text = BrokerError::NotFound(format!("no queue '{}' in vhost '/'", "q".repeat(300)))
            .reply_text();
        assert_eq!(text.len(), 255);
        assert!(text.starts_with("NOT_FOUND - no queue 'qqq"));
        assert!(text.ends_with("qq..."));
    }

    #[test]
    fn hard_and_soft_errors() {
        assert!(!BrokerError::NotFound(String::new()).is_connection_error());
        assert!(BrokerError::CommandInvalid(String::new()).is_connection_error());
        assert_eq!(BrokerError::ResourceLocked(String::new()).reply_code(), 405);
    }
}
