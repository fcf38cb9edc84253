//! Property tests: every method, content header and field value survives
//! `encode_frame` → `decode_frame` unchanged, alone and back-to-back in one buffer.

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use dwellmq_codec::methods::*;
use dwellmq_codec::{
    decode_frame, encode_frame, BasicProperties, ContentHeader, FieldTable, FieldValue, Frame,
    FramePayload, Method, ShortStr,
};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union, ValueTree};
use proptest::test_runner::TestRunner;

/// Large enough for any frame the strategies build.
const BIG_FRAME_MAX: u32 = 64 * 1024 * 1024;

/// Cuts a string to at most 255 octets at a character boundary.
fn clamp_255(mut s: String) -> String {
    let mut end = s.len().min(255);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s
}

/// Short strings: empty, identifier-like, arbitrary Unicode, and ones right at the 255-octet limit.
fn short_str() -> BoxedStrategy<ShortStr> {
    prop_oneof![
        1 => Just(String::new()),
        4 => "[a-zA-Z0-9._:-]{1,40}",
        3 => vec(any::<char>(), 0..100).prop_map(|cs| clamp_255(cs.into_iter().collect())),
        1 => (250usize..=255).prop_map(|n| "q".repeat(n)),
        1 => vec(any::<char>(), 64..200).prop_map(|cs| clamp_255(cs.into_iter().collect())),
    ]
    .prop_map(ShortStr::from)
    .boxed()
}

fn long_bytes() -> BoxedStrategy<Bytes> {
    prop_oneof![
        4 => vec(any::<u8>(), 0..64),
        1 => vec(any::<u8>(), 256..2048),
    ]
    .prop_map(Bytes::from)
    .boxed()
}

/// A leaf value of every non-container type tag.
fn leaf_value() -> BoxedStrategy<FieldValue> {
    prop_oneof![
        any::<bool>().prop_map(FieldValue::Bool), // t
        any::<i8>().prop_map(FieldValue::I8),     // b
        any::<u8>().prop_map(FieldValue::U8),     // B
        any::<i16>().prop_map(FieldValue::I16),   // s
        any::<u16>().prop_map(FieldValue::U16),   // u
        any::<i32>().prop_map(FieldValue::I32),   // I
        any::<u32>().prop_map(FieldValue::U32),   // i
        any::<i64>().prop_map(FieldValue::I64),   // l
        any::<u32>().prop_map(|b| FieldValue::F32(f32::from_bits(b))), // f (NaNs included)
        any::<u64>().prop_map(|b| FieldValue::F64(f64::from_bits(b))), // d
        (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| FieldValue::Decimal { scale, value }), // D
        long_bytes().prop_map(FieldValue::LongStr),   // S
        any::<u64>().prop_map(FieldValue::Timestamp), // T
        Just(FieldValue::Void),                       // V
        long_bytes().prop_map(FieldValue::Bytes),     // x
    ]
    .boxed()
}

/// Any value, with arrays (`A`) and tables (`F`) nested a few levels deep.
fn field_value() -> BoxedStrategy<FieldValue> {
    leaf_value()
        .prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..6).prop_map(FieldValue::Array),
                vec((short_str(), inner), 0..6)
                    .prop_map(|entries| FieldValue::Table(table_of(entries))),
            ]
        })
        .boxed()
}

/// Builds a table verbatim (duplicate keys included: the wire allows them).
fn table_of(entries: Vec<(ShortStr, FieldValue)>) -> FieldTable {
    let mut t = FieldTable::new();
    for (k, v) in entries {
        t.push(k, v);
    }
    t
}

fn field_table() -> BoxedStrategy<FieldTable> {
    vec((short_str(), field_value()), 0..6)
        .prop_map(table_of)
        .boxed()
}

fn s() -> BoxedStrategy<ShortStr> {
    short_str()
}

fn b() -> BoxedStrategy<bool> {
    any::<bool>().boxed()
}

