//! Decoding errors, each mapped to the AMQP reply code the server closes the connection with.

use crate::constants::reply_code;

/// Why a byte sequence is not valid AMQP 0-9-1.
///
/// Every variant is a connection-level ("hard") error in AMQP terms; [`CodecError::reply_code`]
/// gives the code for `connection.close`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The frame type octet is not method, header, body or heartbeat.
    #[error("unknown frame type {0}")]
    UnknownFrameType(u8),
    /// The octet after the payload is not 0xCE.
    #[error("frame end octet was {0:#04x}, expected 0xce")]
    BadFrameEnd(u8),
    /// The size field announces a frame larger than the negotiated frame-max.
    #[error("frame size {size} exceeds frame-max {frame_max}")]
    FrameTooLarge {
        /// The payload size the peer announced, plus the 8 octets of framing.
        size: u64,
        /// The limit in force.
        frame_max: u32,
    },
    /// A method frame too short to hold its class and method ids.
    #[error("method frame too short")]
    MethodTooShort,
    /// A class/method id pair the protocol does not define.
    #[error("unknown method class {class_id} method {method_id}")]
    UnknownMethod {
        /// Class id as sent.
        class_id: u16,
        /// Method id as sent.
        method_id: u16,
    },
    /// A known method whose arguments are truncated or malformed.
    #[error("malformed arguments for {}", crate::methods::method_name(*class_id, *method_id))]
    MalformedMethod {
        /// Class id as sent.
        class_id: u16,
        /// Method id as sent.
        method_id: u16,
    },
    /// A content header frame that is truncated or malformed.
    #[error("malformed content header")]
    MalformedContentHeader,
    /// A heartbeat frame with a non-empty payload or a non-zero channel.
    #[error("malformed heartbeat frame")]
    MalformedHeartbeat,
}

impl CodecError {
    /// The AMQP reply code for `connection.close`.
    pub fn reply_code(&self) -> u16 {
        match self {
            CodecError::UnknownFrameType(_)
            | CodecError::BadFrameEnd(_)
            | CodecError::FrameTooLarge { .. }
            | CodecError::MalformedHeartbeat => reply_code::FRAME_ERROR,
            CodecError::MethodTooShort
            | CodecError::MalformedMethod { .. }
            | CodecError::MalformedContentHeader => reply_code::SYNTAX_ERROR,
            CodecError::UnknownMethod { .. } => reply_code::COMMAND_INVALID,
        }
    }

    /// The reply code's name as RabbitMQ prefixes its reply texts, e.g. `FRAME_ERROR`.
    pub fn reply_name(&self) -> &'static str {
        reply_code::name(self.reply_code())
    }
}

/// A primitive read ran past the end of its input or met an invalid value.
///
/// Internal to decoding: callers turn it into the [`CodecError`] of the enclosing structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;
