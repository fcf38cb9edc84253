//! Queues and consumers through a real client: server-named queues, declare-ok counts, passive
//! declares, auto-delete, purge, unbind, the "last declared queue" shortcut, consumer tags,
//! exclusive consumers, cancel, recover, channel-wide qos, channel.flow, many channels,
//! requeue on connection loss, multiple ack/nack, and RabbitMQ's texts for bad arguments.
//! What lapin cannot send (a prefetch size) or do (drop the socket) goes over `common::raw`.

mod common;

use std::time::Duration;

use common::raw::{capabilities_without, RawClient};
use common::*;
use dwellmq::codec::methods::{BasicCancel, BasicConsume, BasicQos, QueueDeclare};
use dwellmq::codec::{FramePayload, Method};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};

// ---------------------------------------------------------------------------------------------
// Declaring queues

#[tokio::test]
async fn server_named_queues_get_distinct_amq_gen_names() {
    let t = start().await;
    let ch = t.channel().await;
    let a = declare_with(
        &ch,
        "",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let b = declare_with(
        &ch,
        "",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    for q in [&a, &b] {
        let name = q.name().as_str();
        assert!(name.starts_with("amq.gen-"), "{name}");
        assert_eq!(name.len(), 30, "{name}");
        assert!(
            name["amq.gen-".len()..]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
            "{name}"
        );
        assert_eq!((q.message_count(), q.consumer_count()), (0, 0));
    }
    assert_ne!(a.name(), b.name());
    let names = t.broker.queue_names("/");
    assert!(names.contains(&a.name().to_string()) && names.contains(&b.name().to_string()));
    // The generated name is usable like any other.
    fill(&ch, a.name().as_str(), &["x"]).await;
    assert_eq!(ready(&t, a.name().as_str()), 1);
}

#[tokio::test]
async fn declare_ok_counts_ready_messages_and_consumers() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "counted").await;
    fill(&ch, "counted", &["1", "2", "3"]).await;
    let q = declare_with(
        &ch,
        "counted",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!((q.message_count(), q.consumer_count()), (3, 0));

    // A consumer holding one unacked message: 2 ready, 1 consumer.
    let cch = t.channel().await;
    cch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = consume(&cch, "counted", "c", false).await;
    assert_eq!(next(&mut consumer).await.0, "1");
    let q = declare_with(
        &ch,
        "counted",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!((q.message_count(), q.consumer_count()), (2, 1));
    let info = t.broker.queue_info("/", "counted").unwrap();
    assert_eq!((info.messages, info.consumers), (2, 1));
}

#[tokio::test]
async fn passive_declare_of_an_existing_queue_reports_it_and_ignores_the_other_flags() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "there").await;
    fill(&ch, "there", &["a", "b"]).await;
    let _consumer = consume(&t.channel().await, "there", "", false).await;
    let q = declare_with(&ch, "there", passive(), FieldTable::default())
        .await
        .unwrap();
    assert_eq!(q.name().as_str(), "there");
    assert_eq!(q.consumer_count(), 1);
    // A passive declare does not compare durability or arguments (RabbitMQ ignores them).
    let q = declare_with(
        &ch,
        "there",
        QueueDeclareOptions {
            passive: true,
            durable: true,
            auto_delete: true,
            ..Default::default()
        },
        table(&[("x-max-length", AMQPValue::LongInt(1))]),
    )
    .await
    .unwrap();
    assert_eq!(q.name().as_str(), "there");
}

