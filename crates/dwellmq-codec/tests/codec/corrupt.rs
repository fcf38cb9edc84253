//! Corrupt input is refused with the right error and the right `connection.close` reply code.

use crate::common::{encode_all, method, publish_triple};
use bytes::BytesMut;
use dwellmq_codec::methods::*;
use dwellmq_codec::{
    decode_frame, CodecError, FieldTable, FieldValue, FramePayload, Method, MAX_NESTING,
};

const FRAME_ERROR: u16 = 501;
const SYNTAX_ERROR: u16 = 502;
const COMMAND_INVALID: u16 = 503;

fn decode_err(bytes: &[u8], frame_max: u32) -> CodecError {
    let mut buf = BytesMut::from(bytes);
    match decode_frame(&mut buf, frame_max) {
        Err(e) => e,
        Ok(f) => panic!("expected an error, got {f:?}"),
    }
}

/// A frame with the given type, channel and payload, correctly framed.
fn raw_frame(kind: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![kind];
    v.extend_from_slice(&channel.to_be_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    v.push(0xce);
    v
}

/// The payload (without framing) of an encoded single frame.
fn payload_of(frame_bytes: &[u8]) -> Vec<u8> {
    frame_bytes[7..frame_bytes.len() - 1].to_vec()
}

fn queue_declare_payload(queue: &[u8], table: &[u8]) -> Vec<u8> {
    let mut p = vec![0x00, 0x32, 0x00, 0x0a, 0x00, 0x00];
    p.push(queue.len() as u8);
    p.extend_from_slice(queue);
    p.push(0);
    p.extend_from_slice(&(table.len() as u32).to_be_bytes());
    p.extend_from_slice(table);
    p
}

#[test]
fn bad_frame_end_is_a_frame_error() {
    let mut bytes = encode_all(&publish_triple(b"hi"));
    // Corrupt the end octet of the first (method) frame.
    let size = u32::from_be_bytes(bytes[3..7].try_into().unwrap()) as usize;
    bytes[7 + size] = 0x00;
    let e = decode_err(&bytes, 4096);
    assert_eq!(e, CodecError::BadFrameEnd(0x00));
    assert_eq!(e.reply_code(), FRAME_ERROR);
    assert_eq!(e.reply_name(), "FRAME_ERROR");

    // The same for a body frame and a heartbeat.
    let mut body = raw_frame(3, 1, b"xyz");
    *body.last_mut().unwrap() = 0xcf;
    assert_eq!(decode_err(&body, 4096), CodecError::BadFrameEnd(0xcf));
    let hb = [8, 0, 0, 0, 0, 0, 0, 0xff];
    assert_eq!(decode_err(&hb, 4096).reply_code(), FRAME_ERROR);
}

#[test]
fn unknown_frame_type_is_a_frame_error() {
    for kind in [0u8, 4, 5, 7, 9, b'A', 0xce, 0xff] {
        let bytes = raw_frame(kind, 0, &[]);
        let e = decode_err(&bytes, 4096);
        assert_eq!(e, CodecError::UnknownFrameType(kind));
        assert_eq!(e.reply_code(), FRAME_ERROR);
    }
    // A client that skipped the protocol header and sent "AMQP..." as a frame.
    let e = decode_err(b"AMQP\x00\x00\x09\x01", 4096);
    assert_eq!(e, CodecError::UnknownFrameType(b'A'));
}

#[test]
fn oversized_frame_is_refused_from_its_header_alone() {
    // Only the 7-octet header: type method, channel 1, size 131072 (with framing 131080).
    let header = [0x01, 0x00, 0x01, 0x00, 0x02, 0x00, 0x00];
    let mut buf = BytesMut::from(&header[..]);
    let e = decode_frame(&mut buf, 4096).unwrap_err();
    assert_eq!(
        e,
        CodecError::FrameTooLarge {
            size: 131_072 + 8,
            frame_max: 4096
        }
    );
    assert_eq!(e.reply_code(), FRAME_ERROR);

    // The largest size that fits: the header alone just asks for more.
    let fits = [0x03, 0x00, 0x01, 0x00, 0x00, 0x0f, 0xf8]; // 4088 + 8 = 4096
    assert_eq!(decode_frame(&mut BytesMut::from(&fits[..]), 4096), Ok(None));
    let over = [0x03, 0x00, 0x01, 0x00, 0x00, 0x0f, 0xf9]; // 4089 + 8 = 4097
    assert!(matches!(
        decode_frame(&mut BytesMut::from(&over[..]), 4096),
        Err(CodecError::FrameTooLarge { size: 4097, .. })
    ));
    // A size of u32::MAX does not overflow.
    let huge = [0x03, 0x00, 0x01, 0xff, 0xff, 0xff, 0xff];
    assert_eq!(
        decode_err(&huge, u32::MAX),
        CodecError::FrameTooLarge {
            size: u64::from(u32::MAX) + 8,
            frame_max: u32::MAX
        }
    );
}

#[test]
fn unknown_class_or_method_is_command_invalid() {
    for (class_id, method_id) in [(60u16, 999u16), (30, 10), (0, 0), (10, 12), (85, 12)] {
        let mut payload = class_id.to_be_bytes().to_vec();
        payload.extend_from_slice(&method_id.to_be_bytes());
        payload.extend_from_slice(&[0, 0, 0]);
        let e = decode_err(&raw_frame(1, 1, &payload), 4096);
        assert_eq!(
            e,
            CodecError::UnknownMethod {
                class_id,
                method_id
            }
        );
        assert_eq!(e.reply_code(), COMMAND_INVALID);
    }
}

#[test]
fn truncated_arguments_are_a_syntax_error() {
    let frames = [
        method(
            1,
            Method::BasicPublish(BasicPublish {
                exchange: "ex".into(),
                routing_key: "rk".into(),
                mandatory: true,
                immediate: false,
            }),
        ),
        method(
            1,
            Method::QueueDeclare(QueueDeclare {
                queue: "q".into(),
                arguments: [("x-max-length", 10i64)].into_iter().collect(),
                ..QueueDeclare::default()
            }),
        ),
        method(
            0,
            Method::ConnectionTune(ConnectionTune {
                channel_max: 1,
                frame_max: 4096,
                heartbeat: 0,
            }),
        ),
        method(
            1,
            Method::BasicAck(BasicAck {
                delivery_tag: 1,
                multiple: false,
            }),
        ),
    ];
    for f in &frames {
        let FramePayload::Method(m) = &f.payload else {
            unreachable!()
        };
        let payload = payload_of(&encode_all(std::slice::from_ref(f)));
        // Every cut that keeps the class and method ids but loses argument octets.
        for cut in 4..payload.len() {
            let e = decode_err(&raw_frame(1, f.channel, &payload[..cut]), 4096);
            assert_eq!(
                e,
                CodecError::MalformedMethod {
                    class_id: m.class_id(),
                    method_id: m.method_id()
                },
                "{} cut to {cut}",
                m.name()
            );
            assert_eq!(e.reply_code(), SYNTAX_ERROR);
        }
        // Fewer than 4 octets: not even the ids.
        for cut in 0..4 {
            let e = decode_err(&raw_frame(1, f.channel, &payload[..cut]), 4096);
            assert_eq!(e, CodecError::MethodTooShort);
            assert_eq!(e.reply_code(), SYNTAX_ERROR);
        }
    }
    // The error text names the method.
    let e = decode_err(&raw_frame(1, 1, &[0, 60, 0, 40, 0]), 4096);
    assert_eq!(e.to_string(), "malformed arguments for basic.publish");
}

#[test]
fn bad_field_table_tag_is_a_syntax_error() {
    // {a: 'Z' ...}: 'Z' is not a RabbitMQ tag.
    let p = queue_declare_payload(b"q", b"\x01aZ\x00\x00\x00\x00");
    let e = decode_err(&raw_frame(1, 1, &p), 4096);
    assert_eq!(
        e,
        CodecError::MalformedMethod {
            class_id: 50,
            method_id: 10
        }
    );
    assert_eq!(e.reply_code(), SYNTAX_ERROR);
    // A bad tag inside a nested array.
    let p = queue_declare_payload(b"q", b"\x01aA\x00\x00\x00\x02Z\x00");
    assert_eq!(
        decode_err(&raw_frame(1, 1, &p), 4096).reply_code(),
        SYNTAX_ERROR
    );
    // The spec's tags that RabbitMQ does not use ('U' unsigned short, 'L' long-long uint).
    for tag in [b'U', b'L', b'c', b'0'] {
        let table = [0x01, b'a', tag, 0, 0, 0, 0, 0, 0, 0, 0];
        let p = queue_declare_payload(b"q", &table);
        assert_eq!(
            decode_err(&raw_frame(1, 1, &p), 4096).reply_code(),
            SYNTAX_ERROR
        );
    }
    // A value running past the end of its table, though not past the frame.
    let p = queue_declare_payload(b"q", b"\x01aI\x00\x00");
    let mut p2 = p.clone();
    p2.extend_from_slice(&[0, 0, 0, 0]);
    assert_eq!(
        decode_err(&raw_frame(1, 1, &p2), 4096).reply_code(),
        SYNTAX_ERROR
    );
    // A table length past the end of the frame.
    let mut p = queue_declare_payload(b"q", b"");
    let n = p.len();
    p[n - 4..].copy_from_slice(&100u32.to_be_bytes());
    assert_eq!(
        decode_err(&raw_frame(1, 1, &p), 4096).reply_code(),
        SYNTAX_ERROR
    );
}

#[test]
fn nesting_too_deep_is_a_syntax_error() {
    let mut value = FieldValue::Void;
    for n in 0..(MAX_NESTING + 3) {
        value = if n % 2 == 0 {
            FieldValue::Array(vec![value])
        } else {
            let mut t = FieldTable::new();
            t.insert("t", value);
            FieldValue::Table(t)
        };
    }
    let f = method(
        1,
        Method::QueueDeclare(QueueDeclare {
            queue: "q".into(),
            arguments: [("deep", value)].into_iter().collect(),
            ..QueueDeclare::default()
        }),
    );
    let bytes = encode_all(&[f]);
    assert_eq!(decode_err(&bytes, 1 << 20).reply_code(), SYNTAX_ERROR);
}

#[test]
fn invalid_utf8_short_string_is_a_syntax_error() {
    // Queue name 0xff 0xfe.
    let p = queue_declare_payload(b"\xff\xfe", b"");
    let e = decode_err(&raw_frame(1, 1, &p), 4096);
    assert_eq!(
        e,
        CodecError::MalformedMethod {
            class_id: 50,
            method_id: 10
        }
    );
    assert_eq!(e.reply_code(), SYNTAX_ERROR);
    // A truncated multi-octet sequence ("é" cut in half), and an invalid table key.
    let p = queue_declare_payload(b"caf\xc3", b"");
    assert_eq!(
        decode_err(&raw_frame(1, 1, &p), 4096).reply_code(),
        SYNTAX_ERROR
    );
    let p = queue_declare_payload(b"q", b"\x01\x80V");
    assert_eq!(
        decode_err(&raw_frame(1, 1, &p), 4096).reply_code(),
        SYNTAX_ERROR
    );
    // In a content header property (content-type).
    let header = [
        0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x00, 0x02, 0xc0, 0x80,
    ];
    let e = decode_err(&raw_frame(2, 1, &header), 4096);
    assert_eq!(e, CodecError::MalformedContentHeader);
    assert_eq!(e.reply_code(), SYNTAX_ERROR);
}

#[test]
fn truncated_content_header_is_a_syntax_error() {
    let triple = publish_triple(b"x");
    let header_bytes = encode_all(&triple[1..2]);
    let payload = payload_of(&header_bytes);
    for cut in 0..payload.len() {
        let e = decode_err(&raw_frame(2, 1, &payload[..cut]), 4096);
        assert_eq!(e, CodecError::MalformedContentHeader, "cut {cut}");
        assert_eq!(e.reply_code(), SYNTAX_ERROR);
    }
}

#[test]
fn heartbeat_with_payload_or_channel_is_a_frame_error() {
    let e = decode_err(&raw_frame(8, 0, &[0]), 4096);
    assert_eq!(e, CodecError::MalformedHeartbeat);
    assert_eq!(e.reply_code(), FRAME_ERROR);
    let e = decode_err(&raw_frame(8, 0, b"hello"), 4096);
    assert_eq!(e, CodecError::MalformedHeartbeat);
    // Spec 4.2.7: heartbeat frames must use channel 0.
    let e = decode_err(&raw_frame(8, 1, &[]), 4096);
    assert_eq!(e, CodecError::MalformedHeartbeat);
    assert_eq!(e.reply_code(), FRAME_ERROR);
}

#[test]
fn errors_after_good_frames_leave_the_good_frames_decodable() {
    let mut bytes = encode_all(&publish_triple(b"ok"));
    bytes.extend_from_slice(&raw_frame(5, 0, &[]));
    let mut buf = BytesMut::from(&bytes[..]);
    for _ in 0..3 {
        assert!(decode_frame(&mut buf, 4096).unwrap().is_some());
    }
    assert_eq!(
        decode_frame(&mut buf, 4096),
        Err(CodecError::UnknownFrameType(5))
    );
}
