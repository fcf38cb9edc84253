//! Messages that wait in a queue (no consumer took them at once): what they are charged while
//! they wait, and that they reach a consumer as they were published, again when requeued.

use crate::common::*;
use dwellmq::codec::{FieldTable as WireTable, FieldValue};
use lapin::options::*;
use lapin::types::AMQPValue;
use lapin::BasicProperties;

const WAITING: usize = 100;

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
async fn waiting_messages_are_charged_what_they_hold_and_delivered_as_published() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "backlog").await;
    let bodies: Vec<String> = (0..WAITING).map(|i| format!("{i:016}")).collect();
    for body in &bodies {
        ch.basic_publish(
            "".into(),
            "backlog".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            published_properties(),
        )
        .await
        .expect("publish sent");
    }
    sync(&ch).await;
    t.broker.settle().await.unwrap();
    // Packed: a 16-octet body with its names and properties, far below an unpacked message's
    // MESSAGE_MEMORY_OVERHEAD.
    let each = dwellmq::queued_message_footprint("", "backlog", &wire_properties(), 16);
    assert!(each < dwellmq::MESSAGE_MEMORY_OVERHEAD);
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
