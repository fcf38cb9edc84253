//! Sample frames shared by the integration tests (each test binary uses a subset).
#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use dwellmq_codec::methods::*;
use dwellmq_codec::{
    encode_frame, BasicProperties, ContentHeader, FieldTable, FieldValue, Frame, FramePayload,
    Method,
};

pub fn method(channel: u16, m: Method) -> Frame {
    Frame {
        channel,
        payload: FramePayload::Method(m),
    }
}

pub fn encode_all(frames: &[Frame]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    for f in frames {
        encode_frame(&mut buf, f);
    }
    buf.to_vec()
}

/// basic.publish + content header + body on channel 1.
pub fn publish_triple(body: &[u8]) -> Vec<Frame> {
    vec![
        method(
            1,
            Method::BasicPublish(BasicPublish {
                exchange: "amq.direct".into(),
                routing_key: "orders.created".into(),
                mandatory: true,
                immediate: false,
            }),
        ),
        Frame {
            channel: 1,
            payload: FramePayload::Header(ContentHeader {
                class_id: 60,
                body_size: body.len() as u64,
                properties: BasicProperties {
                    content_type: Some("application/json".into()),
                    delivery_mode: Some(2),
                    ..BasicProperties::default()
                },
            }),
        },
        Frame {
            channel: 1,
            payload: FramePayload::Body(Bytes::copy_from_slice(body)),
        },
    ]
}

/// A table nesting every container kind a few levels deep, with one value of each tag.
pub fn nested_table() -> FieldTable {
    let mut inner = FieldTable::new();
    inner.insert("flag", true);
    inner.insert("n", FieldValue::I8(-1));
    inner.insert("b", FieldValue::U8(200));
    inner.insert("s", FieldValue::I16(-300));
    inner.insert("u", FieldValue::U16(60000));
    inner.insert("I", FieldValue::I32(-70000));
    inner.insert("i", FieldValue::U32(3_000_000_000));
    inner.insert("l", FieldValue::I64(-5));
    inner.insert("f", FieldValue::F32(0.25));
    inner.insert("d", FieldValue::F64(-1e300));
    inner.insert(
        "D",
        FieldValue::Decimal {
            scale: 3,
            value: 12345,
        },
    );
    inner.insert("T", FieldValue::Timestamp(1_700_000_000));
    inner.insert("V", FieldValue::Void);
    inner.insert("x", FieldValue::Bytes(Bytes::from_static(b"\x00\x01\xff")));
    let mut t = FieldTable::new();
    t.insert("x-match", "all");
    t.insert(
        "list",
        FieldValue::Array(vec![
            FieldValue::from("a"),
            FieldValue::Array(vec![FieldValue::I64(1), FieldValue::Table(inner.clone())]),
            FieldValue::Void,
        ]),
    );
    t.insert("inner", inner);
    t
}

/// A set of valid frames covering every frame type, with names (used as corpus file names).
pub fn sample_frames() -> Vec<(&'static str, Vec<Frame>)> {
    vec![
        (
            "heartbeat",
            vec![Frame {
                channel: 0,
                payload: FramePayload::Heartbeat,
            }],
        ),
        (
            "connection_tune",
            vec![method(
                0,
                Method::ConnectionTune(ConnectionTune {
                    channel_max: 2047,
                    frame_max: 131_072,
                    heartbeat: 60,
                }),
            )],
        ),
        (
            "connection_start",
            vec![method(
                0,
                Method::ConnectionStart(ConnectionStart {
                    version_major: 0,
                    version_minor: 9,
                    server_properties: [("product", "dwellmq"), ("version", "0.1.0")]
                        .into_iter()
                        .collect(),
                    mechanisms: Bytes::from_static(b"PLAIN AMQPLAIN"),
                    locales: Bytes::from_static(b"en_US"),
                }),
            )],
        ),
        ("channel_open", vec![method(1, Method::ChannelOpen)]),
        (
            "queue_declare_nested_table",
            vec![method(
                1,
                Method::QueueDeclare(QueueDeclare {
                    queue: "orders".into(),
                    durable: true,
                    arguments: nested_table(),
                    ..QueueDeclare::default()
                }),
            )],
        ),
        (
            "basic_ack_multiple",
            vec![method(
                1,
                Method::BasicAck(BasicAck {
                    delivery_tag: 42,
                    multiple: true,
                }),
            )],
        ),
        (
            "basic_deliver",
            vec![method(
                3,
                Method::BasicDeliver(BasicDeliver {
                    consumer_tag: "amq.ctag-1".into(),
                    delivery_tag: 9,
                    redelivered: true,
                    exchange: "".into(),
                    routing_key: "q".into(),
                }),
            )],
        ),
        ("publish_triple", publish_triple(b"{\"id\":1}")),
        (
            "header_all_properties",
            vec![Frame {
                channel: 2,
                payload: FramePayload::Header(ContentHeader {
                    class_id: 60,
                    body_size: 1 << 20,
                    properties: BasicProperties {
                        content_type: Some("text/plain".into()),
                        content_encoding: Some("gzip".into()),
                        headers: Some(nested_table()),
                        delivery_mode: Some(1),
                        priority: Some(5),
                        correlation_id: Some("c-1".into()),
                        reply_to: Some("amq.rabbitmq.reply-to".into()),
                        expiration: Some("60000".into()),
                        message_id: Some("m-1".into()),
                        timestamp: Some(1_700_000_000),
                        kind: Some("created".into()),
                        user_id: Some("guest".into()),
                        app_id: Some("tests".into()),
                        cluster_id: Some("".into()),
                    },
                }),
            }],
        ),
        (
            "channel_close",
            vec![method(
                1,
                Method::ChannelClose(ChannelClose {
                    reply_code: 404,
                    reply_text: "NOT_FOUND - no queue 'x' in vhost '/'".into(),
                    class_id: 50,
                    method_id: 10,
                }),
            )],
        ),
    ]
}
