//! Publisher confirms, mandatory returns and transactions.

mod common;

use common::*;
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
