//! Numbers the protocol fixes: frame types, sizes, reply codes, class ids.

/// Frame type octets.
pub mod frame_type {
    /// A method frame.
    pub const METHOD: u8 = 1;
    /// A content header frame.
    pub const HEADER: u8 = 2;
    /// A content body frame.
    pub const BODY: u8 = 3;
    /// A heartbeat frame.
    pub const HEARTBEAT: u8 = 8;
}

/// The octet that ends every frame.
pub const FRAME_END: u8 = 0xCE;
/// Octets of framing around a payload: type (1), channel (2), size (4), frame-end (1).
pub const FRAME_OVERHEAD: usize = 8;
/// The smallest frame-max a peer may negotiate; also the limit before tuning completes.
pub const FRAME_MIN_SIZE: u32 = 4096;
/// The header a 0-9-1 client sends first.
pub const PROTOCOL_HEADER: &[u8; 8] = b"AMQP\x00\x00\x09\x01";
/// The class id of `basic`, the only class with content.
pub const BASIC_CLASS_ID: u16 = 60;

/// AMQP reply codes, with RabbitMQ's names for them.
pub mod reply_code {
    #![allow(missing_docs)]
    pub const REPLY_SUCCESS: u16 = 200;
    pub const CONTENT_TOO_LARGE: u16 = 311;
    pub const NO_ROUTE: u16 = 312;
    pub const NO_CONSUMERS: u16 = 313;
    pub const CONNECTION_FORCED: u16 = 320;
    pub const INVALID_PATH: u16 = 402;
    pub const ACCESS_REFUSED: u16 = 403;
    pub const NOT_FOUND: u16 = 404;
    pub const RESOURCE_LOCKED: u16 = 405;
    pub const PRECONDITION_FAILED: u16 = 406;
    pub const FRAME_ERROR: u16 = 501;
    pub const SYNTAX_ERROR: u16 = 502;
    pub const COMMAND_INVALID: u16 = 503;
    pub const CHANNEL_ERROR: u16 = 504;
    pub const UNEXPECTED_FRAME: u16 = 505;
    pub const RESOURCE_ERROR: u16 = 506;
    pub const NOT_ALLOWED: u16 = 530;
    pub const NOT_IMPLEMENTED: u16 = 540;
    pub const INTERNAL_ERROR: u16 = 541;

    /// The upper-case name RabbitMQ puts before a reply text, e.g. `NOT_FOUND`.
    pub fn name(code: u16) -> &'static str {
        match code {
            REPLY_SUCCESS => "OK",
            CONTENT_TOO_LARGE => "CONTENT_TOO_LARGE",
            NO_ROUTE => "NO_ROUTE",
            NO_CONSUMERS => "NO_CONSUMERS",
            CONNECTION_FORCED => "CONNECTION_FORCED",
            INVALID_PATH => "INVALID_PATH",
            ACCESS_REFUSED => "ACCESS_REFUSED",
            NOT_FOUND => "NOT_FOUND",
            RESOURCE_LOCKED => "RESOURCE_LOCKED",
            PRECONDITION_FAILED => "PRECONDITION_FAILED",
            FRAME_ERROR => "FRAME_ERROR",
            SYNTAX_ERROR => "SYNTAX_ERROR",
            COMMAND_INVALID => "COMMAND_INVALID",
            CHANNEL_ERROR => "CHANNEL_ERROR",
            UNEXPECTED_FRAME => "UNEXPECTED_FRAME",
            RESOURCE_ERROR => "RESOURCE_ERROR",
            NOT_ALLOWED => "NOT_ALLOWED",
            NOT_IMPLEMENTED => "NOT_IMPLEMENTED",
            INTERNAL_ERROR => "INTERNAL_ERROR",
            _ => "UNKNOWN",
        }
    }

    /// Whether the code closes the whole connection (a "hard" error) rather than a channel.
    pub fn is_hard_error(code: u16) -> bool {
        matches!(code, 320 | 402 | 501..=506 | 530 | 540 | 541)
    }
}
