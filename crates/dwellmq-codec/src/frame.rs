//! Frames: the unit of the wire, and incremental decoding from a read buffer.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::constants::{frame_type, FRAME_END, FRAME_OVERHEAD};
use crate::error::CodecError;
use crate::methods::Method;
use crate::properties::ContentHeader;

/// A decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The channel the frame belongs to (0 for the connection).
    pub channel: u16,
    /// What the frame carries.
    pub payload: FramePayload,
}

/// What a frame carries.
// `Header` is much larger than the other variants; boxing it would cost an allocation per
// published message, which is dearer than moving the inline value (see benches/codec.rs).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum FramePayload {
    /// A method with its arguments.
    Method(Method),
    /// A content header (body size and properties).
    Header(ContentHeader),
    /// A piece of a message body: a slice of the read buffer, not a copy.
    Body(Bytes),
    /// A heartbeat.
    Heartbeat,
}

/// Decodes the next complete frame from the front of `buf`.
///
/// Returns `Ok(None)` when `buf` holds only part of a frame: read more and call again.
/// `frame_max` is the negotiated maximum frame size including the 8 octets of framing; a larger
/// size field is refused before its payload is buffered. On success the frame's bytes are split
/// off `buf`, and body frames share them without copying.
pub fn decode_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, CodecError> {
    if buf.len() < 7 {
        return Ok(None);
    }
    let kind = buf[0];
    if !matches!(
        kind,
        frame_type::METHOD | frame_type::HEADER | frame_type::BODY | frame_type::HEARTBEAT
    ) {
        return Err(CodecError::UnknownFrameType(kind));
    }
    let channel = u16::from_be_bytes([buf[1], buf[2]]);
    let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]) as usize;
    let total = size + FRAME_OVERHEAD;
    if total as u64 > u64::from(frame_max) {
        return Err(CodecError::FrameTooLarge {
            size: total as u64,
            frame_max,
        });
    }
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let end = buf[total - 1];
    if end != FRAME_END {
        return Err(CodecError::BadFrameEnd(end));
    }
    let mut frame = buf.split_to(total).freeze();
    frame.advance(7);
    frame.truncate(size);
    let payload = match kind {
        frame_type::METHOD => FramePayload::Method(Method::decode(&frame)?),
        frame_type::HEADER => {
            // Decoded in place: `ContentHeader` is large (14 properties), and moving it
            // through `Result`s costs more than decoding a typical header.
            let mut payload = FramePayload::Header(ContentHeader::default());
            if let FramePayload::Header(header) = &mut payload {
                header.decode_into(&frame)?;
            }
            payload
        }
        frame_type::BODY => FramePayload::Body(frame),
        _ => {
            // Spec 4.2.7: heartbeats carry no payload and use channel 0; anything else is a
            // frame error.
            if size != 0 || channel != 0 {
                return Err(CodecError::MalformedHeartbeat);
            }
            FramePayload::Heartbeat
        }
    };
    Ok(Some(Frame { channel, payload }))
}

/// Starts a frame in `out`; returns the offset to pass to [`finish_frame`].
pub fn begin_frame(out: &mut BytesMut, kind: u8, channel: u16) -> usize {
    out.put_u8(kind);
    out.put_u16(channel);
    let at = out.len();
    out.put_u32(0);
    at
}

/// Patches the size field written by [`begin_frame`] and appends the frame-end octet.
pub fn finish_frame(out: &mut BytesMut, size_at: usize) {
    let size = (out.len() - size_at - 4) as u32;
    out[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
    out.put_u8(FRAME_END);
}

/// Appends a complete method frame.
pub fn encode_method(out: &mut BytesMut, channel: u16, method: &Method) {
    let at = begin_frame(out, frame_type::METHOD, channel);
    method.encode(out);
    finish_frame(out, at);
}

/// Appends a complete content header frame.
pub fn encode_header(out: &mut BytesMut, channel: u16, header: &ContentHeader) {
    let at = begin_frame(out, frame_type::HEADER, channel);
    header.encode(out);
    finish_frame(out, at);
}

/// Appends a content header frame whose properties are already encoded (flags word included).
///
/// The broker encodes a message's properties once and reuses them for every delivery.
pub fn encode_header_raw(
    out: &mut BytesMut,
    channel: u16,
    class_id: u16,
    body_size: u64,
    properties: &[u8],
) {
    out.put_u8(frame_type::HEADER);
    out.put_u16(channel);
    out.put_u32((12 + properties.len()) as u32);
    out.put_u16(class_id);
    out.put_u16(0);
    out.put_u64(body_size);
    out.put_slice(properties);
    out.put_u8(FRAME_END);
}

/// Appends one body frame holding `chunk` (which must fit the peer's frame-max).
pub fn encode_body(out: &mut BytesMut, channel: u16, chunk: &[u8]) {
    encode_body_start(out, channel, chunk.len());
    out.put_slice(chunk);
    out.put_u8(FRAME_END);
}

/// Appends the 7-octet header of a body frame of `len` octets; the caller writes the body and
/// then [`FRAME_END`]. Lets a writer send the body from its own buffer (vectored IO).
pub fn encode_body_start(out: &mut BytesMut, channel: u16, len: usize) {
    out.put_u8(frame_type::BODY);
    out.put_u16(channel);
    out.put_u32(len as u32);
}

/// Appends a heartbeat frame.
pub fn encode_heartbeat(out: &mut BytesMut) {
    out.put_slice(&[frame_type::HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END]);
}

/// Appends any frame (used by tests, clients and the fuzzer's round trip).
pub fn encode_frame(out: &mut BytesMut, frame: &Frame) {
    match &frame.payload {
        FramePayload::Method(m) => encode_method(out, frame.channel, m),
        FramePayload::Header(h) => encode_header(out, frame.channel, h),
        FramePayload::Body(b) => encode_body(out, frame.channel, b),
        FramePayload::Heartbeat => {
            let at = begin_frame(out, frame_type::HEARTBEAT, frame.channel);
            finish_frame(out, at);
        }
    }
}
