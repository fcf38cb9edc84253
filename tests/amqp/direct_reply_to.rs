//! Direct reply-to (`amq.rabbitmq.reply-to`) through a real client.

use crate::common::*;
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Confirmation, Consumer};

const REPLY_TO: &str = "amq.rabbitmq.reply-to";

async fn consume_replies(ch: &Channel, tag: &str, no_ack: bool) -> lapin::Result<Consumer> {
    ch.basic_consume(
        REPLY_TO.into(),
        tag.into(),
        BasicConsumeOptions {
            no_ack,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
}

#[tokio::test]
async fn a_request_and_its_reply_round_trip_through_the_pseudo_queue() {
    let t = start().await;
    let client = t.channel().await;
    let server_conn = connect(&t.broker).await;
    let server = server_conn.create_channel().await.unwrap();
    declare_queue(&server, "rpc").await;
    let mut requests = consume_no_ack(&server, "rpc").await;

    let mut replies = consume_replies(&client, "replies", true).await.unwrap();
    let props = BasicProperties::default()
        .with_reply_to(REPLY_TO.into())
        .with_correlation_id("c-7".into());
    publish_with(&client, "", "rpc", b"ping", props).await;

    let request = next_delivery(&mut requests).await;
    let address = request.properties.reply_to().clone().expect("reply_to");
    assert!(
        address.as_str().starts_with("amq.rabbitmq.reply-to."),
        "{address:?}"
    );
    // The address answers a (passive) declare while its consumer exists.
    let declared = passive_declare(&server, address.as_str()).await.unwrap();
    assert_eq!(
        (declared.message_count(), declared.consumer_count()),
        (0, 1)
    );
    let reply_props = BasicProperties::default().with_correlation_id("c-7".into());
    publish_with(&server, "", address.as_str(), b"pong", reply_props).await;

    let reply = next_delivery(&mut replies).await;
    assert_eq!(reply.data, b"pong");
    assert_eq!(reply.routing_key.as_str(), address.as_str());
    assert_eq!(
        reply
            .properties
            .correlation_id()
            .as_ref()
            .map(|s| s.as_str()),
        Some("c-7")
    );
    assert!(
        t.broker.queue_info("/", REPLY_TO).is_none(),
        "no real queue"
    );
}

#[tokio::test]
async fn a_reply_consumer_must_be_no_ack_and_single() {
    let t = start().await;
    let ch = t.channel().await;
    let error = consume_replies(&ch, "acking", false).await.unwrap_err();
    assert_eq!(
        amqp_error(&error),
        (
            406,
            "PRECONDITION_FAILED - reply consumer cannot acknowledge".into()
        )
    );
    let ch = t.channel().await;
    consume_replies(&ch, "first", true).await.unwrap();
    let error = consume_replies(&ch, "second", true).await.unwrap_err();
    assert_eq!(
        amqp_error(&error),
        (
            406,
            "PRECONDITION_FAILED - reply consumer already set".into()
        )
    );
}

#[tokio::test]
async fn a_request_needs_a_reply_consumer_on_its_own_channel() {
    let t = start().await;
    let consuming = t.channel().await;
    consume_replies(&consuming, "replies", true).await.unwrap();
    declare_queue(&consuming, "rpc").await;
    let other = t.channel().await;
    let props = BasicProperties::default().with_reply_to(REPLY_TO.into());
    assert_eq!(
        publish_error(&other, "", "rpc", props.clone()).await,
        (
            406,
            "PRECONDITION_FAILED - fast reply consumer does not exist".into()
        )
    );
    // Once cancelled, the consuming channel cannot ask for replies either.
    consuming
        .basic_cancel("replies".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    assert_eq!(
        publish_error(&consuming, "", "rpc", props).await,
        (
            406,
            "PRECONDITION_FAILED - fast reply consumer does not exist".into()
        )
    );
}

#[tokio::test]
async fn a_reply_to_an_address_that_is_gone_is_dropped_or_returned() {
    let t = start().await;
    let client = t.channel().await;
    let mut replies = consume_replies(&client, "replies", true).await.unwrap();
    declare_queue(&client, "rpc").await;
    let props = BasicProperties::default().with_reply_to(REPLY_TO.into());
    publish_with(&client, "", "rpc", b"req", props).await;
    sync(&client).await;
    let server = t.channel().await;
    let request = server
        .basic_get("rpc".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the request");
    let address = request.delivery.properties.reply_to().clone().unwrap();
    client.close(200, "done".into()).await.unwrap();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), replies.next()).await;
    assert!(
        matches!(ended, Ok(None)),
        "the consumer ends with its channel"
    );

    let error = passive_declare(&server, address.as_str())
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&error),
        (
            404,
            format!("NOT_FOUND - no queue '{}' in vhost '/'", address.as_str())
        )
    );
    let server = t.channel().await;
    server
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = server
        .basic_publish(
            "".into(),
            address.as_str().into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"too late",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    match confirm {
        Confirmation::Ack(Some(returned)) => assert_eq!(returned.reply_code, 312),
        other => panic!("expected the reply back as unroutable, got {other:?}"),
    }
}
