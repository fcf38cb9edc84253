//! Incremental decoding: a partial frame is "need more bytes" and leaves the buffer untouched.

use crate::common::{encode_all, publish_triple, sample_frames};
use bytes::BytesMut;
use dwellmq_codec::{decode_frame, Frame};

const FRAME_MAX: u32 = 1 << 20;

/// Decodes every complete frame in `buf`, then expects `Ok(None)`.
fn decode_available(buf: &mut BytesMut) -> Vec<Frame> {
    let mut out = Vec::new();
    while let Some(f) = decode_frame(buf, FRAME_MAX).expect("valid input") {
        out.push(f);
    }
    out
}

#[test]
fn every_strict_prefix_of_a_frame_needs_more() {
    for (name, frames) in sample_frames() {
        for frame in &frames {
            let bytes = encode_all(std::slice::from_ref(frame));
            for len in 0..bytes.len() {
                let mut buf = BytesMut::from(&bytes[..len]);
                assert_eq!(
                    decode_frame(&mut buf, FRAME_MAX),
                    Ok(None),
                    "{name}: prefix of {len}/{} octets",
                    bytes.len()
                );
                // Not consumed: still exactly the prefix.
                assert_eq!(&buf[..], &bytes[..len], "{name}: prefix {len} was modified");
            }
            let mut buf = BytesMut::from(&bytes[..]);
            assert_eq!(
                decode_frame(&mut buf, FRAME_MAX).unwrap().as_ref(),
                Some(frame)
            );
            assert!(buf.is_empty());
        }
    }
}

#[test]
fn prefixes_of_a_publish_triple_yield_the_complete_frames_only() {
    for body_len in [0usize, 1, 16, 300] {
        let body: Vec<u8> = (0..body_len).map(|n| n as u8).collect();
        let frames = publish_triple(&body);
        let sizes: Vec<usize> = frames
            .iter()
            .map(|f| encode_all(std::slice::from_ref(f)).len())
            .collect();
        let bytes = encode_all(&frames);
        for len in 0..=bytes.len() {
            let mut buf = BytesMut::from(&bytes[..len]);
            let decoded = decode_available(&mut buf);
            // How many frames end at or before `len`.
            let mut end = 0;
            let complete = sizes
                .iter()
                .take_while(|&&s| {
                    end += s;
                    end <= len
                })
                .count();
            assert_eq!(decoded, frames[..complete], "prefix {len}");
            let consumed: usize = sizes[..complete].iter().sum();
            assert_eq!(&buf[..], &bytes[consumed..len], "prefix {len}: leftover");
        }
    }
}

#[test]
fn byte_at_a_time_streaming_reassembles_everything() {
    let mut all_frames = Vec::new();
    for (_, frames) in sample_frames() {
        all_frames.extend(frames);
    }
    let bytes = encode_all(&all_frames);
    let mut buf = BytesMut::new();
    let mut decoded = Vec::new();
    for &b in &bytes {
        buf.extend_from_slice(&[b]);
        decoded.extend(decode_available(&mut buf));
    }
    assert!(buf.is_empty());
    assert_eq!(decoded, all_frames);
}

#[test]
fn repeated_need_more_calls_are_idempotent() {
    let frames = publish_triple(&[7u8; 1000]);
    let bytes = encode_all(&frames);
    let mut buf = BytesMut::from(&bytes[..bytes.len() - 1]);
    // Method and header decode; the body frame is one octet short and stays buffered.
    assert_eq!(decode_available(&mut buf), &frames[..2]);
    for _ in 0..3 {
        assert!(decode_available(&mut buf).is_empty());
        assert_eq!(&buf[..], &bytes[bytes.len() - (1000 + 8)..bytes.len() - 1]);
    }
    buf.extend_from_slice(&bytes[bytes.len() - 1..]);
    assert_eq!(decode_available(&mut buf), &frames[2..]);
    assert!(buf.is_empty());
}