/// One strategy per method id pair; `covers_every_method_id` checks the list is complete.
fn method_strategies() -> Vec<((u16, u16), BoxedStrategy<Method>)> {
    let mut v: Vec<((u16, u16), BoxedStrategy<Method>)> = Vec::new();
    let mut add = |ids: (u16, u16), st: BoxedStrategy<Method>| v.push((ids, st));
    let unit = |m: Method| Just(m).boxed();

    // connection (10)
    add(
        (10, 10),
        (
            any::<u8>(),
            any::<u8>(),
            field_table(),
            long_bytes(),
            long_bytes(),
        )
            .prop_map(
                |(version_major, version_minor, server_properties, mechanisms, locales)| {
                    Method::ConnectionStart(ConnectionStart {
                        version_major,
                        version_minor,
                        server_properties,
                        mechanisms,
                        locales,
                    })
                },
            )
            .boxed(),
    );
    add(
        (10, 11),
        (field_table(), s(), long_bytes(), s())
            .prop_map(|(client_properties, mechanism, response, locale)| {
                Method::ConnectionStartOk(ConnectionStartOk {
                    client_properties,
                    mechanism,
                    response,
                    locale,
                })
            })
            .boxed(),
    );
    add(
        (10, 20),
        long_bytes()
            .prop_map(|challenge| Method::ConnectionSecure(ConnectionSecure { challenge }))
            .boxed(),
    );
    add(
        (10, 21),
        long_bytes()
            .prop_map(|response| Method::ConnectionSecureOk(ConnectionSecureOk { response }))
            .boxed(),
    );
    add(
        (10, 30),
        (any::<u16>(), any::<u32>(), any::<u16>())
            .prop_map(|(channel_max, frame_max, heartbeat)| {
                Method::ConnectionTune(ConnectionTune {
                    channel_max,
                    frame_max,
                    heartbeat,
                })
            })
            .boxed(),
    );
    add(
        (10, 31),
        (any::<u16>(), any::<u32>(), any::<u16>())
            .prop_map(|(channel_max, frame_max, heartbeat)| {
                Method::ConnectionTuneOk(ConnectionTuneOk {
                    channel_max,
                    frame_max,
                    heartbeat,
                })
            })
            .boxed(),
    );
    add(
        (10, 40),
        s().prop_map(|virtual_host| Method::ConnectionOpen(ConnectionOpen { virtual_host }))
            .boxed(),
    );
    add((10, 41), unit(Method::ConnectionOpenOk));
    add(
        (10, 50),
        (any::<u16>(), s(), any::<u16>(), any::<u16>())
            .prop_map(|(reply_code, reply_text, class_id, method_id)| {
                Method::ConnectionClose(ConnectionClose {
                    reply_code,
                    reply_text,
                    class_id,
                    method_id,
                })
            })
            .boxed(),
    );
    add((10, 51), unit(Method::ConnectionCloseOk));
    add(
        (10, 60),
        s().prop_map(|reason| Method::ConnectionBlocked(ConnectionBlocked { reason }))
            .boxed(),
    );
    add((10, 61), unit(Method::ConnectionUnblocked));
    add(
        (10, 70),
        (long_bytes(), s())
            .prop_map(|(new_secret, reason)| {
                Method::ConnectionUpdateSecret(ConnectionUpdateSecret { new_secret, reason })
            })
            .boxed(),
    );
    add((10, 71), unit(Method::ConnectionUpdateSecretOk));

    // channel (20)
    add((20, 10), unit(Method::ChannelOpen));
    add((20, 11), unit(Method::ChannelOpenOk));
    add(
        (20, 20),
        b().prop_map(|active| Method::ChannelFlow(ChannelFlow { active }))
            .boxed(),
    );
    add(
        (20, 21),
        b().prop_map(|active| Method::ChannelFlowOk(ChannelFlowOk { active }))
            .boxed(),
    );
    add(
        (20, 40),
        (any::<u16>(), s(), any::<u16>(), any::<u16>())
            .prop_map(|(reply_code, reply_text, class_id, method_id)| {
                Method::ChannelClose(ChannelClose {
                    reply_code,
                    reply_text,
                    class_id,
                    method_id,
                })
            })
            .boxed(),
    );
    add((20, 41), unit(Method::ChannelCloseOk));

    // exchange (40)
    add(
        (40, 10),
        (s(), s(), b(), b(), b(), b(), b(), field_table())
            .prop_map(
                |(exchange, kind, passive, durable, auto_delete, internal, no_wait, arguments)| {
                    Method::ExchangeDeclare(ExchangeDeclare {
                        exchange,
                        kind,
                        passive,
                        durable,
                        auto_delete,
                        internal,
                        no_wait,
                        arguments,
                    })
                },
            )
            .boxed(),
    );
    add((40, 11), unit(Method::ExchangeDeclareOk));
    add(
        (40, 20),
        (s(), b(), b())
            .prop_map(|(exchange, if_unused, no_wait)| {
                Method::ExchangeDelete(ExchangeDelete {
                    exchange,
                    if_unused,
                    no_wait,
                })
            })
            .boxed(),
    );
    add((40, 21), unit(Method::ExchangeDeleteOk));
    add(
        (40, 30),
        (s(), s(), s(), b(), field_table())
            .prop_map(|(destination, source, routing_key, no_wait, arguments)| {
                Method::ExchangeBind(ExchangeBind {
                    destination,
                    source,
                    routing_key,
                    no_wait,
                    arguments,
                })
            })
            .boxed(),
    );
    add((40, 31), unit(Method::ExchangeBindOk));
    add(
        (40, 40),
        (s(), s(), s(), b(), field_table())
            .prop_map(|(destination, source, routing_key, no_wait, arguments)| {
                Method::ExchangeUnbind(ExchangeUnbind {
                    destination,
                    source,
                    routing_key,
                    no_wait,
                    arguments,
                })
            })
            .boxed(),
    );
    add((40, 51), unit(Method::ExchangeUnbindOk));

    // queue (50)
    add(
        (50, 10),
        (s(), b(), b(), b(), b(), b(), field_table())
            .prop_map(
                |(queue, passive, durable, exclusive, auto_delete, no_wait, arguments)| {
                    Method::QueueDeclare(QueueDeclare {
                        queue,
                        passive,
                        durable,
                        exclusive,
                        auto_delete,
                        no_wait,
                        arguments,
                    })
                },
            )
            .boxed(),
    );
    add(
        (50, 11),
        (s(), any::<u32>(), any::<u32>())
            .prop_map(|(queue, message_count, consumer_count)| {
                Method::QueueDeclareOk(QueueDeclareOk {
                    queue,
                    message_count,
                    consumer_count,
                })
            })
            .boxed(),
    );
    add(
        (50, 20),
        (s(), s(), s(), b(), field_table())
            .prop_map(|(queue, exchange, routing_key, no_wait, arguments)| {
                Method::QueueBind(QueueBind {
                    queue,
                    exchange,
                    routing_key,
                    no_wait,
                    arguments,
                })
            })
            .boxed(),
    );
    add((50, 21), unit(Method::QueueBindOk));
    add(
        (50, 50),
        (s(), s(), s(), field_table())
            .prop_map(|(queue, exchange, routing_key, arguments)| {
                Method::QueueUnbind(QueueUnbind {
                    queue,
                    exchange,
                    routing_key,
                    arguments,
                })
            })
            .boxed(),
    );
    add((50, 51), unit(Method::QueueUnbindOk));
    add(
        (50, 30),
        (s(), b())
            .prop_map(|(queue, no_wait)| Method::QueuePurge(QueuePurge { queue, no_wait }))
            .boxed(),
    );
    add(
        (50, 31),
        any::<u32>()
            .prop_map(|message_count| Method::QueuePurgeOk(QueuePurgeOk { message_count }))
            .boxed(),
    );
    add(
        (50, 40),
        (s(), b(), b(), b())
            .prop_map(|(queue, if_unused, if_empty, no_wait)| {
                Method::QueueDelete(QueueDelete {
                    queue,
                    if_unused,
                    if_empty,
                    no_wait,
                })
            })
            .boxed(),
    );
    add(
        (50, 41),
        any::<u32>()
            .prop_map(|message_count| Method::QueueDeleteOk(QueueDeleteOk { message_count }))
            .boxed(),
    );

    // basic (60)
    add(
        (60, 10),
        (any::<u32>(), any::<u16>(), b())
            .prop_map(|(prefetch_size, prefetch_count, global)| {
                Method::BasicQos(BasicQos {
                    prefetch_size,
                    prefetch_count,
                    global,
                })
            })
            .boxed(),
    );
    add((60, 11), unit(Method::BasicQosOk));
    add(
        (60, 20),
        (s(), s(), b(), b(), b(), b(), field_table())
            .prop_map(
                |(queue, consumer_tag, no_local, no_ack, exclusive, no_wait, arguments)| {
                    Method::BasicConsume(BasicConsume {
                        queue,
                        consumer_tag,
                        no_local,
                        no_ack,
                        exclusive,
                        no_wait,
                        arguments,
                    })
                },
            )
            .boxed(),
    );
    add(
        (60, 21),
        s().prop_map(|consumer_tag| Method::BasicConsumeOk(BasicConsumeOk { consumer_tag }))
            .boxed(),
    );
    add(
        (60, 30),
        (s(), b())
            .prop_map(|(consumer_tag, no_wait)| {
                Method::BasicCancel(BasicCancel {
                    consumer_tag,
                    no_wait,
                })
            })
            .boxed(),
    );
    add(
        (60, 31),
        s().prop_map(|consumer_tag| Method::BasicCancelOk(BasicCancelOk { consumer_tag }))
            .boxed(),
    );
    add(
        (60, 40),
        (s(), s(), b(), b())
            .prop_map(|(exchange, routing_key, mandatory, immediate)| {
                Method::BasicPublish(BasicPublish {
                    exchange,
                    routing_key,
                    mandatory,
                    immediate,
                })
            })
            .boxed(),
    );
    add(
        (60, 50),
        (any::<u16>(), s(), s(), s())
            .prop_map(|(reply_code, reply_text, exchange, routing_key)| {
                Method::BasicReturn(BasicReturn {
                    reply_code,
                    reply_text,
                    exchange,
                    routing_key,
                })
            })
            .boxed(),
    );
    add(
        (60, 60),
        (s(), any::<u64>(), b(), s(), s())
            .prop_map(
                |(consumer_tag, delivery_tag, redelivered, exchange, routing_key)| {
                    Method::BasicDeliver(BasicDeliver {
                        consumer_tag,
                        delivery_tag,
                        redelivered,
                        exchange,
                        routing_key,
                    })
                },
            )
            .boxed(),
    );
    add(
        (60, 70),
        (s(), b())
            .prop_map(|(queue, no_ack)| Method::BasicGet(BasicGet { queue, no_ack }))
            .boxed(),
    );
    add(
        (60, 71),
        (any::<u64>(), b(), s(), s(), any::<u32>())
            .prop_map(
                |(delivery_tag, redelivered, exchange, routing_key, message_count)| {
                    Method::BasicGetOk(BasicGetOk {
                        delivery_tag,
                        redelivered,
                        exchange,
                        routing_key,
                        message_count,
                    })
                },
            )
            .boxed(),
    );
    add((60, 72), unit(Method::BasicGetEmpty));
    add(
        (60, 80),
        (any::<u64>(), b())
            .prop_map(|(delivery_tag, multiple)| {
                Method::BasicAck(BasicAck {
                    delivery_tag,
                    multiple,
                })
            })
            .boxed(),
    );
    add(
        (60, 90),
        (any::<u64>(), b())
            .prop_map(|(delivery_tag, requeue)| {
                Method::BasicReject(BasicReject {
                    delivery_tag,
                    requeue,
                })
            })
            .boxed(),
    );
    add(
        (60, 100),
        b().prop_map(|requeue| Method::BasicRecoverAsync(BasicRecoverAsync { requeue }))
            .boxed(),
    );
    add(
        (60, 110),
        b().prop_map(|requeue| Method::BasicRecover(BasicRecover { requeue }))
            .boxed(),
    );
    add((60, 111), unit(Method::BasicRecoverOk));
    add(
        (60, 120),
        (any::<u64>(), b(), b())
            .prop_map(|(delivery_tag, multiple, requeue)| {
                Method::BasicNack(BasicNack {
                    delivery_tag,
                    multiple,
                    requeue,
                })
            })
            .boxed(),
    );

    // tx (90)
    add((90, 10), unit(Method::TxSelect));
    add((90, 11), unit(Method::TxSelectOk));
    add((90, 20), unit(Method::TxCommit));
    add((90, 21), unit(Method::TxCommitOk));
    add((90, 30), unit(Method::TxRollback));
    add((90, 31), unit(Method::TxRollbackOk));

    // confirm (85)
    add(
        (85, 10),
        b().prop_map(|no_wait| Method::ConfirmSelect(ConfirmSelect { no_wait }))
            .boxed(),
    );
    add((85, 11), unit(Method::ConfirmSelectOk));
    v
}

