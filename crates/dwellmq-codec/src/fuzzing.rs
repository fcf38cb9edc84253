//! The body of the `decode_frames` fuzz target, shared with a stable test that replays the seed
//! corpus and pseudo-random inputs. Not part of the supported API.

use bytes::BytesMut;

use crate::constants::{FRAME_MIN_SIZE, PROTOCOL_HEADER};
use crate::error::CodecError;
use crate::frame::{decode_frame, encode_frame, Frame, FramePayload};
use crate::protocol_header::{decode_protocol_header, ProtocolHeader};

/// The frame-max the fuzz body decodes with (large enough for any input the fuzzer builds).
pub const FUZZ_FRAME_MAX: u32 = 1 << 20;

/// Feeds `data` to the decoders and checks their invariants; panics on any violation.
///
/// * `decode_protocol_header` never panics and consumes either nothing or `min(8, len)` octets.
/// * `decode_frame` never panics; each frame it yields re-encodes (with `encode_frame`) to
///   bytes that decode to an equal frame, and re-encoding is stable.
/// * Body and heartbeat frames re-encode to exactly the octets they were read from.
/// * Decoding the same bytes delivered in two pieces yields the same frames and outcome.
/// * A smaller frame-max yields a prefix of the frames, and stops only with `FrameTooLarge`.
pub fn check_decode_roundtrip(data: &[u8]) {
    check_protocol_header(data);

    let (frames, outcome) = decode_all(data, FUZZ_FRAME_MAX);
    for frame in &frames {
        check_frame_roundtrip(frame);
    }
    check_raw_reencoding(data, &frames);

    // Incremental delivery: split at a point derived from the data itself.
    if !data.is_empty() {
        let split = usize::from(data[0]) * 31 % (data.len() + 1);
        let (split_frames, split_outcome) = decode_in_two_pieces(data, split);
        assert_eq!(split_frames, frames, "frames differ when split at {split}");
        assert_eq!(
            split_outcome, outcome,
            "outcome differs when split at {split}"
        );
    }

    // The minimum frame-max: a prefix of the same frames, cut short only by FrameTooLarge.
    let (small, small_outcome) = decode_all(data, FRAME_MIN_SIZE);
    assert!(small.len() <= frames.len());
    assert_eq!(small[..], frames[..small.len()]);
    if small.len() < frames.len() {
        assert!(
            matches!(small_outcome, Err(CodecError::FrameTooLarge { .. })),
            "{small_outcome:?}"
        );
    }
}

/// The frames decoded from `data` and how decoding stopped (`Ok(n)`: `n` octets left over).
fn decode_all(data: &[u8], frame_max: u32) -> (Vec<Frame>, Result<usize, CodecError>) {
    let mut buf = BytesMut::from(data);
    let mut frames = Vec::new();
    loop {
        let before = buf.len();
        match decode_frame(&mut buf, frame_max) {
            Ok(Some(frame)) => {
                assert!(buf.len() < before, "a frame was decoded from nothing");
                frames.push(frame);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "need-more consumed input");
                return (frames, Ok(buf.len()));
            }
            Err(e) => {
                // Exercise the error's accessors too.
                assert!(matches!(e.reply_code(), 501..=503));
                let _ = e.reply_name();
                let _ = e.to_string();
                return (frames, Err(e));
            }
        }
    }
}

fn decode_in_two_pieces(data: &[u8], split: usize) -> (Vec<Frame>, Result<usize, CodecError>) {
    let mut buf = BytesMut::from(&data[..split]);
    let mut frames = Vec::new();
    let mut fed_all = false;
    loop {
        match decode_frame(&mut buf, FUZZ_FRAME_MAX) {
            Ok(Some(frame)) => frames.push(frame),
            Ok(None) if !fed_all => {
                buf.extend_from_slice(&data[split..]);
                fed_all = true;
            }
            Ok(None) => return (frames, Ok(buf.len())),
            Err(e) => return (frames, Err(e)),
        }
    }
}

fn check_protocol_header(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    match decode_protocol_header(&mut buf) {
        None => {
            assert_eq!(buf.len(), data.len(), "need-more consumed input");
            assert!(data.len() < 8);
            let n = data.len().min(4);
            assert_eq!(data[..n], PROTOCOL_HEADER[..n]);
        }
        Some(header) => {
            let taken = data.len().min(8);
            assert_eq!(buf.len(), data.len() - taken);
            match header {
                ProtocolHeader::Amqp091 => assert_eq!(&data[..8], PROTOCOL_HEADER),
                ProtocolHeader::Other(raw) => {
                    assert_eq!(raw[..taken], data[..taken]);
                    assert_ne!(&raw, PROTOCOL_HEADER);
                }
            }
        }
    }
}

/// encode → decode gives the same frame, and encoding that again gives the same bytes.
fn check_frame_roundtrip(frame: &Frame) {
    let mut encoded = BytesMut::new();
    encode_frame(&mut encoded, frame);
    let first = encoded.clone().freeze();
    let again = decode_frame(&mut encoded, u32::MAX)
        .unwrap_or_else(|e| panic!("re-encoded {frame:?} does not decode: {e}"))
        .unwrap_or_else(|| panic!("re-encoded {frame:?} is incomplete"));
    assert!(encoded.is_empty(), "re-encoded frame has trailing octets");
    assert_eq!(&again, frame);
    let mut second = BytesMut::new();
    encode_frame(&mut second, &again);
    assert_eq!(first, second.freeze(), "encoding is not stable");
    if let FramePayload::Method(m) = &frame.payload {
        let _ = m.name();
        let _ = m.has_content();
    }
}

/// Body and heartbeat frames have a single encoding: it must be the one that was read.
fn check_raw_reencoding(data: &[u8], frames: &[Frame]) {
    let mut at = 0;
    for frame in frames {
        let size = u32::from_be_bytes([data[at + 3], data[at + 4], data[at + 5], data[at + 6]]);
        let len = size as usize + 8;
        let raw = &data[at..at + len];
        if matches!(
            frame.payload,
            FramePayload::Body(_) | FramePayload::Heartbeat
        ) {
            let mut out = BytesMut::new();
            encode_frame(&mut out, frame);
            assert_eq!(&out[..], raw);
        }
        at += len;
    }
}
