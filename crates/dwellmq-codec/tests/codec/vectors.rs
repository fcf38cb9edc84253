//! Byte vectors derived by hand from the AMQP 0-9-1 spec (section 4.2 framing, the class
//! reference for argument order, RabbitMQ's field-table tags). Each vector must decode to the
//! expected value and the value must encode to exactly these bytes.
//!
//! Frame layout: type (1) | channel (2) | payload size (4) | payload | 0xCE.
//! Method payload: class id (2) | method id (2) | arguments; consecutive bit arguments share
//! one octet, first bit in the least significant position.

use bytes::{Bytes, BytesMut};
use dwellmq_codec::methods::*;
use dwellmq_codec::{
    decode_frame, encode_frame, encode_header_raw, BasicProperties, ContentHeader, FieldTable,
    FieldValue, Frame, FramePayload, Method, ShortStr,
};

const FRAME_MAX: u32 = 131_072;

/// Concatenates the pieces of a vector (lets each line carry its own comment).
fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// `bytes` decodes to exactly `frames` (nothing left over) and `frames` encode to `bytes`.
fn check(bytes: &[u8], frames: &[Frame]) {
    let mut buf = BytesMut::from(bytes);
    for (n, expected) in frames.iter().enumerate() {
        let got = decode_frame(&mut buf, FRAME_MAX)
            .unwrap_or_else(|e| panic!("frame {n}: {e}"))
            .unwrap_or_else(|| panic!("frame {n}: incomplete"));
        assert_eq!(&got, expected, "frame {n}");
    }
    assert!(buf.is_empty(), "{} octets left over", buf.len());

    let mut out = BytesMut::new();
    for f in frames {
        encode_frame(&mut out, f);
    }
    assert_eq!(&out[..], bytes, "encoding differs");
}

fn method(channel: u16, m: Method) -> Frame {
    Frame {
        channel,
        payload: FramePayload::Method(m),
    }
}

#[test]
fn connection_start_as_rabbitmq_sends_it() {
    // server-properties: {product: S "dwellmq", capabilities: F {publisher_confirms: t true}}
    //   "product" entry:       1 + 7 (key) + 1 (tag) + 4 + 7 (value)            = 20
    //   inner table content:   1 + 18 (key) + 1 (tag) + 1 (value)               = 21
    //   "capabilities" entry:  1 + 12 (key) + 1 (tag) + 4 + 21 (inner table)   = 39
    //   table content 20 + 39 = 59 = 0x3b
    // payload: 4 (ids) + 2 (version) + 4 + 59 (table) + 4 + 14 (mechanisms) + 4 + 5 (locales)
    //        = 96 = 0x60
    let bytes = cat(&[
        &[0x01],                   // frame type 1: method
        &[0x00, 0x00],             // channel 0
        &[0x00, 0x00, 0x00, 0x60], // payload size 96
        &[0x00, 0x0a],             // class 10: connection
        &[0x00, 0x0a],             // method 10: start
        &[0x00],                   // version-major 0
        &[0x09],                   // version-minor 9
        &[0x00, 0x00, 0x00, 0x3b], // server-properties: table of 59 octets
        &[0x07],
        b"product", //   key "product"
        b"S",
        &[0x00, 0x00, 0x00, 0x07],
        b"dwellmq", //   long string "dwellmq"
        &[0x0c],
        b"capabilities", //   key "capabilities"
        b"F",
        &[0x00, 0x00, 0x00, 0x15], //   nested table of 21 octets
        &[0x12],
        b"publisher_confirms", //     key "publisher_confirms"
        b"t",
        &[0x01], //     boolean true
        &[0x00, 0x00, 0x00, 0x0e],
        b"PLAIN AMQPLAIN", // mechanisms (longstr, 14)
        &[0x00, 0x00, 0x00, 0x05],
        b"en_US", // locales (longstr, 5)
        &[0xce],  // frame end
    ]);
    assert_eq!(bytes.len(), 96 + 8);

    let mut capabilities = FieldTable::new();
    capabilities.insert("publisher_confirms", true);
    let mut server_properties = FieldTable::new();
    server_properties.insert("product", "dwellmq");
    server_properties.insert("capabilities", capabilities);
    check(
        &bytes,
        &[method(
            0,
            Method::ConnectionStart(ConnectionStart {
                version_major: 0,
                version_minor: 9,
                server_properties,
                mechanisms: Bytes::from_static(b"PLAIN AMQPLAIN"),
                locales: Bytes::from_static(b"en_US"),
            }),
        )],
    );
}