#[tokio::test]
async fn auto_delete_queue_goes_when_its_last_consumer_cancels_and_not_before_it_had_one() {
    let t = start().await;
    let ch = t.channel().await;
    let options = QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    declare_with(&ch, "ad", options, FieldTable::default())
        .await
        .unwrap();
    // Never had a consumer: publishing, basic.get and an empty get leave it in place.
    fill(&ch, "ad", &["m"]).await;
    assert!(ch
        .basic_get("ad".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .is_some());
    assert!(ch
        .basic_get("ad".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .is_none());
    assert!(t.broker.queue_info("/", "ad").is_some());

    let _c1 = consume(&ch, "ad", "c1", true).await;
    let _c2 = consume(&ch, "ad", "c2", true).await;
    ch.basic_cancel("c1".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    // One consumer left: still there.
    assert_eq!(t.broker.queue_info("/", "ad").unwrap().consumers, 1);
    ch.basic_cancel("c2".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    assert!(t.broker.queue_info("/", "ad").is_none());
    let err = declare_with(&ch, "ad", passive(), FieldTable::default()).await;
    assert_eq!(
        channel_error(err),
        (404, "NOT_FOUND - no queue 'ad' in vhost '/'".into())
    );
}

#[tokio::test]
async fn auto_delete_queue_goes_when_its_consumers_channel_closes() {
    let t = start().await;
    let ch = t.channel().await;
    let options = QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    declare_with(&ch, "ad-close", options, FieldTable::default())
        .await
        .unwrap();
    let cch = t.channel().await;
    let _c = consume(&cch, "ad-close", "", false).await;
    cch.close(200, "bye".into()).await.unwrap();
    assert!(t.broker.queue_info("/", "ad-close").is_none());
}

#[tokio::test]
async fn purge_returns_the_ready_count_and_leaves_unacked_messages_alone() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "pq").await;
    fill(&ch, "pq", &["1", "2", "3", "4"]).await;
    assert_eq!(
        ch.queue_purge("pq".into(), QueuePurgeOptions::default())
            .await
            .unwrap(),
        4
    );
    assert_eq!(ready(&t, "pq"), 0);
    assert_eq!(
        ch.queue_purge("pq".into(), QueuePurgeOptions::default())
            .await
            .unwrap(),
        0
    );

    // One delivered and unacked, two ready: purge takes the two; the unacked one comes back.
    fill(&ch, "pq", &["a", "b", "c"]).await;
    let cch = t.channel().await;
    cch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = consume(&cch, "pq", "c", false).await;
    let (first, tag, _) = next(&mut consumer).await;
    assert_eq!(first, "a");
    assert_eq!(
        ch.queue_purge("pq".into(), QueuePurgeOptions::default())
            .await
            .unwrap(),
        2
    );
    cch.basic_cancel("c".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    cch.basic_nack(
        tag,
        BasicNackOptions {
            requeue: true,
            multiple: false,
        },
    )
    .await
    .unwrap();
    sync(&cch).await;
    assert_eq!(
        drain_with_get(&ch, "pq").await,
        vec![("a".to_string(), true)]
    );
}

#[tokio::test]
async fn unbind_stops_routing_and_unbinding_twice_is_fine() {
    let t = start().await;
    let ch = t.channel().await;
    ch.exchange_declare(
        "ux".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare_queue(&ch, "uq").await;
    ch.queue_bind(
        "uq".into(),
        "ux".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish(&ch, "ux", "k", "routed").await;
    sync(&ch).await;
    assert_eq!(ready(&t, "uq"), 1);
    ch.queue_unbind("uq".into(), "ux".into(), "k".into(), FieldTable::default())
        .await
        .unwrap();
    publish(&ch, "ux", "k", "dropped").await;
    sync(&ch).await;
    assert_eq!(ready(&t, "uq"), 1);
    // A binding that does not exist: unbind succeeds, as in RabbitMQ.
    ch.queue_unbind("uq".into(), "ux".into(), "k".into(), FieldTable::default())
        .await
        .unwrap();
    // Headers bindings are matched on their arguments too.
    let args = table(&[("x-match", long_str("any")), ("a", long_str("1"))]);
    ch.queue_bind(
        "uq".into(),
        "amq.headers".into(),
        "".into(),
        QueueBindOptions::default(),
        args.clone(),
    )
    .await
    .unwrap();
    ch.queue_unbind("uq".into(), "amq.headers".into(), "".into(), args)
        .await
        .unwrap();
    ch.basic_publish(
        "amq.headers".into(),
        "".into(),
        BasicPublishOptions::default(),
        b"h",
        BasicProperties::default().with_headers(table(&[("a", long_str("1"))])),
    )
    .await
    .unwrap();
    sync(&ch).await;
    assert_eq!(ready(&t, "uq"), 1);
}

#[tokio::test]
async fn empty_queue_name_means_the_last_queue_declared_on_the_channel() {
    let t = start().await;
    let ch = t.channel().await;
    let q = declare_with(
        &ch,
        "",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let name = q.name().to_string();
    ch.queue_bind(
        "".into(),
        "amq.direct".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish(&ch, "amq.direct", "k", "one").await;
    publish(&ch, "amq.direct", "k", "two").await;
    sync(&ch).await;
    assert_eq!(ready(&t, &name), 2);
    let got = ch
        .basic_get("".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(body(&got.delivery), "one");
    assert_eq!(
        ch.queue_purge("".into(), QueuePurgeOptions::default())
            .await
            .unwrap(),
        1
    );
    let mut consumer = consume(&ch, "", "", true).await;
    publish(&ch, "amq.direct", "k", "three").await;
    assert_eq!(next(&mut consumer).await.0, "three");
    ch.queue_unbind(
        "".into(),
        "amq.direct".into(),
        "k".into(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_delete("".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    assert!(t.broker.queue_info("/", &name).is_none());

    // Another channel has declared nothing: RabbitMQ's 404.
    let other = t.channel().await;
    let err = other
        .queue_purge("".into(), QueuePurgeOptions::default())
        .await;
    assert_eq!(
        channel_error(err),
        (404, "NOT_FOUND - no previously declared queue".into())
    );
}

#[tokio::test]
async fn bind_with_empty_queue_and_empty_key_uses_the_queue_name_as_key() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "shortcut").await;
    ch.queue_bind(
        "".into(),
        "amq.direct".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish(&ch, "amq.direct", "shortcut", "by name").await;
    sync(&ch).await;
    assert_eq!(ready(&t, "shortcut"), 1);
}

#[tokio::test]
async fn closing_a_connection_does_not_delete_a_later_queue_of_the_same_name() {
    let t = start().await;
    let a = t.channel().await;
    declare_with(
        &a,
        "reused",
        QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    let _c = consume(&a, "reused", "c", true).await;
    a.basic_cancel("c".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    assert!(t.broker.queue_info("/", "reused").is_none());

    // Another connection now owns a plain queue called "reused".
    let other = connect(&t.broker).await;
    let b = other.create_channel().await.unwrap();
    declare_queue(&b, "reused").await;
    fill(&b, "reused", &["keep me"]).await;

    t.connection.close(200, "bye".into()).await.unwrap();
    eventually("the first connection is gone", || {
        t.broker.connection_count() == 1
    })
    .await;
    let q = declare_with(&b, "reused", passive(), FieldTable::default())
        .await
        .expect("the other connection's queue survives");
    assert_eq!(q.message_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Consumers

#[tokio::test]
async fn consumer_tags_are_generated_with_the_amq_ctag_prefix() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "tags").await;
    let a = consume(&ch, "tags", "", true).await;
    let b = consume(&ch, "tags", "", true).await;
    for tag in [a.tag(), b.tag()] {
        assert!(tag.as_str().starts_with("amq.ctag-"), "{tag}");
        assert_eq!(tag.as_str().len(), 31, "{tag}");
    }
    assert_ne!(a.tag(), b.tag());
    // Deliveries reach the consumer the generated tag names (round-robin from the first).
    let (mut a, mut b) = (a, b);
    fill(&ch, "tags", &["1", "2"]).await;
    assert_eq!(next(&mut a).await.0, "1");
    assert_eq!(next(&mut b).await.0, "2");
}

#[tokio::test]
async fn reusing_a_consumer_tag_on_a_channel_is_a_530_connection_error() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "dup").await;
    let _c = consume(&ch, "dup", "same", true).await;
    // The same tag on another channel is fine.
    let other = t.channel().await;
    let _c2 = consume(&other, "dup", "same", true).await;
    // Cancelled tags may be reused.
    let _c3 = consume(&ch, "dup", "again", true).await;
    ch.basic_cancel("again".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    let _c4 = consume(&ch, "dup", "again", true).await;

    let err = consume_with(&ch, "dup", "same", true, FieldTable::default()).await;
    assert_eq!(
        channel_error(err),
        (
            530,
            "NOT_ALLOWED - attempt to reuse consumer tag 'same'".into()
        )
    );
    assert_connection_closed(&t.connection).await;
}

#[tokio::test]
async fn a_tag_freed_by_a_deleted_queue_can_be_reused() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "gone").await;
    let mut consumer = consume(&ch, "gone", "fixed", true).await;
    let admin = t.channel().await;
    admin
        .queue_delete("gone".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    // lapin announces consumer_cancel_notify: the server's basic.cancel ends the stream.
    let end = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .expect("the server cancels the consumer");
    assert!(end.is_none(), "{end:?}");
    // A basic.cancel, not a channel.close (which also ends the stream): the channel works.
    sync(&ch).await;
    declare_queue(&admin, "gone").await;
    let mut again = consume_with(&ch, "gone", "fixed", true, FieldTable::default())
        .await
        .expect("the tag is free again, as in RabbitMQ");
    fill(&admin, "gone", &["back"]).await;
    assert_eq!(next(&mut again).await.0, "back");
}

#[tokio::test]
async fn deleting_a_queue_sends_basic_cancel_and_the_channel_stays_open() {
    let t = start().await;
    let mut client = RawClient::open(t.broker.local_addr()).await;
    client.open_channel(1).await;
    client.declare_queue(1, "doomed", false).await;
    client.consume(1, "doomed", "watcher", false).await;
    let admin = t.channel().await;
    admin
        .queue_delete("doomed".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        client.recv_method_on(1).await,
        Method::BasicCancel(BasicCancel {
            consumer_tag: "watcher".into(),
            no_wait: true,
        })
    );
    // A notification, not a channel.close: the channel still works.
    assert_eq!(
        client
            .declare_queue(1, "doomed", false)
            .await
            .consumer_count,
        0
    );
    client.close().await;
}

#[tokio::test]
async fn a_client_without_consumer_cancel_notify_gets_no_basic_cancel() {
    let t = start().await;
    let mut client = RawClient::open_announcing(
        t.broker.local_addr(),
        &capabilities_without(&["consumer_cancel_notify"]),
    )
    .await;
    client.open_channel(1).await;
    client.declare_queue(1, "doomed", false).await;
    client.consume(1, "doomed", "watcher", false).await;
    let admin = t.channel().await;
    admin
        .queue_delete("doomed".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    // A basic.cancel would have been queued at the delete, before this declare's reply:
    // the reply coming next shows none was sent (RabbitMQ only notifies clients that announce
    // the capability).
    assert_eq!(
        client
            .declare_queue(1, "doomed", false)
            .await
            .consumer_count,
        0
    );
    client.close().await;
}

#[tokio::test]
async fn a_reused_tag_is_refused_before_the_queue_is_looked_up() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "dup2").await;
    let _c = consume(&ch, "dup2", "same", true).await;
    let err = consume_with(&ch, "missing", "same", true, FieldTable::default()).await;
    assert_eq!(
        channel_error(err),
        (
            530,
            "NOT_ALLOWED - attempt to reuse consumer tag 'same'".into()
        )
    );
}

#[tokio::test]
async fn an_exclusive_consumer_keeps_others_out_with_403() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "solo").await;
    let exclusive = BasicConsumeOptions {
        exclusive: true,
        ..Default::default()
    };
    let _owner = ch
        .basic_consume(
            "solo".into(),
            "owner".into(),
            exclusive,
            FieldTable::default(),
        )
        .await
        .unwrap();
    let expected = (
        403,
        "ACCESS_REFUSED - queue 'solo' in vhost '/' in exclusive use".to_string(),
    );
    let other = t.channel().await;
    let err = consume_with(&other, "solo", "", false, FieldTable::default()).await;
    assert_eq!(channel_error(err), expected);
    // Another connection is refused the same way.
    let conn2 = connect(&t.broker).await;
    let ch2 = conn2.create_channel().await.unwrap();
    let err = consume_with(&ch2, "solo", "", false, FieldTable::default()).await;
    assert_eq!(channel_error(err), expected);
    // Once the exclusive consumer is cancelled, anyone may consume.
    ch.basic_cancel("owner".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    let ch3 = t.channel().await;
    let _c = consume(&ch3, "solo", "", true).await;
    // ... and now an exclusive consumer is refused, because a consumer exists.
    let ch4 = t.channel().await;
    let err = ch4
        .basic_consume("solo".into(), "".into(), exclusive, FieldTable::default())
        .await;
    assert_eq!(channel_error(err), expected);
}

#[tokio::test]
async fn x_priority_must_be_an_integer() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "prio").await;
    for value in [
        AMQPValue::LongInt(10),
        AMQPValue::LongLongInt(-5),
        AMQPValue::ShortShortUInt(3),
    ] {
        let c = consume_with(
            &ch,
            "prio",
            "",
            true,
            table(&[("x-priority", value.clone())]),
        )
        .await;
        assert!(c.is_ok(), "x-priority {value:?} is accepted");
    }
    let err = consume_with(
        &ch,
        "prio",
        "",
        true,
        table(&[("x-priority", long_str("10"))]),
    )
    .await;
    assert_eq!(
        channel_error(err),
        (
            406,
            "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'prio' in vhost '/': \"expected integer, got longstr\"".into()
        )
    );
    let ch = t.channel().await;
    let err = consume_with(
        &ch,
        "prio",
        "",
        true,
        table(&[("x-priority", AMQPValue::Double(1.0))]),
    )
    .await;
    assert_eq!(
        channel_error(err),
        (
            406,
            "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'prio' in vhost '/': \"expected integer, got double\"".into()
        )
    );
}

#[tokio::test]
async fn cancel_stops_deliveries_and_the_rest_stays_queued() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "cq").await;
    fill(&ch, "cq", &["1", "2", "3"]).await;
    ch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = consume(&ch, "cq", "c", false).await;
    let (first, tag, _) = next(&mut consumer).await;
    assert_eq!(first, "1");
    ch.basic_cancel("c".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    // The consumer's stream ends after the cancel.
    let end = tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .expect("the stream ends");
    assert!(end.is_none(), "no delivery after cancel: {end:?}");
    // A message acked after its consumer was cancelled is still settled (no error).
    ch.basic_ack(tag, BasicAckOptions::default()).await.unwrap();
    fill(&ch, "cq", &["4"]).await;
    assert_eq!(ready(&t, "cq"), 3);
    assert_eq!(t.broker.queue_info("/", "cq").unwrap().consumers, 0);
    // Cancelling an unknown tag is answered with cancel-ok, as the spec requires.
    ch.basic_cancel("never-was".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    let rest: Vec<String> = drain_with_get(&ch, "cq")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(rest, ["2", "3", "4"]);
}

#[tokio::test]
async fn recover_requeues_unacked_messages_as_redelivered() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "rec").await;
    fill(&ch, "rec", &["a", "b"]).await;
    let mut consumer = consume(&ch, "rec", "c", false).await;
    assert_eq!(next(&mut consumer).await, ("a".into(), 1, false));
    assert_eq!(next(&mut consumer).await, ("b".into(), 2, false));
    ch.basic_recover(BasicRecoverOptions { requeue: true })
        .await
        .unwrap();
    let (b1, t1, r1) = next(&mut consumer).await;
    let (b2, t2, r2) = next(&mut consumer).await;
    assert_eq!((b1.as_str(), b2.as_str()), ("a", "b"));
    assert!(r1 && r2, "redelivered after recover");
    assert!(t1 > 2 && t2 > t1, "fresh delivery tags: {t1}, {t2}");
    // The old tags are gone.
    assert_eq!(
        error_after(&ch, ch.basic_ack(1, BasicAckOptions::default())).await,
        (406, "PRECONDITION_FAILED - unknown delivery tag 1".into())
    );
}

#[tokio::test]
async fn recover_async_requeues_unacked_messages_as_redelivered() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "reca").await;
    fill(&ch, "reca", &["a", "b"]).await;
    let mut consumer = consume(&ch, "reca", "c", false).await;
    assert_eq!(next(&mut consumer).await, ("a".into(), 1, false));
    assert_eq!(next(&mut consumer).await, ("b".into(), 2, false));
    ch.basic_recover_async(BasicRecoverAsyncOptions { requeue: true })
        .await
        .unwrap();
    assert_eq!(next(&mut consumer).await, ("a".into(), 3, true));
    assert_eq!(next(&mut consumer).await, ("b".into(), 4, true));
    // The old tags are gone.
    assert_eq!(
        error_after(&ch, ch.basic_ack(1, BasicAckOptions::default())).await,
        (406, "PRECONDITION_FAILED - unknown delivery tag 1".into())
    );
}

// ---------------------------------------------------------------------------------------------
// Flow control

#[tokio::test]
async fn global_qos_limits_unacked_messages_across_the_channels_consumers() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "g1").await;
    declare_queue(&ch, "g2").await;
    fill(&ch, "g1", &["1a", "1b", "1c"]).await;
    fill(&ch, "g2", &["2a", "2b", "2c"]).await;
    ch.basic_qos(2, BasicQosOptions { global: true })
        .await
        .unwrap();
    let mut c1 = consume(&ch, "g1", "c1", false).await;
    let c2 = consume(&ch, "g2", "c2", false).await;
    let ready_total = || ready(&t, "g1") + ready(&t, "g2");
    // Two unacked on the whole channel: c1 took both before c2 existed; c2 got nothing.
    assert_eq!(next(&mut c1).await, ("1a".into(), 1, false));
    assert_eq!(next(&mut c1).await, ("1b".into(), 2, false));
    assert_eq!(ready_total(), 4);
    assert_eq!(t.broker.queue_info("/", "g2").unwrap().messages, 3);
    let mut both = c1.or(c2);
    // Acking one frees one slot on the channel.
    ch.basic_ack(2, BasicAckOptions::default()).await.unwrap();
    sync(&ch).await;
    assert_eq!(ready_total(), 3);
    let (_, third, _) = next(&mut both).await;
    // Acking the other two frees two slots.
    ch.basic_ack(1, BasicAckOptions::default()).await.unwrap();
    ch.basic_ack(third, BasicAckOptions::default())
        .await
        .unwrap();
    sync(&ch).await;
    assert_eq!(ready_total(), 1);
    next(&mut both).await;
    let (_, fifth, _) = next(&mut both).await;
    // Two unacked again: the last message waits, whichever queue holds it.
    sync(&ch).await;
    assert_eq!(ready_total(), 1);
    ch.basic_ack(fifth, BasicAckOptions { multiple: true })
        .await
        .unwrap();
    next(&mut both).await;
    sync(&ch).await;
    assert_eq!(ready_total(), 0);
}

