//! Publishing: publisher confirms, mandatory returns, transactions, `immediate`, messages
//! larger than frame_max, and RabbitMQ's texts for a bad `expiration`.

use std::collections::BTreeSet;

use crate::common::raw::{publish_frames, RawClient};
use crate::common::*;
use bytes::BytesMut;
use dwellmq::codec::methods::{BasicAck, ConfirmSelect};
use dwellmq::codec::Method;
use lapin::options::*;
use lapin::BasicProperties;
use lapin::Confirmation;

#[tokio::test]
async fn confirms_ack_every_publish() {
    let t = start().await;
    let ch = t.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare_queue(&ch, "cq").await;
    let mut confirms = Vec::new();
    for i in 0..100 {
        confirms.push(
            ch.basic_publish(
                "".into(),
                "cq".into(),
                BasicPublishOptions::default(),
                format!("{i}").as_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap(),
        );
    }
    for confirm in confirms {
        assert!(confirm.await.unwrap().is_ack());
    }
    assert_eq!(t.broker.queue_info("/", "cq").unwrap().messages, 100);
}

#[tokio::test]
async fn mandatory_unroutable_message_is_returned_with_312_then_acked() {
    let t = start().await;
    let ch = t.channel().await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "amq.direct".into(),
            "nobody".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"lost?",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    match confirm {
        Confirmation::Ack(Some(returned)) => {
            assert_eq!(returned.reply_code, 312);
            assert_eq!(returned.reply_text.as_str(), "NO_ROUTE");
            assert_eq!(returned.delivery.data, b"lost?");
        }
        other => panic!("expected an ack carrying the returned message, got {other:?}"),
    }
}

#[tokio::test]
async fn transactions_publish_on_commit_and_discard_on_rollback() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "txq").await;
    ch.tx_select().await.unwrap();
    ch.basic_publish(
        "".into(),
        "txq".into(),
        BasicPublishOptions::default(),
        b"rolled back",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    ch.tx_rollback().await.unwrap();
    assert_eq!(t.broker.queue_info("/", "txq").unwrap().messages, 0);
    ch.basic_publish(
        "".into(),
        "txq".into(),
        BasicPublishOptions::default(),
        b"committed",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    assert_eq!(t.broker.queue_info("/", "txq").unwrap().messages, 0);
    ch.tx_commit().await.unwrap();
    assert_eq!(t.broker.queue_info("/", "txq").unwrap().messages, 1);
}

/// A channel in tx mode that has consumed four messages (tags 1-4 unacked) from `queue`.
async fn tx_channel_holding_four(t: &TestBroker, queue: &str) -> lapin::Channel {
    let ch = t.channel().await;
    declare_queue(&ch, queue).await;
    for body in ["1", "2", "3", "4"] {
        ch.basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    ch.tx_select().await.unwrap();
    for tag in 1..=4 {
        let got = ch
            .basic_get(queue.into(), BasicGetOptions { no_ack: false })
            .await
            .unwrap()
            .expect("a message");
        assert_eq!(got.delivery.delivery_tag, tag);
    }
    ch
}

/// Sends one of each settlement on `ch` for tags 1-4: ack, nack (drop), reject (requeue),
/// nack (requeue).
async fn settle_all_four_ways(ch: &lapin::Channel) {
    ch.basic_ack(1, BasicAckOptions::default()).await.unwrap();
    ch.basic_nack(
        2,
        BasicNackOptions {
            requeue: false,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    ch.basic_reject(3, BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    ch.basic_nack(
        4,
        BasicNackOptions {
            requeue: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn tx_rollback_discards_acks_nacks_and_rejects() {
    let t = start().await;
    let ch = tx_channel_holding_four(&t, "tx-settle").await;
    settle_all_four_ways(&ch).await;
    ch.tx_rollback().await.unwrap();
    // Nothing requeued...
    assert_eq!(t.broker.queue_info("/", "tx-settle").unwrap().messages, 0);
    // ...and nothing settled: all four are still unacked, so closing the channel requeues them.
    ch.close(200, "bye".into()).await.unwrap();
    assert_eq!(t.broker.queue_info("/", "tx-settle").unwrap().messages, 4);
}

#[tokio::test]
async fn tx_commit_applies_acks_nacks_and_rejects_and_not_before() {
    let t = start().await;
    let ch = tx_channel_holding_four(&t, "tx-settle").await;
    settle_all_four_ways(&ch).await;
    sync(&ch).await;
    assert_eq!(t.broker.queue_info("/", "tx-settle").unwrap().messages, 0);
    ch.tx_commit().await.unwrap();
    // The reject and the requeueing nack put 3 and 4 back; 1 and 2 are gone.
    assert_eq!(t.broker.queue_info("/", "tx-settle").unwrap().messages, 2);
    ch.close(200, "bye".into()).await.unwrap();
    assert_eq!(t.broker.queue_info("/", "tx-settle").unwrap().messages, 2);
}

/// Publishes `count` mandatory messages in one write on a channel in confirm mode, every third
/// unroutable, and checks RabbitMQ's ordering: each `basic.return` arrives before the
/// `basic.ack` covering its tag, and the acks (some `multiple`) cover every tag exactly once.
#[tokio::test]
async fn pipelined_mandatory_publishes_get_each_return_before_the_ack_covering_it() {
    const COUNT: u64 = 60;
    let unroutable = |tag: u64| tag.is_multiple_of(3);
    let t = start().await;
    let mut client = RawClient::open(t.broker.local_addr()).await;
    client.open_channel(1).await;
    client.declare_queue(1, "routed", false).await;
    assert_eq!(
        client
            .call(1, &Method::ConfirmSelect(ConfirmSelect { no_wait: false }))
            .await,
        Method::ConfirmSelectOk
    );
    let mut out = BytesMut::new();
    for tag in 1..=COUNT {
        let key = if unroutable(tag) { "nowhere" } else { "routed" };
        publish_frames(&mut out, 1, "", key, true, tag.to_string().as_bytes());
    }
    client.send_raw(&out).await;

    let mut acked = BTreeSet::new();
    let mut returned = BTreeSet::new();
    while acked.len() < COUNT as usize {
        match client.recv_method_on(1).await {
            Method::BasicReturn(r) => {
                assert_eq!(
                    (r.reply_code, r.reply_text.as_str(), r.routing_key.as_str()),
                    (312, "NO_ROUTE", "nowhere")
                );
                let body = client.recv_content(1).await;
                let tag: u64 = String::from_utf8(body).unwrap().parse().unwrap();
                assert!(unroutable(tag), "{tag} was routable");
                assert!(!acked.contains(&tag), "{tag} returned after its ack");
                assert!(returned.insert(tag), "{tag} returned twice");
            }
            Method::BasicAck(BasicAck {
                delivery_tag,
                multiple,
            }) => {
                let covered: Vec<u64> = if multiple {
                    (1..=delivery_tag).filter(|t| !acked.contains(t)).collect()
                } else {
                    vec![delivery_tag]
                };
                assert!(
                    covered.contains(&delivery_tag),
                    "ack {delivery_tag} (multiple: {multiple}) repeats an acked tag"
                );
                for tag in covered {
                    assert!((1..=COUNT).contains(&tag), "ack for unknown tag {tag}");
                    assert!(acked.insert(tag), "{tag} acked twice");
                    if unroutable(tag) {
                        assert!(returned.contains(&tag), "{tag} acked before its return");
                    }
                }
            }
            other => panic!("expected basic.return or basic.ack, got {other:?}"),
        }
    }
    let expected: BTreeSet<u64> = (1..=COUNT).filter(|&t| unroutable(t)).collect();
    assert_eq!(returned, expected);
    // Nothing else was pending: the next frame is this declare's reply.
    assert_eq!(client.queue_depth(1, "routed").await, 40);
    client.close().await;
}

#[tokio::test]
async fn publishes_before_a_channel_error_in_the_same_write_are_still_confirmed() {
    let t = start().await;
    let mut client = RawClient::open(t.broker.local_addr()).await;
    client.open_channel(1).await;
    client.declare_queue(1, "kept", false).await;
    assert_eq!(
        client
            .call(1, &Method::ConfirmSelect(ConfirmSelect { no_wait: false }))
            .await,
        Method::ConfirmSelectOk
    );
    let mut out = BytesMut::new();
    publish_frames(&mut out, 1, "", "kept", false, b"fine");
    publish_frames(&mut out, 1, "missing", "k", false, b"refused");
    client.send_raw(&out).await;
    // As in RabbitMQ, which confirms after every method: the first publish is acked before the
    // second one's error closes the channel.
    assert_eq!(
        client.recv_method_on(1).await,
        Method::BasicAck(BasicAck {
            delivery_tag: 1,
            multiple: false
        })
    );
    assert_eq!(
        client.expect_channel_close(1).await,
        (
            404,
            "NOT_FOUND - no exchange 'missing' in vhost '/'".into(),
            60,
            40
        )
    );
    assert_eq!(t.broker.queue_info("/", "kept").unwrap().messages, 1);
}

#[tokio::test]
async fn tx_and_confirm_modes_exclude_each_other() {
    let t = start().await;
    let ch = t.channel().await;
    ch.tx_select().await.unwrap();
    let err = ch
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - cannot switch from tx to confirm mode".into()
        )
    );
    let ch = t.channel().await;
    let err = ch.tx_commit().await.unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - channel is not transactional".into()
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Publish options and properties
// ---------------------------------------------------------------------------------------------

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
        .confirmed()
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
            .confirmed()
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