fn any_method() -> BoxedStrategy<Method> {
    Union::new(method_strategies().into_iter().map(|(_, st)| st)).boxed()
}

fn properties() -> BoxedStrategy<BasicProperties> {
    let o = || option::of(s());
    (
        (o(), o(), option::of(field_table()), option::of(any::<u8>())),
        (option::of(any::<u8>()), o(), o(), o(), o()),
        (option::of(any::<u64>()), o(), o(), o(), o()),
    )
        .prop_map(
            |(
                (content_type, content_encoding, headers, delivery_mode),
                (priority, correlation_id, reply_to, expiration, message_id),
                (timestamp, kind, user_id, app_id, cluster_id),
            )| BasicProperties {
                content_type,
                content_encoding,
                headers,
                delivery_mode,
                priority,
                correlation_id,
                reply_to,
                expiration,
                message_id,
                timestamp,
                kind,
                user_id,
                app_id,
                cluster_id,
            },
        )
        .boxed()
}

fn content_header() -> BoxedStrategy<ContentHeader> {
    (
        prop_oneof![4 => Just(60u16), 1 => any::<u16>()],
        any::<u64>(),
        properties(),
    )
        .prop_map(|(class_id, body_size, properties)| ContentHeader {
            class_id,
            body_size,
            properties,
        })
        .boxed()
}