#[tokio::test]
async fn per_consumer_and_global_qos_both_limit_deliveries() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "both1").await;
    declare_queue(&ch, "both2").await;
    fill(&ch, "both1", &["1a", "1b", "1c", "1d"]).await;
    fill(&ch, "both2", &["2a", "2b", "2c", "2d"]).await;
    // Two per consumer, three on the whole channel.
    ch.basic_qos(2, BasicQosOptions { global: false })
        .await
        .unwrap();
    ch.basic_qos(3, BasicQosOptions { global: true })
        .await
        .unwrap();
    let mut c1 = consume(&ch, "both1", "c1", false).await;
    assert_eq!(next(&mut c1).await, ("1a".into(), 1, false));
    assert_eq!(next(&mut c1).await, ("1b".into(), 2, false));
    sync(&ch).await;
    assert_eq!(ready(&t, "both1"), 2, "c1 stops at its own limit");
    let mut c2 = consume(&ch, "both2", "c2", false).await;
    assert_eq!(next(&mut c2).await, ("2a".into(), 3, false));
    sync(&ch).await;
    assert_eq!(ready(&t, "both2"), 3, "c2 stops at the channel's limit");
    // Acking c2's message frees a channel slot; c1 is still at its own limit, so c2 gets it.
    ch.basic_ack(3, BasicAckOptions::default()).await.unwrap();
    assert_eq!(next(&mut c2).await, ("2b".into(), 4, false));
    sync(&ch).await;
    assert_eq!((ready(&t, "both1"), ready(&t, "both2")), (2, 2));
    // Acking one of c1's frees a slot of both kinds for c1.
    ch.basic_ack(1, BasicAckOptions::default()).await.unwrap();
    assert_eq!(next(&mut c1).await, ("1c".into(), 5, false));
    sync(&ch).await;
    assert_eq!((ready(&t, "both1"), ready(&t, "both2")), (1, 2));
}