#[test]
fn connection_tune() {
    // payload: 4 (ids) + 2 + 4 + 2 = 12
    let bytes = cat(&[
        &[0x01],                   // method frame
        &[0x00, 0x00],             // channel 0
        &[0x00, 0x00, 0x00, 0x0c], // payload size 12
        &[0x00, 0x0a, 0x00, 0x1e], // connection (10) . tune (30)
        &[0x07, 0xff],             // channel-max 2047
        &[0x00, 0x02, 0x00, 0x00], // frame-max 131072
        &[0x00, 0x3c],             // heartbeat 60 s
        &[0xce],
    ]);
    check(
        &bytes,
        &[method(
            0,
            Method::ConnectionTune(ConnectionTune {
                channel_max: 2047,
                frame_max: 131_072,
                heartbeat: 60,
            }),
        )],
    );
}

#[test]
fn connection_open() {
    // payload: 4 (ids) + 2 (vhost "/") + 1 (reserved shortstr) + 1 (reserved bit) = 8
    let bytes = cat(&[
        &[0x01, 0x00, 0x00],       // method frame, channel 0
        &[0x00, 0x00, 0x00, 0x08], // payload size 8
        &[0x00, 0x0a, 0x00, 0x28], // connection (10) . open (40)
        &[0x01, b'/'],             // virtual-host "/"
        &[0x00],                   // reserved-1 (capabilities): empty shortstr
        &[0x00],                   // reserved-2 (insist): bit 0
        &[0xce],
    ]);
    check(
        &bytes,
        &[method(
            0,
            Method::ConnectionOpen(ConnectionOpen {
                virtual_host: "/".into(),
            }),
        )],
    );
}

#[test]
fn channel_open_and_close() {
    // channel.open: 4 (ids) + 1 (reserved out-of-band shortstr) = 5
    let open = cat(&[
        &[0x01, 0x00, 0x01],       // method frame, channel 1
        &[0x00, 0x00, 0x00, 0x05], // payload size 5
        &[0x00, 0x14, 0x00, 0x0a], // channel (20) . open (10)
        &[0x00],                   // reserved-1: empty shortstr
        &[0xce],
    ]);
    check(&open, &[method(1, Method::ChannelOpen)]);

    // channel.close: 4 + 2 (code) + 1 + 24 (text) + 2 (class) + 2 (method) = 35 = 0x23
    let close = cat(&[
        &[0x01, 0x00, 0x01],       // method frame, channel 1
        &[0x00, 0x00, 0x00, 0x23], // payload size 35
        &[0x00, 0x14, 0x00, 0x28], // channel (20) . close (40)
        &[0x01, 0x94],             // reply-code 404
        &[0x18],
        b"NOT_FOUND - no queue 'x'", // reply-text (24)
        &[0x00, 0x32],               // class-id 50 (queue)
        &[0x00, 0x0a],               // method-id 10 (declare)
        &[0xce],
    ]);
    check(
        &close,
        &[method(
            1,
            Method::ChannelClose(ChannelClose {
                reply_code: 404,
                reply_text: "NOT_FOUND - no queue 'x'".into(),
                class_id: 50,
                method_id: 10,
            }),
        )],
    );
}

