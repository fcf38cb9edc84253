//! Bodies, long strings, short strings and table values are slices of the read buffer.

use crate::common::{encode_all, method, publish_triple};
use bytes::{Bytes, BytesMut};
use dwellmq_codec::methods::*;
use dwellmq_codec::{decode_frame, FieldValue, FramePayload, Method};

/// Whether `part` lies inside the memory range `[start, start + len)`.
fn points_into(part: &[u8], start: *const u8, len: usize) -> bool {
    let p = part.as_ptr() as usize;
    let s = start as usize;
    p >= s && p + part.len() <= s + len
}

#[test]
fn body_frame_is_a_slice_of_the_read_buffer() {
    let body: Vec<u8> = (0..10_000u32).map(|n| (n * 7) as u8).collect();
    let bytes = encode_all(&publish_triple(&body));
    let mut buf = BytesMut::with_capacity(bytes.len() + 64);
    buf.extend_from_slice(&bytes);
    let start = buf.as_ptr();
    let len = buf.len();
    let mut got = Vec::new();
    while let Some(f) = decode_frame(&mut buf, 1 << 20).unwrap() {
        got.push(f);
    }
    let FramePayload::Body(decoded) = &got[2].payload else {
        panic!("third frame is not a body");
    };
    assert_eq!(&decoded[..], &body[..]);
    // The body is exactly where it sat in the buffer: after the method frame, the header
    // frame and the 7-octet body frame header.
    let body_offset = len - body.len() - 1;
    assert_eq!(decoded.as_ptr(), start.wrapping_add(body_offset));
    assert!(points_into(decoded, start, len));

    // The short strings of the publish method too.
    let FramePayload::Method(Method::BasicPublish(p)) = &got[0].payload else {
        panic!("first frame is not basic.publish");
    };
    assert!(points_into(p.exchange.as_bytes(), start, len));
    assert!(points_into(p.routing_key.as_bytes(), start, len));
    let FramePayload::Header(h) = &got[1].payload else {
        panic!("second frame is not a header");
    };
    let ct = h.properties.content_type.as_ref().unwrap();
    assert!(points_into(ct.as_bytes(), start, len));
}

#[test]
fn long_strings_and_table_values_are_slices_of_the_read_buffer() {
    let secret = vec![0xabu8; 3000];
    let blob = vec![0x5au8; 500];
    let mut server_properties = dwellmq_codec::FieldTable::new();
    server_properties.insert(
        "cluster_name",
        FieldValue::LongStr(Bytes::from(vec![b'c'; 400])),
    );
    server_properties.insert("blob", FieldValue::Bytes(Bytes::from(blob.clone())));
    server_properties.insert(
        "list",
        FieldValue::Array(vec![FieldValue::LongStr(Bytes::from_static(b"in-array"))]),
    );
    let frames = [
        method(
            0,
            Method::ConnectionStart(ConnectionStart {
                version_major: 0,
                version_minor: 9,
                server_properties,
                mechanisms: Bytes::from_static(b"PLAIN AMQPLAIN"),
                locales: Bytes::from_static(b"en_US"),
            }),
        ),
        method(
            0,
            Method::ConnectionSecureOk(ConnectionSecureOk {
                response: Bytes::from(secret.clone()),
            }),
        ),
    ];
    let bytes = encode_all(&frames);
    let mut buf = BytesMut::with_capacity(bytes.len());
    buf.extend_from_slice(&bytes);
    let (start, len) = (buf.as_ptr(), buf.len());

    let f = decode_frame(&mut buf, 1 << 20).unwrap().unwrap();
    let FramePayload::Method(Method::ConnectionStart(start_m)) = &f.payload else {
        panic!("expected connection.start");
    };
    assert!(points_into(&start_m.mechanisms, start, len));
    assert!(points_into(&start_m.locales, start, len));
    for (key, value) in start_m.server_properties.iter() {
        assert!(points_into(key.as_bytes(), start, len), "key {key}");
        match value {
            FieldValue::LongStr(b) | FieldValue::Bytes(b) => {
                assert!(points_into(b, start, len), "{key}")
            }
            FieldValue::Array(items) => {
                let FieldValue::LongStr(b) = &items[0] else {
                    panic!()
                };
                assert!(points_into(b, start, len));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    match start_m.server_properties.get("blob") {
        Some(FieldValue::Bytes(b)) => assert_eq!(&b[..], &blob[..]),
        other => panic!("{other:?}"),
    }

    let f = decode_frame(&mut buf, 1 << 20).unwrap().unwrap();
    let FramePayload::Method(Method::ConnectionSecureOk(ok)) = &f.payload else {
        panic!("expected connection.secure-ok");
    };
    assert_eq!(&ok.response[..], &secret[..]);
    assert!(points_into(&ok.response, start, len));
}
