//! The AMQP 0-9-1 wire format as RabbitMQ speaks it.
//!
//! IO-free: the caller owns the sockets and hands this crate byte buffers. Decoding is
//! incremental ([`decode_frame`] returns `Ok(None)` for "need more bytes") and zero-copy for
//! message bodies and strings, which are `Bytes` slices of the read buffer. Every method of the
//! classes connection, channel, exchange, queue, basic, tx and confirm is covered, both
//! directions, generated from RabbitMQ's protocol XML by `gen/gen_methods.py`.
//!
//! ```
//! use bytes::BytesMut;
//! use dwellmq_codec::{decode_frame, encode_method, FramePayload, Method, methods::BasicAck};
//!
//! let mut buf = BytesMut::new();
//! encode_method(&mut buf, 1, &Method::BasicAck(BasicAck { delivery_tag: 7, multiple: false }));
//! let frame = decode_frame(&mut buf, 4096).unwrap().unwrap();
//! assert_eq!(frame.channel, 1);
//! assert!(matches!(frame.payload, FramePayload::Method(Method::BasicAck(_))));
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod constants;
mod error;
mod field;
mod frame;
#[doc(hidden)]
pub mod fuzzing;
pub mod methods;
mod primitives;
mod properties;
mod protocol_header;
mod short_str;

pub use constants::reply_code;
pub use error::CodecError;
pub use field::{encoded_table_len, FieldTable, FieldValue, MAX_NESTING};
pub use frame::{
    begin_frame, decode_frame, encode_body, encode_body_start, encode_frame, encode_header,
    encode_header_raw, encode_heartbeat, encode_method, finish_frame, Frame, FramePayload,
};
pub use methods::Method;
pub use properties::{BasicProperties, ContentHeader};
pub use protocol_header::{decode_protocol_header, ProtocolHeader};
pub use short_str::ShortStr;
