//! Heap allocations made while decoding, counted by a global allocator (per thread, so tests
//! running in parallel do not disturb each other).
//!
//! Results: a body frame decodes with no allocation at all (it is a slice of the read buffer);
//! a whole publish (method + header + body) with string/integer properties allocates nothing
//! either. Only field tables allocate (one `Vec` per table or array, growing by doubling), and
//! the first split of a freshly allocated `BytesMut` allocates the small shared control block
//! that `bytes` uses for reference counting (once per read buffer, not per frame).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::BytesMut;
use common::{encode_all, method, publish_triple};
use dwellmq_codec::methods::BasicPublish;
use dwellmq_codec::{
    decode_frame, BasicProperties, ContentHeader, FieldTable, FieldValue, Frame, FramePayload,
    Method,
};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the allocator may run during thread teardown.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            ALLOCS.with(|a| a.set(a.get() + 1));
            LARGEST.with(|l| l.set(l.get().max(size)));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f`, returning its result, the number of allocations and the largest one.
fn count<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    ALLOCS.with(|a| a.set(0));
    LARGEST.with(|l| l.set(0));
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (out, ALLOCS.with(Cell::get), LARGEST.with(Cell::get))
}

fn decode_all(buf: &mut BytesMut) -> Vec<Frame> {
    let mut frames = Vec::with_capacity(8);
    while let Some(f) = decode_frame(buf, 1 << 20).unwrap() {
        frames.push(f);
    }
    frames
}

/// A read buffer that has already been split once (as after its first frame), holding `bytes`.
fn warmed_buffer(bytes: &[u8]) -> BytesMut {
    let mut buf = BytesMut::with_capacity(bytes.len() + 1024);
    buf.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0xce]); // a heartbeat
    decode_frame(&mut buf, 4096).unwrap().unwrap();
    buf.extend_from_slice(bytes);
    buf
}

#[test]
fn decoding_a_body_frame_allocates_nothing() {
    let body = vec![0x61u8; 60_000];
    let bytes = encode_all(&[Frame {
        channel: 1,
        payload: FramePayload::Body(body.clone().into()),
    }]);
    let mut buf = warmed_buffer(&bytes);
    let (frame, allocs, _) = count(|| decode_frame(&mut buf, 1 << 20).unwrap().unwrap());
    assert_eq!(allocs, 0, "decoding a body frame allocated");
    assert!(matches!(&frame.payload, FramePayload::Body(b) if b[..] == body[..]));

    // A fresh, never-split buffer: the only allocation is `bytes`' small shared control block,
    // nowhere near the size of the body.
    let mut fresh = BytesMut::from(&bytes[..]);
    let (_, allocs, largest) = count(|| decode_frame(&mut fresh, 1 << 20).unwrap().unwrap());
    assert_eq!(allocs, 1, "{allocs} allocations");
    assert!(largest <= 64, "allocated {largest} octets");
}

#[test]
fn decoding_a_publish_triple_allocates_nothing() {
    let bytes = encode_all(&publish_triple(&[0x42; 1000]));
    let mut buf = warmed_buffer(&bytes);
    let (frames, allocs, _) = count(|| {
        [
            decode_frame(&mut buf, 1 << 20).unwrap().unwrap(),
            decode_frame(&mut buf, 1 << 20).unwrap().unwrap(),
            decode_frame(&mut buf, 1 << 20).unwrap().unwrap(),
        ]
    });
    assert_eq!(allocs, 0, "a publish with plain properties allocated");
    assert_eq!(frames.to_vec(), publish_triple(&[0x42; 1000]));
}

#[test]
fn steady_state_read_loop_allocates_nothing() {
    // A connection's read loop: refill the same buffer, decode, drop the frames.
    let bytes = encode_all(&publish_triple(b"0123456789abcdef"));
    let mut buf = warmed_buffer(&[]);
    let mut frames = Vec::with_capacity(8);
    let ((), allocs, _) = count(|| {
        for _ in 0..1000 {
            buf.extend_from_slice(&bytes);
            while let Some(f) = decode_frame(&mut buf, 4096).unwrap() {
                frames.push(f);
            }
            assert_eq!(frames.len(), 3);
            frames.clear();
        }
    });
    assert_eq!(allocs, 0, "{allocs} allocations over 1000 publishes");
}

#[test]
fn field_tables_allocate_one_vec_each() {
    // A header with a 3-entry `headers` table: one allocation (the entries' Vec).
    let mut headers = FieldTable::new();
    headers.insert("a", 1i64);
    headers.insert("b", "text");
    headers.insert("c", true);
    let header = Frame {
        channel: 1,
        payload: FramePayload::Header(ContentHeader {
            class_id: 60,
            body_size: 0,
            properties: BasicProperties {
                headers: Some(headers.clone()),
                ..BasicProperties::default()
            },
        }),
    };
    let mut buf = warmed_buffer(&encode_all(std::slice::from_ref(&header)));
    let (frames, allocs, _) = count(|| decode_all(&mut buf));
    // One for `decode_all`'s own Vec, one for the table.
    assert_eq!(allocs, 2);
    assert_eq!(frames, [header]);

    // Nested: a table holding an array holding a table: three containers, three Vecs.
    let mut inner = FieldTable::new();
    inner.insert("x", FieldValue::Void);
    let mut arguments = FieldTable::new();
    arguments.insert(
        "list",
        FieldValue::Array(vec![FieldValue::Table(inner), FieldValue::I8(1)]),
    );
    let declare = method(
        1,
        Method::QueueDeclare(dwellmq_codec::methods::QueueDeclare {
            queue: "q".into(),
            arguments,
            ..Default::default()
        }),
    );
    let mut buf = warmed_buffer(&encode_all(std::slice::from_ref(&declare)));
    let (frame, allocs, _) = count(|| decode_frame(&mut buf, 4096).unwrap().unwrap());
    assert_eq!(allocs, 3);
    assert_eq!(frame, declare);

    // Methods without tables allocate nothing.
    let publish = method(
        1,
        Method::BasicPublish(BasicPublish {
            exchange: "x".into(),
            routing_key: "y".into(),
            mandatory: false,
            immediate: false,
        }),
    );
    let mut buf = warmed_buffer(&encode_all(std::slice::from_ref(&publish)));
    let (_, allocs, _) = count(|| decode_frame(&mut buf, 4096).unwrap().unwrap());
    assert_eq!(allocs, 0);
}