#[tokio::test]
async fn qos_changed_after_consume_applies_to_new_consumers_or_at_once_when_global() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "late1").await;
    declare_queue(&ch, "late2").await;
    fill(&ch, "late1", &["1", "2", "3", "4"]).await;
    fill(&ch, "late2", &["1", "2", "3", "4"]).await;
    ch.basic_qos(1, BasicQosOptions { global: false })
        .await
        .unwrap();
    let mut old = consume(&ch, "late1", "old", false).await;
    next(&mut old).await;
    // As in RabbitMQ, a per-consumer limit applies to consumers created after it.
    ch.basic_qos(3, BasicQosOptions { global: false })
        .await
        .unwrap();
    let mut new = consume(&ch, "late2", "new", false).await;
    for _ in 0..3 {
        next(&mut new).await;
    }
    sync(&ch).await;
    assert_eq!((ready(&t, "late1"), ready(&t, "late2")), (3, 1));

    // A channel-wide limit applies at once: with one unacked, the consumer waits...
    let other = t.channel().await;
    declare_queue(&other, "late3").await;
    fill(&other, "late3", &["1", "2", "3", "4"]).await;
    other
        .basic_qos(1, BasicQosOptions { global: true })
        .await
        .unwrap();
    let mut held = consume(&other, "late3", "held", false).await;
    next(&mut held).await;
    sync(&other).await;
    assert_eq!(ready(&t, "late3"), 3);
    // ...and raising it releases more without any ack.
    other
        .basic_qos(3, BasicQosOptions { global: true })
        .await
        .unwrap();
    next(&mut held).await;
    next(&mut held).await;
    sync(&other).await;
    assert_eq!(ready(&t, "late3"), 1);
}

