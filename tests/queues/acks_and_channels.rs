//! Acknowledgements and channels through a real client: many channels on one connection,
//! requeue (and exclusive/auto-delete cleanup) when a channel, connection or socket goes,
//! delivery tags, multiple ack/nack, and double acks. Dropping a socket goes over
//! `common::raw`.

use crate::common::raw::RawClient;
use crate::common::*;
use dwellmq::codec::methods::{BasicConsume, QueueDeclare};
use dwellmq::codec::{FramePayload, Method};
use lapin::options::*;
use lapin::types::FieldTable;

// ---------------------------------------------------------------------------------------------
// Channels and connections
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_channels_on_one_connection_each_publish_and_consume() {
    let t = start().await;
    let mut tasks = Vec::new();
    for i in 0..50 {
        let ch = t.channel().await;
        tasks.push(tokio::spawn(async move {
            let queue = format!("many-{i}");
            declare_queue(&ch, &queue).await;
            let mut consumer = consume(&ch, &queue, "", false).await;
            for n in 0..3 {
                publish(&ch, "", &queue, &format!("{i}.{n}")).await;
            }
            for n in 0..3 {
                let d = next_delivery(&mut consumer).await;
                assert_eq!(body(&d), format!("{i}.{n}"));
                d.ack(BasicAckOptions::default()).await.unwrap();
            }
            ch.id()
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.expect("channel task"));
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 50);
    assert_eq!(t.broker.queue_names("/").len(), 50);
}

#[tokio::test]
async fn unacked_messages_go_back_when_the_consuming_connection_closes() {
    let t = start().await;
    let setup = t.channel().await;
    declare_queue(&setup, "lost").await;
    fill(&setup, "lost", &["1", "2", "3"]).await;

    let a = connect(&t.broker).await;
    let ach = a.create_channel().await.unwrap();
    let mut ca = consume(&ach, "lost", "a", false).await;
    let (one, _, _) = next(&mut ca).await;
    let (two, two_tag, _) = next(&mut ca).await;
    let (three, _, _) = next(&mut ca).await;
    assert_eq!([one, two, three], ["1", "2", "3"]);
    ach.basic_ack(two_tag, BasicAckOptions::default())
        .await
        .unwrap();
    fill(&setup, "lost", &["4"]).await;
    assert_eq!(next(&mut ca).await.0, "4");
    ach.basic_cancel("a".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    // One more, to a consumer on a second channel of the same connection.
    let ach2 = a.create_channel().await.unwrap();
    fill(&setup, "lost", &["5"]).await;
    ach2.basic_consume(
        "lost".into(),
        "a2".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!(ready(&t, "lost"), 0);
    a.close(200, "bye".into()).await.unwrap();

    let bch = t.channel().await;
    let mut cb = consume(&bch, "lost", "b", false).await;
    let mut got = Vec::new();
    for _ in 0..4 {
        let (b, _, redelivered) = next(&mut cb).await;
        assert!(redelivered, "{b} is marked redelivered");
        got.push(b);
    }
    // The two channels are torn down in no particular order, and B may already be consuming.
    got.sort();
    assert_eq!(got, ["1", "3", "4", "5"]);
}

#[tokio::test]
async fn unacked_messages_go_back_when_the_socket_just_drops() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "dropped").await;
    fill(&ch, "dropped", &["x", "y"]).await;

    let mut raw = RawClient::open(t.broker.local_addr()).await;
    raw.open_channel(1).await;
    raw.send_method(
        1,
        &Method::BasicConsume(BasicConsume {
            queue: "dropped".into(),
            consumer_tag: "raw".into(),
            ..Default::default()
        }),
    )
    .await;
    let mut delivered = 0;
    while delivered < 2 {
        if let FramePayload::Method(Method::BasicDeliver(_)) =
            raw.recv_non_heartbeat().await.payload
        {
            delivered += 1;
        }
    }
    assert_eq!(ready(&t, "dropped"), 0);
    drop(raw);
    eventually("the dropped connection's messages are back", || {
        ready(&t, "dropped") == 2
    })
    .await;
    assert_eq!(
        drain_with_get(&ch, "dropped").await,
        vec![("x".to_string(), true), ("y".to_string(), true)]
    );
}

#[tokio::test]
async fn exclusive_and_auto_delete_queues_go_when_the_socket_just_drops() {
    let t = start().await;
    let mut raw = RawClient::open(t.broker.local_addr()).await;
    raw.open_channel(1).await;
    for (queue, exclusive, auto_delete) in [("mine", true, false), ("temp", false, true)] {
        let declare = Method::QueueDeclare(QueueDeclare {
            queue: queue.into(),
            exclusive,
            auto_delete,
            ..Default::default()
        });
        assert!(matches!(
            raw.call(1, &declare).await,
            Method::QueueDeclareOk(_)
        ));
    }
    raw.declare_queue(1, "kept", false).await;
    raw.consume(1, "temp", "c", false).await;
    assert_eq!(t.broker.queue_names("/"), ["kept", "mine", "temp"]);
    drop(raw); // no connection.close: the socket just goes away
    eventually("the exclusive and auto-delete queues are gone", || {
        t.broker.queue_names("/") == ["kept"]
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Acknowledgements
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn delivery_tags_start_at_1_on_each_channel_and_another_channels_tag_is_406() {
    let t = start().await;
    let a = t.channel().await;
    let b = t.channel().await;
    declare_queue(&a, "tags-a").await;
    declare_queue(&a, "tags-b").await;
    fill(&a, "tags-a", &["a1", "a2"]).await;
    fill(&a, "tags-b", &["b1"]).await;
    let mut on_a = consume(&a, "tags-a", "ca", false).await;
    let mut on_b = consume(&b, "tags-b", "cb", false).await;
    assert_eq!(next(&mut on_a).await, ("a1".into(), 1, false));
    assert_eq!(next(&mut on_a).await, ("a2".into(), 2, false));
    assert_eq!(next(&mut on_b).await, ("b1".into(), 1, false));
    // Tag 2 exists on channel a only.
    assert_eq!(
        error_after(&b, b.basic_ack(2, BasicAckOptions::default())).await,
        (406, "PRECONDITION_FAILED - unknown delivery tag 2".into())
    );
    // b's unacked message went back with its channel; a's deliveries are untouched.
    assert_eq!(ready(&t, "tags-b"), 1);
    a.basic_ack(2, BasicAckOptions { multiple: true })
        .await
        .unwrap();
    a.close(200, "bye".into()).await.unwrap();
    assert_eq!(ready(&t, "tags-a"), 0);
}

#[tokio::test]
async fn ack_multiple_settles_every_tag_up_to_the_one_named() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "am").await;
    fill(&ch, "am", &["1", "2", "3", "4", "5"]).await;
    let mut consumer = consume(&ch, "am", "c", false).await;
    let mut tags = Vec::new();
    for _ in 0..5 {
        tags.push(next(&mut consumer).await.1);
    }
    assert_eq!(tags, [1, 2, 3, 4, 5]);
    ch.basic_ack(3, BasicAckOptions { multiple: true })
        .await
        .unwrap();
    sync(&ch).await;
    // 1..=3 are settled; closing the channel returns only 4 and 5.
    ch.basic_cancel("c".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    ch.close(200, "bye".into()).await.unwrap();
    let ch = t.channel().await;
    assert_eq!(
        drain_with_get(&ch, "am").await,
        vec![("4".to_string(), true), ("5".to_string(), true)]
    );
}

#[tokio::test]
async fn nack_multiple_drops_or_requeues_every_tag_up_to_the_one_named() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "nm").await;
    fill(&ch, "nm", &["1", "2", "3", "4", "5"]).await;
    let mut consumer = consume(&ch, "nm", "c", false).await;
    for expected in 1..=5u64 {
        assert_eq!(next(&mut consumer).await.1, expected);
    }
    // Drop 1 and 2.
    ch.basic_nack(
        2,
        BasicNackOptions {
            multiple: true,
            requeue: false,
        },
    )
    .await
    .unwrap();
    // Requeue 3 and 4: they come straight back to the consumer, redelivered.
    ch.basic_nack(
        4,
        BasicNackOptions {
            multiple: true,
            requeue: true,
        },
    )
    .await
    .unwrap();
    let (b6, t6, r6) = next(&mut consumer).await;
    let (b7, t7, r7) = next(&mut consumer).await;
    assert_eq!((b6.as_str(), t6, r6), ("3", 6, true));
    assert_eq!((b7.as_str(), t7, r7), ("4", 7, true));
    // Closing the channel returns what is still unacked (5, 3, 4) in queue order.
    ch.close(200, "bye".into()).await.unwrap();
    let ch = t.channel().await;
    let left: Vec<String> = drain_with_get(&ch, "nm")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(left, ["3", "4", "5"]);
}

#[tokio::test]
async fn acking_the_same_tag_twice_is_406_unknown_delivery_tag() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "twice").await;
    fill(&ch, "twice", &["x"]).await;
    let m = ch
        .basic_get("twice".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("a message");
    let tag = m.delivery.delivery_tag;
    ch.basic_ack(tag, BasicAckOptions::default()).await.unwrap();
    assert_eq!(
        error_after(&ch, ch.basic_ack(tag, BasicAckOptions::default())).await,
        (
            406,
            format!("PRECONDITION_FAILED - unknown delivery tag {tag}")
        )
    );
    // Only the channel closed; the message was settled by the first ack.
    let ch = t.channel().await;
    assert_eq!(ready(&t, "twice"), 0);
    sync(&ch).await;
}