#[test]
fn queue_declare_with_arguments() {
    // arguments: {x-message-ttl: I 60000, x-dead-letter-exchange: S "dlx"}
    //   entry 1: 1 + 13 (key) + 1 (tag) + 4          = 19
    //   entry 2: 1 + 22 (key) + 1 (tag) + 4 + 3      = 31
    //   table content 50 = 0x32
    // payload: 4 (ids) + 2 (reserved) + 7 (queue) + 1 (bits) + 4 + 50 (table) = 68 = 0x44
    let bytes = cat(&[
        &[0x01, 0x00, 0x01],       // method frame, channel 1
        &[0x00, 0x00, 0x00, 0x44], // payload size 68
        &[0x00, 0x32, 0x00, 0x0a], // queue (50) . declare (10)
        &[0x00, 0x00],             // reserved-1 (ticket)
        &[0x06],
        b"orders", // queue "orders"
        // bits: passive(0)=0 durable(1)=1 exclusive(2)=0 auto-delete(3)=0 no-wait(4)=0
        &[0b0000_0010],
        &[0x00, 0x00, 0x00, 0x32], // arguments: table of 50 octets
        &[0x0d],
        b"x-message-ttl",
        b"I",                      // signed 32-bit (RabbitMQ's tag)
        &[0x00, 0x00, 0xea, 0x60], // 60000
        &[0x16],
        b"x-dead-letter-exchange",
        b"S",
        &[0x00, 0x00, 0x00, 0x03],
        b"dlx",
        &[0xce],
    ]);
    let mut arguments = FieldTable::new();
    arguments.insert("x-message-ttl", FieldValue::I32(60_000));
    arguments.insert("x-dead-letter-exchange", "dlx");
    check(
        &bytes,
        &[method(
            1,
            Method::QueueDeclare(QueueDeclare {
                queue: "orders".into(),
                durable: true,
                arguments,
                ..QueueDeclare::default()
            }),
        )],
    );
}

#[test]
fn basic_publish_header_and_body() {
    // basic.publish payload: 4 (ids) + 2 (reserved) + 1 (exchange "") + 7 (routing key)
    //                        + 1 (bits) = 15 = 0x0f
    // content header payload: 2 (class) + 2 (weight) + 8 (body size) + 2 (flags)
    //                         + 11 (content-type) + 1 (delivery-mode) = 26 = 0x1a
    let bytes = cat(&[
        // --- method frame ---
        &[0x01, 0x00, 0x01],       // method frame, channel 1
        &[0x00, 0x00, 0x00, 0x0f], // payload size 15
        &[0x00, 0x3c, 0x00, 0x28], // basic (60) . publish (40)
        &[0x00, 0x00],             // reserved-1 (ticket)
        &[0x00],                   // exchange "" (default exchange)
        &[0x06],
        b"orders",      // routing-key "orders"
        &[0b0000_0001], // mandatory(0)=1 immediate(1)=0
        &[0xce],
        // --- content header frame ---
        &[0x02, 0x00, 0x01],       // header frame, channel 1
        &[0x00, 0x00, 0x00, 0x1a], // payload size 26
        &[0x00, 0x3c],             // class 60
        &[0x00, 0x00],             // weight 0
        &[0, 0, 0, 0, 0, 0, 0, 5], // body size 5
        // property flags: content-type (bit 15) | delivery-mode (bit 12)
        &[0b1001_0000, 0b0000_0000],
        &[0x0a],
        b"text/plain", // content-type
        &[0x02],       // delivery-mode 2 (persistent)
        &[0xce],
        // --- body frame ---
        &[0x03, 0x00, 0x01],       // body frame, channel 1
        &[0x00, 0x00, 0x00, 0x05], // payload size 5
        b"hello",
        &[0xce],
    ]);
    let properties = BasicProperties {
        content_type: Some("text/plain".into()),
        delivery_mode: Some(2),
        ..BasicProperties::default()
    };
    check(
        &bytes,
        &[
            method(
                1,
                Method::BasicPublish(BasicPublish {
                    exchange: ShortStr::EMPTY,
                    routing_key: "orders".into(),
                    mandatory: true,
                    immediate: false,
                }),
            ),
            Frame {
                channel: 1,
                payload: FramePayload::Header(ContentHeader {
                    class_id: 60,
                    body_size: 5,
                    properties: properties.clone(),
                }),
            },
            Frame {
                channel: 1,
                payload: FramePayload::Body(Bytes::from_static(b"hello")),
            },
        ],
    );

    // The pre-encoded header path writes the same header frame.
    let mut props = BytesMut::new();
    properties.encode(&mut props);
    let mut out = BytesMut::new();
    encode_header_raw(&mut out, 1, 60, 5, &props);
    assert_eq!(&out[..], &bytes[23..23 + 34]);
}