#[tokio::test]
async fn prefetch_size_is_not_implemented_540() {
    let t = start().await;
    let mut raw = RawClient::open(t.broker.local_addr()).await;
    raw.open_channel(1).await;
    raw.send_method(
        1,
        &Method::BasicQos(BasicQos {
            prefetch_size: 1024,
            prefetch_count: 0,
            global: false,
        }),
    )
    .await;
    assert_eq!(
        raw.expect_close_and_ack().await,
        (
            540,
            "NOT_IMPLEMENTED - prefetch_size!=0 (1024)".into(),
            60,
            10
        )
    );
}

#[tokio::test]
async fn channel_flow_pauses_and_resumes_deliveries() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "flow").await;
    let mut consumer = consume(&ch, "flow", "c", true).await;
    assert!(!ch
        .channel_flow(ChannelFlowOptions { active: false })
        .await
        .unwrap());
    let publisher = t.channel().await;
    fill(&publisher, "flow", &["1", "2", "3"]).await;
    assert_eq!(ready(&t, "flow"), 3, "nothing delivered while flow is off");
    assert!(ch
        .channel_flow(ChannelFlowOptions { active: true })
        .await
        .unwrap());
    for expected in ["1", "2", "3"] {
        assert_eq!(next(&mut consumer).await.0, expected);
    }
    assert_eq!(ready(&t, "flow"), 0);
}

