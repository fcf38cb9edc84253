//! Decoding a publish (method + header + body) and encoding a delivery, per message.
//!
//! `cargo bench -p dwellmq-codec -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dwellmq_codec::methods::{BasicDeliver, BasicPublish};
use dwellmq_codec::{
    decode_frame, encode_body, encode_header, encode_header_raw, encode_method, BasicProperties,
    ContentHeader, Method, ShortStr,
};

const SIZES: [(usize, &str); 3] = [(16, "16B"), (1024, "1KiB"), (64 * 1024, "64KiB")];
const FRAME_MAX: u32 = 128 * 1024;

fn properties() -> BasicProperties {
    BasicProperties {
        content_type: Some("application/json".into()),
        delivery_mode: Some(2),
        ..BasicProperties::default()
    }
}

/// The wire bytes of a basic.publish + content header + one body frame, as a client sends it.
fn publish_triple(body_len: usize) -> Bytes {
    let mut buf = BytesMut::new();
    encode_method(
        &mut buf,
        1,
        &Method::BasicPublish(BasicPublish {
            exchange: "amq.direct".into(),
            routing_key: "orders.created".into(),
            mandatory: false,
            immediate: false,
        }),
    );
    encode_header(
        &mut buf,
        1,
        &ContentHeader {
            class_id: 60,
            body_size: body_len as u64,
            properties: properties(),
        },
    );
    encode_body(&mut buf, 1, &vec![0x42; body_len]);
    buf.freeze()
}

fn decode_publish(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode_publish_triple");
    group.throughput(Throughput::Elements(1));
    for (size, name) in SIZES {
        let wire = publish_triple(size);
        // One read buffer, refilled each iteration like a socket read would; the decoded
        // frames are dropped before the next refill, so it reuses its allocation.
        let mut buf = BytesMut::with_capacity(wire.len());
        group.bench_with_input(BenchmarkId::from_parameter(name), &wire, |b, wire| {
            b.iter(|| {
                buf.extend_from_slice(wire);
                for _ in 0..3 {
                    let frame = decode_frame(&mut buf, FRAME_MAX);
                    debug_assert!(matches!(frame, Ok(Some(_))));
                    black_box(&frame);
                }
                debug_assert!(buf.is_empty());
            })
        });
    }
    group.finish();
}

fn encode_deliver(c: &mut Criterion) {
    let mut group = c.benchmark_group("encode_deliver_triple");
    group.throughput(Throughput::Elements(1));
    // Properties are encoded once per message and reused for every delivery.
    let mut props = BytesMut::new();
    properties().encode(&mut props);
    let props = props.freeze();
    let consumer_tag = ShortStr::from("amq.ctag-XW3kFz8iJq1PpRY8a0nS1A");
    let exchange = ShortStr::from("amq.direct");
    let routing_key = ShortStr::from("orders.created");
    for (size, name) in SIZES {
        let body = Bytes::from(vec![0x42; size]);
        let mut out = BytesMut::with_capacity(size + 256);
        let mut tag = 0u64;
        group.bench_with_input(BenchmarkId::from_parameter(name), &body, |b, body| {
            b.iter(|| {
                out.clear();
                tag += 1;
                let deliver = Method::BasicDeliver(BasicDeliver {
                    consumer_tag: consumer_tag.clone(),
                    delivery_tag: tag,
                    redelivered: false,
                    exchange: exchange.clone(),
                    routing_key: routing_key.clone(),
                });
                encode_method(&mut out, 1, &deliver);
                encode_header_raw(&mut out, 1, 60, body.len() as u64, &props);
                encode_body(&mut out, 1, body);
                black_box(&out);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decode_publish, encode_deliver);
criterion_main!(benches);