#[test]
fn content_header_with_every_property() {
    // flags: all 14 properties = bits 15..2 set = 0xfffc
    // payload: 12 + 2 (flags) + 2 (ct) + 2 (ce) + 4 + 0 (headers) + 1 + 1
    //          + 2 (corr) + 2 (reply-to) + 5 (exp) + 2 (msg id) + 8 (ts) + 2 (type)
    //          + 2 (user) + 2 (app) + 2 (cluster) = 51 = 0x33
    let bytes = cat(&[
        &[0x02, 0x00, 0x05],             // header frame, channel 5
        &[0x00, 0x00, 0x00, 0x33],       // payload size 51
        &[0x00, 0x3c, 0x00, 0x00],       // class 60, weight 0
        &[0, 0, 0, 0, 0, 0, 0x01, 0x00], // body size 256
        &[0xff, 0xfc],                   // all 14 property bits
        &[0x01, b'a'],                   // content-type "a"
        &[0x01, b'b'],                   // content-encoding "b"
        &[0x00, 0x00, 0x00, 0x00],       // headers: empty table
        &[0x01],                         // delivery-mode 1
        &[0x09],                         // priority 9
        &[0x01, b'c'],                   // correlation-id "c"
        &[0x01, b'r'],                   // reply-to "r"
        &[0x04],
        b"1000",                                           // expiration "1000"
        &[0x01, b'm'],                                     // message-id "m"
        &[0x00, 0x00, 0x00, 0x00, 0x65, 0x53, 0xf1, 0x00], // timestamp 1700000000
        &[0x01, b't'],                                     // type "t"
        &[0x01, b'u'],                                     // user-id "u"
        &[0x01, b'p'],                                     // app-id "p"
        &[0x01, b'k'],                                     // cluster-id (reserved) "k"
        &[0xce],
    ]);
    check(
        &bytes,
        &[Frame {
            channel: 5,
            payload: FramePayload::Header(ContentHeader {
                class_id: 60,
                body_size: 256,
                properties: BasicProperties {
                    content_type: Some("a".into()),
                    content_encoding: Some("b".into()),
                    headers: Some(FieldTable::new()),
                    delivery_mode: Some(1),
                    priority: Some(9),
                    correlation_id: Some("c".into()),
                    reply_to: Some("r".into()),
                    expiration: Some("1000".into()),
                    message_id: Some("m".into()),
                    timestamp: Some(1_700_000_000),
                    kind: Some("t".into()),
                    user_id: Some("u".into()),
                    app_id: Some("p".into()),
                    cluster_id: Some("k".into()),
                },
            }),
        }],
    );
}

#[test]
fn basic_deliver() {
    // payload: 4 (ids) + 7 (consumer tag) + 8 (delivery tag) + 1 (bits) + 1 (exchange "")
    //          + 7 (routing key) = 28 = 0x1c
    let bytes = cat(&[
        &[0x01, 0x00, 0x01],       // method frame, channel 1
        &[0x00, 0x00, 0x00, 0x1c], // payload size 28
        &[0x00, 0x3c, 0x00, 0x3c], // basic (60) . deliver (60)
        &[0x06],
        b"ctag-1",                 // consumer-tag
        &[0, 0, 0, 0, 0, 0, 0, 1], // delivery-tag 1
        &[0b0000_0001],            // redelivered = true
        &[0x00],                   // exchange ""
        &[0x06],
        b"orders", // routing-key
        &[0xce],
    ]);
    check(
        &bytes,
        &[method(
            1,
            Method::BasicDeliver(BasicDeliver {
                consumer_tag: "ctag-1".into(),
                delivery_tag: 1,
                redelivered: true,
                exchange: ShortStr::EMPTY,
                routing_key: "orders".into(),
            }),
        )],
    );
}

#[test]
fn basic_ack_with_multiple() {
    // payload: 4 (ids) + 8 (delivery tag) + 1 (bits) = 13 = 0x0d
    let bytes = cat(&[
        &[0x01, 0x00, 0x02],             // method frame, channel 2
        &[0x00, 0x00, 0x00, 0x0d],       // payload size 13
        &[0x00, 0x3c, 0x00, 0x50],       // basic (60) . ack (80)
        &[0, 0, 0, 0, 0, 0, 0x01, 0x2c], // delivery-tag 300
        &[0b0000_0001],                  // multiple = true
        &[0xce],
    ]);
    check(
        &bytes,
        &[method(
            2,
            Method::BasicAck(BasicAck {
                delivery_tag: 300,
                multiple: true,
            }),
        )],
    );
}