// ---------------------------------------------------------------------------------------------
// Channels and connections

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

// ---------------------------------------------------------------------------------------------
// Publishing

#[tokio::test]
async fn publish_with_immediate_is_540_not_implemented_for_the_connection() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "imm").await;
    // Under confirms the pending confirm carries the error that ended the connection.
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "".into(),
            "imm".into(),
            BasicPublishOptions {
                immediate: true,
                ..Default::default()
            },
            b"now",
            BasicProperties::default(),
        )
        .await
        .expect("publish sent")
        .await;
    assert_eq!(
        channel_error(confirm),
        (540, "NOT_IMPLEMENTED - immediate=true".into())
    );
    assert_connection_closed(&t.connection).await;
    assert_eq!(ready(&t, "imm"), 0);
}

#[tokio::test]
async fn a_message_larger_than_frame_max_round_trips() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "big300").await;
    let body: Vec<u8> = (0..300 * 1024u32).map(|i| (i % 253) as u8).collect();
    for _ in 0..2 {
        ch.basic_publish(
            "".into(),
            "big300".into(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default().with_message_id("big".into()),
        )
        .await
        .unwrap();
    }
    sync(&ch).await;
    // Once through basic.get-ok, once through basic.deliver.
    let got = ch
        .basic_get("big300".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(got.delivery.data.len(), body.len());
    assert_eq!(got.delivery.data, body);
    let mut consumer = consume(&ch, "big300", "", true).await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!(d.data, body);
    assert_eq!(
        d.properties.message_id().as_ref().map(|m| m.as_str()),
        Some("big")
    );
}

#[tokio::test]
async fn invalid_expiration_is_406_with_rabbitmqs_texts() {
    let t = start().await;
    declare_queue(&t.channel().await, "exp").await;
    for (value, reason) in [
        ("abc", "no_integer".to_string()),
        ("-1", "{value_negative,-1}".to_string()),
        ("1.5", "{leftover_string,\".5\"}".to_string()),
    ] {
        let ch = t.channel().await;
        // Under confirms the pending confirm carries the channel error.
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        let confirm = ch
            .basic_publish(
                "".into(),
                "exp".into(),
                BasicPublishOptions::default(),
                b"x",
                BasicProperties::default().with_expiration(value.into()),
            )
            .await
            .expect("publish sent")
            .await;
        assert_eq!(
            channel_error(confirm),
            (
                406,
                format!("PRECONDITION_FAILED - invalid expiration '{value}': {reason}")
            ),
            "expiration {value:?}"
        );
    }
    // Valid ones are accepted.
    let ch = t.channel().await;
    for value in ["0", "60000"] {
        ch.basic_publish(
            "".into(),
            "exp".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default().with_expiration(value.into()),
        )
        .await
        .unwrap();
    }
    sync(&ch).await;
}

// ---------------------------------------------------------------------------------------------
// Argument validation

#[tokio::test]
async fn bad_queue_arguments_are_406_with_rabbitmqs_texts() {
    let t = start().await;
    let plain = QueueDeclareOptions::default();
    let cases: Vec<(&str, QueueDeclareOptions, FieldTable, &str)> = vec![
        (
            "ttl",
            plain,
            table(&[("x-message-ttl", AMQPValue::LongInt(-1))]),
            "invalid arg 'x-message-ttl' for queue 'ttl' in vhost '/': {value_negative,-1}",
        ),
        (
            "exp0",
            plain,
            table(&[("x-expires", AMQPValue::LongInt(0))]),
            "invalid arg 'x-expires' for queue 'exp0' in vhost '/': {value_zero,0}",
        ),
        (
            "ovf",
            plain,
            table(&[("x-overflow", long_str("drop-tail"))]),
            "invalid arg 'x-overflow' for queue 'ovf' in vhost '/': invalid_overflow",
        ),
        (
            "typ",
            plain,
            table(&[("x-queue-type", long_str("fancy"))]),
            "invalid arg 'x-queue-type' for queue 'typ' in vhost '/': \"unsupported queue type 'fancy'\"",
        ),
        (
            "qq",
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..Default::default()
            },
            table(&[("x-queue-type", long_str("quorum"))]),
            "invalid property 'exclusive-owner' for queue 'qq' in vhost '/'",
        ),
    ];
    for (name, options, arguments, text) in cases {
        let ch = t.channel().await;
        let err = declare_with(&ch, name, options, arguments).await;
        assert_eq!(
            channel_error(err),
            (406, format!("PRECONDITION_FAILED - {text}")),
            "queue {name}"
        );
        assert!(
            t.broker.queue_info("/", name).is_none(),
            "{name} not created"
        );
    }
}

