//! Consumers through a real client: consumer tags, exclusive consumers, cancel (and the
//! server's basic.cancel), recover, qos (per consumer, global, changed later), channel.flow.
//! What lapin cannot send (a prefetch size) or see (a basic.cancel frame) goes over
//! `common::raw`.

use std::time::Duration;

use crate::common::raw::{capabilities_without, RawClient};
use crate::common::*;
use dwellmq::codec::methods::{BasicCancel, BasicQos};
use dwellmq::codec::Method;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};

// ---------------------------------------------------------------------------------------------
// Consumers
// ---------------------------------------------------------------------------------------------

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
// ---------------------------------------------------------------------------------------------

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
async fn channel_flow_active_false_closes_the_connection_with_540() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "flow").await;
    let mut consumer = consume(&ch, "flow", "c", true).await;
    // Resuming is acknowledged and changes nothing.
    assert!(ch
        .channel_flow(ChannelFlowOptions { active: true })
        .await
        .unwrap());
    fill(&ch, "flow", &["1"]).await;
    assert_eq!(next(&mut consumer).await.0, "1");
    // RabbitMQ 3.10 refuses to let a client pause deliveries, and clients' suites expect that.
    let err = ch
        .channel_flow(ChannelFlowOptions { active: false })
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (540, "NOT_IMPLEMENTED - active=false".into())
    );
    assert!(!t.connection.status().connected());
}
