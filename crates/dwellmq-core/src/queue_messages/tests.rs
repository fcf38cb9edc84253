//! The ready list: order, priorities, packing.

use super::*;
use bytes::Bytes;
use dwellmq_codec::{BasicProperties, ShortStr};

fn msg(body: &'static str) -> Arc<Message> {
    Message::new(
        "".into(),
        "k".into(),
        BasicProperties::default(),
        Bytes::from_static(body.as_bytes()).into(),
        None,
    )
}

#[test]
fn requeue_restores_original_position() {
    let mut q = QueueMessages::new();
    for b in ["a", "b", "c"] {
        q.push(msg(b));
    }
    let a = q.pop().unwrap();
    let b = q.pop().unwrap();
    q.requeue(b);
    q.requeue(a);
    let order: Vec<_> = std::iter::from_fn(|| q.pop())
        .map(|e| e.message.body.chunks()[0].clone())
        .collect();
    assert_eq!(order, ["a", "b", "c"]);
    assert_eq!(q.bytes(), 0);
}

fn with_priority(body: &'static str, priority: Option<u8>) -> Arc<Message> {
    Message::new(
        "".into(),
        "k".into(),
        BasicProperties {
            priority,
            ..Default::default()
        },
        Bytes::from_static(body.as_bytes()).into(),
        None,
    )
}

fn drain(q: &mut QueueMessages) -> Vec<Bytes> {
    std::iter::from_fn(|| q.pop())
        .map(|e| e.message.body.chunks()[0].clone())
        .collect()
}

#[test]
fn highest_priority_first_fifo_within_a_priority_capped_at_the_maximum() {
    let mut q = QueueMessages::with_max_priority(5);
    q.push(with_priority("none", None));
    q.push(with_priority("p1-a", Some(1)));
    q.push(with_priority("p9-capped", Some(9)));
    q.push(with_priority("p1-b", Some(1)));
    q.push(with_priority("p5", Some(5)));
    assert_eq!(q.len(), 5);
    assert_eq!(q.peek().map(|e| e.seq()), Some(2));
    assert_eq!(drain(&mut q), ["p9-capped", "p5", "p1-a", "p1-b", "none"]);
    assert!(q.is_empty());
}

#[test]
fn a_plain_queue_ignores_priorities() {
    let mut q = QueueMessages::new();
    q.push(with_priority("low", Some(0)));
    q.push(with_priority("high", Some(9)));
    assert_eq!(drain(&mut q), ["low", "high"]);
}

#[test]
fn requeue_returns_to_the_original_place_within_its_priority() {
    let mut q = QueueMessages::with_max_priority(2);
    q.push(with_priority("high-a", Some(2)));
    q.push(with_priority("low", None));
    q.push(with_priority("high-b", Some(2)));
    let a = q.pop().unwrap();
    let b = q.pop().unwrap();
    assert_eq!(b.message.body.chunks()[0], "high-b");
    q.requeue(b);
    q.requeue(a);
    assert_eq!(q.len(), 3);
    assert_eq!(drain(&mut q), ["high-a", "high-b", "low"]);
    assert_eq!(q.bytes(), 0);
}

fn persistent_small(routing_key: &str, body: &'static [u8]) -> Arc<Message> {
    Message::new(
        "".into(),
        routing_key.into(),
        BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        },
        Bytes::from_static(body).into(),
        None,
    )
}

#[test]
fn a_message_taken_before_it_settles_is_the_published_one() {
    let mut q = QueueMessages::new();
    let published = msg("straight through");
    q.push(Arc::clone(&published));
    let taken = q.pop().expect("pushed");
    q.settle();
    // The same message, so the same slices of the read buffer: no body was copied.
    assert!(Arc::ptr_eq(&taken.message, &published));
    assert_eq!(q.packed_footprint(), 0);
}