#[tokio::test]
async fn headers_binding_with_a_bad_x_match_is_406() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "hq").await;
    let err = ch
        .queue_bind(
            "hq".into(),
            "amq.headers".into(),
            "".into(),
            QueueBindOptions::default(),
            table(&[("x-match", long_str("some")), ("a", long_str("1"))]),
        )
        .await;
    assert_eq!(
        channel_error(err),
        (
            406,
            "PRECONDITION_FAILED - Invalid x-match field value <<\"some\">>; expected all, any, all-with-x, or any-with-x".into()
        )
    );
    let ch = t.channel().await;
    let err = ch
        .queue_bind(
            "hq".into(),
            "amq.match".into(),
            "".into(),
            QueueBindOptions::default(),
            table(&[("x-match", AMQPValue::LongInt(5))]),
        )
        .await;
    assert_eq!(
        channel_error(err),
        (
            406,
            "PRECONDITION_FAILED - Invalid x-match field type signedint (value 5); expected longstr"
                .into()
        )
    );
    // The valid modes bind.
    let ch = t.channel().await;
    for mode in ["all", "any", "all-with-x", "any-with-x"] {
        ch.queue_bind(
            "hq".into(),
            "amq.headers".into(),
            "".into(),
            QueueBindOptions::default(),
            table(&[("x-match", long_str(mode)), ("a", long_str("1"))]),
        )
        .await
        .unwrap_or_else(|e| panic!("x-match {mode}: {e}"));
    }
}