fn any_frame() -> BoxedStrategy<Frame> {
    prop_oneof![
        4 => (any::<u16>(), any_method())
            .prop_map(|(channel, m)| Frame { channel, payload: FramePayload::Method(m) }),
        2 => (any::<u16>(), content_header())
            .prop_map(|(channel, h)| Frame { channel, payload: FramePayload::Header(h) }),
        2 => (any::<u16>(), vec(any::<u8>(), 0..4096))
            .prop_map(|(channel, b)| Frame { channel, payload: FramePayload::Body(b.into()) }),
        1 => Just(Frame { channel: 0, payload: FramePayload::Heartbeat }),
    ]
    .boxed()
}

/// Encodes one frame, decodes it back, and checks the buffer is fully consumed.
fn roundtrip_frame(frame: &Frame) -> Result<(), TestCaseError> {
    let mut buf = BytesMut::new();
    encode_frame(&mut buf, frame);
    let encoded_len = buf.len();
    let decoded = decode_frame(&mut buf, BIG_FRAME_MAX)
        .map_err(|e| TestCaseError::fail(format!("decode error {e:?}")))?;
    prop_assert_eq!(
        decoded.as_ref(),
        Some(frame),
        "encoded {} octets",
        encoded_len
    );
    prop_assert!(buf.is_empty(), "{} octets left over", buf.len());
    Ok(())
}