#[test]
fn basic_nack_bits() {
    // payload: 4 (ids) + 8 (delivery tag) + 1 (bits: multiple bit 0, requeue bit 1) = 13
    for (bits, multiple, requeue) in [
        (0b00u8, false, false),
        (0b01, true, false),
        (0b10, false, true),
        (0b11, true, true),
    ] {
        let bytes = cat(&[
            &[0x01, 0x00, 0x01],       // method frame, channel 1
            &[0x00, 0x00, 0x00, 0x0d], // payload size 13
            &[0x00, 0x3c, 0x00, 0x78], // basic (60) . nack (120)
            &[0, 0, 0, 0, 0, 0, 0, 7], // delivery-tag 7
            &[bits],
            &[0xce],
        ]);
        check(
            &bytes,
            &[method(
                1,
                Method::BasicNack(BasicNack {
                    delivery_tag: 7,
                    multiple,
                    requeue,
                }),
            )],
        );
    }
}

#[test]
fn exchange_bind() {
    // payload: 4 (ids) + 2 (reserved) + 4 ("dst") + 4 ("src") + 5 ("rk.#") + 1 (bits)
    //          + 4 (empty table) = 24 = 0x18
    let bytes = cat(&[
        &[0x01, 0x00, 0x02],       // method frame, channel 2
        &[0x00, 0x00, 0x00, 0x18], // payload size 24
        &[0x00, 0x28, 0x00, 0x1e], // exchange (40) . bind (30)
        &[0x00, 0x00],             // reserved-1
        &[0x03],
        b"dst", // destination
        &[0x03],
        b"src", // source
        &[0x04],
        b"rk.#",                   // routing-key
        &[0b0000_0000],            // no-wait = false
        &[0x00, 0x00, 0x00, 0x00], // arguments: empty table
        &[0xce],
    ]);
    check(
        &bytes,
        &[method(
            2,
            Method::ExchangeBind(ExchangeBind {
                destination: "dst".into(),
                source: "src".into(),
                routing_key: "rk.#".into(),
                no_wait: false,
                arguments: FieldTable::new(),
            }),
        )],
    );
}

#[test]
fn confirm_select_nowait() {
    let bytes = cat(&[
        &[0x01, 0x00, 0x01],       // method frame, channel 1
        &[0x00, 0x00, 0x00, 0x05], // payload size 5
        &[0x00, 0x55, 0x00, 0x0a], // confirm (85) . select (10)
        &[0b0000_0001],            // nowait = true
        &[0xce],
    ]);
    check(
        &bytes,
        &[method(
            1,
            Method::ConfirmSelect(ConfirmSelect { no_wait: true }),
        )],
    );
}

#[test]
fn basic_qos() {
    // payload: 4 (ids) + 4 (prefetch-size) + 2 (prefetch-count) + 1 (global) = 11
    let bytes = cat(&[
        &[0x01, 0x00, 0x01],       // method frame, channel 1
        &[0x00, 0x00, 0x00, 0x0b], // payload size 11
        &[0x00, 0x3c, 0x00, 0x0a], // basic (60) . qos (10)
        &[0x00, 0x00, 0x00, 0x00], // prefetch-size 0
        &[0x00, 0x0a],             // prefetch-count 10
        &[0x00],                   // global = false
        &[0xce],
    ]);
    check(
        &bytes,
        &[method(
            1,
            Method::BasicQos(BasicQos {
                prefetch_size: 0,
                prefetch_count: 10,
                global: false,
            }),
        )],
    );
}

#[test]
fn heartbeat() {
    let bytes = [
        0x08, // frame type 8: heartbeat
        0x00, 0x00, // channel 0
        0x00, 0x00, 0x00, 0x00, // empty payload
        0xce,
    ];
    check(
        &bytes,
        &[Frame {
            channel: 0,
            payload: FramePayload::Heartbeat,
        }],
    );
}

