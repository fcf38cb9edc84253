//! Messages that wait in a queue (no consumer took them at once): what they are charged while
//! they wait, against what they hold on the heap, and that they reach a consumer as they were
//! published, again when requeued.

use crate::common::*;
use crate::heap::{self, in_measurement_process, measure_alone, report, reported};
use crate::memory_charges::{close_to, TOLERANCE};
use dwellmq::codec::{FieldTable as WireTable, FieldValue};
use lapin::options::*;
use lapin::types::AMQPValue;
use lapin::BasicProperties;

const WAITING: usize = 100;

/// Messages of the heap measurement: enough that what does not grow with them is lost in the
/// average, and just under a power of two (see `memory_charges::MESSAGES`).
const MEASURED: usize = 16_000;

fn published_properties() -> BasicProperties {
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("text/plain".into())
        .with_headers(table(&[("tenant", AMQPValue::LongLongInt(7))]))
}

/// The same properties as the broker decodes them.
fn wire_properties() -> dwellmq::codec::BasicProperties {
    let mut headers = WireTable::new();
    headers.insert("tenant", FieldValue::I64(7));
    dwellmq::codec::BasicProperties {
        delivery_mode: Some(2),
        content_type: Some("text/plain".into()),
        headers: Some(headers),
        ..Default::default()
    }
}

fn assert_as_published(delivery: &lapin::message::Delivery, body: &str) {
    assert_eq!(std::str::from_utf8(&delivery.data), Ok(body));
    let properties = &delivery.properties;
    assert_eq!(properties.delivery_mode(), &Some(2));
    assert_eq!(
        properties.content_type().as_ref().map(|t| t.as_str()),
        Some("text/plain")
    );
    let headers = properties.headers().as_ref().expect("headers kept");
    assert_eq!(
        headers.inner().get("tenant"),
        Some(&AMQPValue::LongLongInt(7))
    );
}

#[tokio::test]
#[ignore = "a measurement: waiting_messages_are_charged_what_they_hold... runs it alone"]
async fn heap_of_waiting_messages_with_headers() {
    if !in_measurement_process() {
        return;
    }
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "backlog").await;
    // Once through first, so that buffers have grown to what the traffic needs.
    for i in 0..1_000 {
        publish_with(
            &ch,
            "",
            "backlog",
            format!("{i:016}").as_bytes(),
            published_properties(),
        )
        .await;
    }
    drain_with_get(&ch, "backlog").await;
    sync(&ch).await;
    t.broker.settle().await.expect("settled");
    let heap_before = heap::live();
    let charged_before = t.broker.memory_used();
    for i in 0..MEASURED {
        publish_with(
            &ch,
            "",
            "backlog",
            format!("{i:016}").as_bytes(),
            published_properties(),
        )
        .await;
    }
    sync(&ch).await;
    t.broker.settle().await.expect("settled");
    let per_message = |value: i64| value as f64 / MEASURED as f64;
    report("heap", per_message((heap::live() - heap_before) as i64));
    report(
        "charged",
        per_message(t.broker.memory_used() - charged_before),
    );
}

#[tokio::test]
async fn waiting_messages_are_charged_what_they_hold_and_delivered_as_published() {
    // What 16,000 of them hold on the heap, measured in a process of their own, and what they
    // are charged: close (see `memory_charges::TOLERANCE`).
    let measured = measure_alone("waiting_messages::heap_of_waiting_messages_with_headers");
    let (held, charged) = (reported(&measured, "heap"), reported(&measured, "charged"));
    assert!(
        close_to(charged, held, TOLERANCE),
        "a waiting message is charged {charged} octets and holds {held} on the heap"
    );
    // Packed: a 16-octet body with its names and properties, far below an unpacked message's
    // MESSAGE_MEMORY_OVERHEAD.
    let each = dwellmq::queued_message_footprint("", "backlog", &wire_properties(), 16);
    assert_eq!(charged as usize, each);
    assert!(each < dwellmq::MESSAGE_MEMORY_OVERHEAD);

    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "backlog").await;
    let bodies: Vec<String> = (0..WAITING).map(|i| format!("{i:016}")).collect();
    for body in &bodies {
        publish_with(&ch, "", "backlog", body.as_bytes(), published_properties()).await;
    }
    sync(&ch).await;
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.memory_used(), (WAITING * each) as i64);

    // One at a time: the others keep waiting.
    ch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = consume(&ch, "backlog", "", false).await;
    let first = next_delivery(&mut consumer).await;
    assert_as_published(&first, &bodies[0]);
    assert!(!first.redelivered);
    // Handed back, it waits again and comes back the same, marked redelivered.
    ch.basic_cancel(consumer.tag(), BasicCancelOptions::default())
        .await
        .unwrap();
    first
        .nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .unwrap();
    sync(&ch).await;
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.memory_used(), (WAITING * each) as i64);

    let mut consumer = consume(&ch, "backlog", "", false).await;
    let again = next_delivery(&mut consumer).await;
    assert_as_published(&again, &bodies[0]);
    assert!(again.redelivered);
    again.ack(BasicAckOptions::default()).await.unwrap();
    for body in &bodies[1..] {
        let delivery = next_delivery(&mut consumer).await;
        assert_as_published(&delivery, body);
        delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    sync(&ch).await;
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.memory_used(), 0);
}