#[test]
fn covers_every_method_id() {
    let strategies = method_strategies();
    let listed: Vec<(u16, u16)> = strategies.iter().map(|(ids, _)| *ids).collect();
    let unique: BTreeSet<(u16, u16)> = listed.iter().copied().collect();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a method id pair is listed twice"
    );
    let all: BTreeSet<(u16, u16)> = ALL_METHOD_IDS.iter().copied().collect();
    assert_eq!(unique, all, "strategies must cover exactly ALL_METHOD_IDS");
    // Each strategy really produces the method it is listed under.
    let mut runner = TestRunner::deterministic();
    for ((class_id, method_id), st) in &strategies {
        for _ in 0..8 {
            let m = st.new_tree(&mut runner).unwrap().current();
            assert_eq!((m.class_id(), m.method_id()), (*class_id, *method_id));
            roundtrip_frame(&Frame {
                channel: 1,
                payload: FramePayload::Method(m),
            })
            .unwrap();
        }
    }
}

/// Every value of every type tag appears in the generated tables.
#[test]
fn field_values_cover_every_type_tag() {
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeSet::new();
    let st = field_value();
    for _ in 0..2000 {
        seen.insert(st.new_tree(&mut runner).unwrap().current().tag());
    }
    let all: BTreeSet<u8> = b"tbBsuIilfdDSATFVx".iter().copied().collect();
    assert_eq!(seen, all);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn methods_roundtrip(channel in any::<u16>(), m in any_method()) {
        roundtrip_frame(&Frame { channel, payload: FramePayload::Method(m) })?;
    }

    #[test]
    fn content_headers_roundtrip(channel in any::<u16>(), h in content_header()) {
        roundtrip_frame(&Frame { channel, payload: FramePayload::Header(h) })?;
    }

    #[test]
    fn nested_field_tables_roundtrip(table in field_table(), array in vec(field_value(), 0..8)) {
        // Carried in a queue.declare's arguments, and as an array inside headers.
        let declare = Method::QueueDeclare(QueueDeclare {
            queue: "q".into(),
            arguments: table.clone(),
            ..QueueDeclare::default()
        });
        roundtrip_frame(&Frame { channel: 3, payload: FramePayload::Method(declare) })?;
        let mut headers = table;
        headers.push("arr".into(), FieldValue::Array(array));
        let header = ContentHeader {
            class_id: 60,
            body_size: 0,
            properties: BasicProperties { headers: Some(headers), ..BasicProperties::default() },
        };
        roundtrip_frame(&Frame { channel: 3, payload: FramePayload::Header(header) })?;
    }

    #[test]
    fn frames_roundtrip_back_to_back(frames in vec(any_frame(), 1..12)) {
        let mut buf = BytesMut::new();
        for f in &frames {
            encode_frame(&mut buf, f);
        }
        for (n, f) in frames.iter().enumerate() {
            let decoded = decode_frame(&mut buf, BIG_FRAME_MAX)
                .map_err(|e| TestCaseError::fail(format!("frame {n}: {e:?}")))?;
            prop_assert_eq!(decoded.as_ref(), Some(f), "frame {}", n);
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(decode_frame(&mut buf, BIG_FRAME_MAX), Ok(None));
    }

    /// A whole publish: method, header and the body split over several body frames.
    #[test]
    fn publish_with_chunked_body_roundtrips(
        publish in (s(), s(), b(), b()),
        props in properties(),
        body in vec(any::<u8>(), 0..20_000),
        chunk in 1usize..5000,
    ) {
        let (exchange, routing_key, mandatory, immediate) = publish;
        let mut frames = vec![
            Frame { channel: 7, payload: FramePayload::Method(Method::BasicPublish(BasicPublish {
                exchange, routing_key, mandatory, immediate,
            })) },
            Frame { channel: 7, payload: FramePayload::Header(ContentHeader {
                class_id: 60, body_size: body.len() as u64, properties: props,
            }) },
        ];
        for piece in body.chunks(chunk) {
            frames.push(Frame { channel: 7, payload: FramePayload::Body(Bytes::copy_from_slice(piece)) });
        }
        let mut buf = BytesMut::new();
        for f in &frames {
            encode_frame(&mut buf, f);
        }
        let mut reassembled = Vec::new();
        for f in &frames {
            let got = decode_frame(&mut buf, BIG_FRAME_MAX).unwrap().unwrap();
            if let FramePayload::Body(b) = &got.payload {
                reassembled.extend_from_slice(b);
            }
            prop_assert_eq!(&got, f);
        }
        prop_assert_eq!(reassembled, body);
        prop_assert!(buf.is_empty());
    }
}