#[test]
fn rabbitmq_field_tags_in_a_table() {
    // One value of every RabbitMQ tag, in a connection.start-ok's client-properties.
    // entries (key "a".."q", each 1 + 1 key octets + 1 tag octet = 3, then the value):
    //   t 1, b 1, B 1, s 2, u 2, I 4, i 4, l 8, f 4, d 8, D 5, S 4+2, A 4+(1+1)+(1+2),
    //   T 8, F 4+(1+1+1+0), V 0, x 4+1
    let table = cat(&[
        &[0x00, 0x00, 0x00, 0x7e],       // table length 126 (checked below)
        &[0x01, b'a', b't', 0x01],       // bool true
        &[0x01, b'b', b'b', 0xfe],       // i8 -2
        &[0x01, b'c', b'B', 0xfe],       // u8 254
        &[0x01, b'd', b's', 0xff, 0xfe], // i16 -2
        &[0x01, b'e', b'u', 0xff, 0xfe], // u16 65534
        &[0x01, b'f', b'I', 0xff, 0xff, 0xff, 0xfe], // i32 -2
        &[0x01, b'g', b'i', 0xff, 0xff, 0xff, 0xfe], // u32 4294967294
        &[
            0x01, b'h', b'l', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe,
        ], // i64 -2
        &[0x01, b'i', b'f', 0x3f, 0xc0, 0x00, 0x00], // f32 1.5
        &[0x01, b'j', b'd', 0x40, 0x04, 0, 0, 0, 0, 0, 0], // f64 2.5
        &[0x01, b'k', b'D', 0x02, 0x00, 0x00, 0x04, 0xd2], // decimal 12.34 (scale 2, 1234)
        &[0x01, b'l', b'S', 0x00, 0x00, 0x00, 0x02, b'h', b'i'], // long string "hi"
        &[0x01, b'm', b'A', 0x00, 0x00, 0x00, 0x05], // array of 5 octets:
        &[b't', 0x00],                   //   bool false
        &[b'u', 0x00, 0x07],             //   u16 7
        &[0x01, b'n', b'T', 0, 0, 0, 0, 0x65, 0x53, 0xf1, 0x00], // timestamp 1700000000
        &[0x01, b'o', b'F', 0x00, 0x00, 0x00, 0x03], // nested table of 3 octets:
        &[0x01, b'z', b'V'],             //   z: void
        &[0x01, b'p', b'V'],             // void
        &[0x01, b'q', b'x', 0x00, 0x00, 0x00, 0x01, 0x00], // byte array [0]
    ]);
    assert_eq!(table.len() - 4, 0x7e);
    // payload: 4 (ids) + table + 1 + 5 ("PLAIN") + 4 + 0 (response) + 1 + 5 ("en_US")
    let payload_len = 4 + table.len() + 6 + 4 + 6;
    let bytes = cat(&[
        &[0x01, 0x00, 0x00],
        &(payload_len as u32).to_be_bytes(),
        &[0x00, 0x0a, 0x00, 0x0b], // connection (10) . start-ok (11)
        &table,
        &[0x05],
        b"PLAIN",
        &[0x00, 0x00, 0x00, 0x00], // response: empty longstr
        &[0x05],
        b"en_US",
        &[0xce],
    ]);

    let mut nested = FieldTable::new();
    nested.insert("z", FieldValue::Void);
    let client_properties: FieldTable = [
        ("a", FieldValue::Bool(true)),
        ("b", FieldValue::I8(-2)),
        ("c", FieldValue::U8(254)),
        ("d", FieldValue::I16(-2)),
        ("e", FieldValue::U16(65534)),
        ("f", FieldValue::I32(-2)),
        ("g", FieldValue::U32(4_294_967_294)),
        ("h", FieldValue::I64(-2)),
        ("i", FieldValue::F32(1.5)),
        ("j", FieldValue::F64(2.5)),
        (
            "k",
            FieldValue::Decimal {
                scale: 2,
                value: 1234,
            },
        ),
        ("l", FieldValue::LongStr(Bytes::from_static(b"hi"))),
        (
            "m",
            FieldValue::Array(vec![FieldValue::Bool(false), FieldValue::U16(7)]),
        ),
        ("n", FieldValue::Timestamp(1_700_000_000)),
        ("o", FieldValue::Table(nested)),
        ("p", FieldValue::Void),
        ("q", FieldValue::Bytes(Bytes::from_static(&[0]))),
    ]
    .into_iter()
    .collect();
    check(
        &bytes,
        &[method(
            0,
            Method::ConnectionStartOk(ConnectionStartOk {
                client_properties,
                mechanism: "PLAIN".into(),
                response: Bytes::new(),
                locale: "en_US".into(),
            }),
        )],
    );
}
