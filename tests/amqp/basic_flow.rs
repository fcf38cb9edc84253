//! Publish, consume, ack, nack, reject, get, qos: the everyday path through a real client.

use crate::common::*;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;

#[tokio::test]
async fn publish_then_consume_through_the_default_exchange() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q1").await;
    ch.basic_publish(
        "".into(),
        "q1".into(),
        BasicPublishOptions::default(),
        b"hello",
        BasicProperties::default().with_content_type("text/plain".into()),
    )
    .await
    .unwrap();
    let mut consumer = consume_no_ack(&ch, "q1").await;
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(delivery.data, b"hello");
    assert_eq!(delivery.routing_key.as_str(), "q1");
    assert_eq!(
        delivery
            .properties
            .content_type()
            .as_ref()
            .map(|c| c.as_str()),
        Some("text/plain")
    );
    assert!(!delivery.redelivered);
}

#[tokio::test]
async fn basic_get_returns_messages_then_empty() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "g").await;
    for body in ["a", "b"] {
        ch.basic_publish(
            "".into(),
            "g".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    let first = ch
        .basic_get("g".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(first.delivery.data, b"a");
    assert_eq!(first.message_count, 1);
    let second = ch
        .basic_get("g".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(second.delivery.data, b"b");
    second
        .delivery
        .ack(BasicAckOptions::default())
        .await
        .unwrap();
    assert!(ch
        .basic_get("g".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn nack_with_requeue_redelivers_in_original_position() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "rq").await;
    for body in ["1", "2", "3"] {
        ch.basic_publish(
            "".into(),
            "rq".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    let get = |no_ack| {
        let ch = ch.clone();
        async move {
            ch.basic_get("rq".into(), BasicGetOptions { no_ack })
                .await
                .unwrap()
                .expect("a message")
        }
    };
    let one = get(false).await;
    let two = get(false).await;
    two.delivery
        .nack(BasicNackOptions {
            requeue: true,
            multiple: false,
        })
        .await
        .unwrap();
    one.delivery
        .reject(BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    let again = get(true).await;
    assert_eq!(again.delivery.data, b"1");
    assert!(again.delivery.redelivered);
    let again = get(true).await;
    assert_eq!(again.delivery.data, b"2");
    assert!(again.delivery.redelivered);
    let last = get(true).await;
    assert_eq!(last.delivery.data, b"3");
    assert!(!last.delivery.redelivered);
}

#[tokio::test]
async fn reject_without_requeue_drops_the_message() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "drop").await;
    ch.basic_publish(
        "".into(),
        "drop".into(),
        BasicPublishOptions::default(),
        b"x",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    let m = ch
        .basic_get("drop".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    m.delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .unwrap();
    assert!(ch
        .basic_get("drop".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn unacked_messages_return_when_the_channel_closes() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "ret").await;
    ch.basic_publish(
        "".into(),
        "ret".into(),
        BasicPublishOptions::default(),
        b"keep me",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    let mut consumer = ch
        .basic_consume(
            "ret".into(),
            "c1".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let first = next_delivery(&mut consumer).await;
    assert!(!first.redelivered);
    ch.close(200, "bye".into()).await.unwrap();
    let ch2 = t.channel().await;
    let again = ch2
        .basic_get("ret".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("requeued");
    assert_eq!(again.delivery.data, b"keep me");
    assert!(again.delivery.redelivered);
}

#[tokio::test]
async fn prefetch_limits_unacked_deliveries_per_consumer() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "pf").await;
    for i in 0..5 {
        ch.basic_publish(
            "".into(),
            "pf".into(),
            BasicPublishOptions::default(),
            format!("{i}").as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    ch.basic_qos(2, BasicQosOptions::default()).await.unwrap();
    let mut consumer = ch
        .basic_consume(
            "pf".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let a = next_delivery(&mut consumer).await;
    let b = next_delivery(&mut consumer).await;
    // Two are out and unacked: the other three must still be ready in the queue.
    t.broker.settle().await.expect("deliveries written");
    assert_eq!(t.broker.queue_info("/", "pf").unwrap().messages, 3);
    b.ack(BasicAckOptions { multiple: true }).await.unwrap();
    let c = next_delivery(&mut consumer).await;
    assert_eq!((a.data, c.data), (b"0".to_vec(), b"2".to_vec()));
}

#[tokio::test]
async fn consumers_on_one_queue_take_turns() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "rr").await;
    let mut c1 = consume_no_ack(&ch, "rr").await;
    let mut c2 = consume_no_ack(&ch, "rr").await;
    for i in 0..4 {
        ch.basic_publish(
            "".into(),
            "rr".into(),
            BasicPublishOptions::default(),
            format!("{i}").as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    assert_eq!(next_body(&mut c1).await, "0");
    assert_eq!(next_body(&mut c2).await, "1");
    assert_eq!(next_body(&mut c1).await, "2");
    assert_eq!(next_body(&mut c2).await, "3");
}

#[tokio::test]
async fn higher_priority_consumers_are_served_first_while_they_have_credit() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "prio").await;
    ch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-priority".into(), lapin::types::AMQPValue::LongInt(10));
    let mut high = ch
        .basic_consume(
            "prio".into(),
            "high".into(),
            BasicConsumeOptions::default(),
            args,
        )
        .await
        .unwrap();
    let low_ch = t.channel().await;
    let mut low = low_ch
        .basic_consume(
            "prio".into(),
            "low".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for i in 0..3 {
        ch.basic_publish(
            "".into(),
            "prio".into(),
            BasicPublishOptions::default(),
            format!("{i}").as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    // The high-priority consumer takes the first message, then is out of credit (prefetch 1).
    let first = next_delivery(&mut high).await;
    assert_eq!(first.data, b"0");
    assert_eq!(next_delivery(&mut low).await.data, b"1");
    assert_eq!(next_delivery(&mut low).await.data, b"2");
}