#[test]
fn a_message_that_stays_is_packed_and_comes_back_whole() {
    let mut headers = dwellmq_codec::FieldTable::new();
    headers.insert("tenant", dwellmq_codec::FieldValue::I64(7));
    let original = Message::new(
        "orders".into(),
        "eu.new".into(),
        BasicProperties {
            headers: Some(headers),
            priority: Some(3),
            expiration: Some("60000".into()),
            delivery_mode: Some(2),
            ..Default::default()
        },
        Bytes::from_static(b"sixteen octets!!").into(),
        None,
    );
    let mut q = QueueMessages::with_max_priority(5);
    q.push_expiring(Arc::clone(&original), Some(90_000));
    q.settle();
    let ready = q.peek().expect("pushed");
    assert!(ready.is_packed());
    assert!(ready.is_persistent());
    assert_eq!((ready.body_len(), ready.expires_at()), (16, Some(90_000)));
    assert!(q.packed_footprint() > 0);

    let back = q.pop().expect("pushed");
    assert_eq!(back.message.exchange, original.exchange);
    assert_eq!(back.message.routing_key, original.routing_key);
    assert_eq!(back.message.properties, original.properties);
    assert_eq!(back.message.properties_encoded, original.properties_encoded);
    assert!(back.message.body == *b"sixteen octets!!".as_slice());
    assert_eq!(back.expires_at, Some(90_000));
    assert!(back.message.is_uncharged());
    assert_eq!((q.packed_footprint(), q.bytes()), (0, 0));

    // Handed back, it settles packed again at its place.
    q.requeue(back);
    q.settle();
    assert!(q.peek().is_some_and(|r| r.is_packed()));
    let again = q.pop().expect("requeued");
    assert_eq!(q.level_of(&again.message), 3);
}

#[test]
fn large_bodies_and_bcc_keys_stay_shared() {
    let mut q = QueueMessages::new();
    let large: &'static [u8] = vec![b'x'; PACK_BODY_LIMIT + 1].leak();
    q.push(Message::new(
        "".into(),
        "k".into(),
        BasicProperties::default(),
        Bytes::from_static(large).into(),
        None,
    ));
    q.push(Message::with_bcc(
        "".into(),
        "k".into(),
        BasicProperties::default(),
        Bytes::from_static(b"x").into(),
        None,
        vec!["audit".into()].into(),
    ));
    q.settle();
    assert!(q.iter().all(|r| !r.is_packed()));
    assert_eq!(q.packed_footprint(), 0);
    let with_bcc = q.remove(0, 1).expect("pushed");
    assert_eq!(&*with_bcc.message.bcc, [ShortStr::from("audit")]);
}

/// What a million small waiting messages cost: keep it from creeping back up (it was about
/// 840 octets beyond the body when a waiting message was the published one).
#[test]
fn a_small_waiting_message_holds_at_most_120_octets_beyond_its_body() {
    assert_eq!(std::mem::size_of::<Waiting>(), 48);
    let mut q = QueueMessages::new();
    q.push(persistent_small("load-restart", b"sixteen octets!!"));
    q.settle();
    // Exchange and key with their lengths (2 + 0, 2 + 12), properties (4 + 3), body.
    let packed_len = 4 + 12 + 4 + 3 + 16;
    assert_eq!(q.packed_footprint(), 48 + 48);
    assert_eq!(packed_footprint(packed_len), q.packed_footprint());
    assert!(q.packed_footprint() - 16 <= 120);
}

#[test]
fn a_drained_backlog_gives_its_slots_back() {
    let mut q = QueueMessages::new();
    for _ in 0..100_000 {
        q.push(msg("x"));
    }
    q.settle();
    let full = q.levels[0].capacity();
    assert!(full >= 100_000);
    while q.pop().is_some() {}
    assert!(
        q.levels[0].capacity() <= KEPT_SLOTS,
        "{} slots kept",
        q.levels[0].capacity()
    );
    for _ in 0..50_000 {
        q.push(msg("x"));
    }
    assert_eq!(q.purge(), 50_000);
    assert!(q.levels[0].capacity() <= KEPT_SLOTS);
}