#[tokio::test]
async fn recover_without_requeue_is_not_implemented_like_rabbitmq() {
    let t = start().await;
    let ch = t.channel().await;
    let err = ch
        .basic_recover(BasicRecoverOptions { requeue: false })
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (540, "NOT_IMPLEMENTED - requeue=false".into())
    );
}

#[tokio::test]
async fn a_priority_queue_delivers_highest_priority_first_and_requeues_in_place() {
    let t = start().await;
    let ch = t.channel().await;
    let mut args = FieldTable::default();
    args.insert("x-max-priority".into(), AMQPValue::ShortShortUInt(3));
    ch.queue_declare("prio".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    for (body, priority) in [
        ("none", None),
        ("p1", Some(1)),
        ("p7", Some(7)),
        ("p3", Some(3)),
    ] {
        let mut props = BasicProperties::default();
        if let Some(p) = priority {
            props = props.with_priority(p);
        }
        ch.basic_publish(
            "".into(),
            "prio".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            props,
        )
        .await
        .unwrap();
    }
    sync(&ch).await;
    // 7 is capped at the queue's maximum, 3, and then keeps publish order within that level.
    let first = ch
        .basic_get("prio".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(body(&first.delivery), "p7");
    ch.basic_reject(
        first.delivery.delivery_tag,
        BasicRejectOptions { requeue: true },
    )
    .await
    .unwrap();
    let order = drain_with_get(&ch, "prio").await;
    assert_eq!(
        order,
        [
            ("p7".to_string(), true),
            ("p3".to_string(), false),
            ("p1".to_string(), false),
            ("none".to_string(), false),
        ]
    );
}
