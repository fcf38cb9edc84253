//! Channel state over raw frames: opening, ids, errors and closing from either side.
//! RabbitMQ's reply codes and texts are the reference.

use crate::common::raw::{queue_declare, RawClient};
use crate::common::{broker, broker_with};
use dwellmq::codec::Method;
use dwellmq::Limits;

// ---------------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_method_on_an_unopened_channel_is_504() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.send_method(5, &queue_declare("q", false)).await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (504, "CHANNEL_ERROR - expected 'channel.open'", 50, 10)
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_second_channel_open_is_504() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.send_method(1, &Method::ChannelOpen).await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (504, "CHANNEL_ERROR - second 'channel.open' seen", 20, 10)
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_channel_method_on_channel_0_is_rabbitmqs_504() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.send_method(0, &queue_declare("q", false)).await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (
            504,
            "CHANNEL_ERROR - unexpected method in connection state running",
            50,
            10
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn channel_max_limits_how_many_channels_are_open_not_their_ids() {
    let broker = broker_with(Limits {
        channel_max: 3,
        ..Limits::default()
    })
    .await;
    let mut client = RawClient::open(broker.local_addr()).await;
    assert_eq!(client.server_tune.channel_max, 3);
    // RabbitMQ 3.10 accepts any channel number; channel_max bounds how many are open.
    for id in [100, u16::MAX, 7] {
        client.open_channel(id).await;
    }
    client
        .send_method(
            100,
            &Method::ChannelClose(dwellmq::codec::methods::ChannelClose {
                reply_code: 200,
                reply_text: "done".into(),
                class_id: 0,
                method_id: 0,
            }),
        )
        .await;
    assert_eq!(client.recv_method_on(100).await, Method::ChannelCloseOk);
    client.open_channel(4000).await;
    client.send_method(8, &Method::ChannelOpen).await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (
            530,
            "NOT_ALLOWED - number of channels opened (3) has reached the negotiated channel_max (3)",
            0,
            0
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn after_a_channel_error_frames_are_ignored_until_close_ok_then_the_channel_reopens() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.send_method(1, &queue_declare("missing", true)).await;
    assert_eq!(
        client.expect_channel_close(1).await,
        (
            404,
            "NOT_FOUND - no queue 'missing' in vhost '/'".to_string(),
            50,
            10
        )
    );
    // While the server waits for close-ok, everything else on the channel is dropped: a
    // declare, a whole publish, even channel.open.
    client
        .send_method(1, &queue_declare("made-while-closing", false))
        .await;
    client
        .publish(1, "", "made-while-closing", b"dropped")
        .await;
    client.send_method(1, &Method::ChannelOpen).await;
    // Other channels work meanwhile; their answer comes first, so nothing was sent for the
    // dropped frames on channel 1 (frames are handled in order).
    client.open_channel(2).await;
    assert!(broker.queue_info("/", "made-while-closing").is_none());

    client.send_method(1, &Method::ChannelCloseOk).await;
    client.open_channel(1).await;
    assert_eq!(
        client
            .declare_queue(1, "after-reopen", false)
            .await
            .message_count,
        0
    );
    client.close().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn channel_close_from_either_side_completes() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;

    // Client-initiated: close -> close-ok, then the number is free again.
    client.open_channel(1).await;
    client
        .send_method(
            1,
            &Method::ChannelClose(dwellmq::codec::methods::ChannelClose {
                reply_code: 200,
                reply_text: "done".into(),
                class_id: 0,
                method_id: 0,
            }),
        )
        .await;
    assert_eq!(client.recv_method_on(1).await, Method::ChannelCloseOk);
    client.open_channel(1).await;

    // Both sides close at once: the server answers the client's close while it waits for its
    // own close-ok, and a close-ok then ends the wait.
    client.send_method(1, &queue_declare("missing", true)).await;
    let (code, _, _, _) = client.expect_channel_close(1).await;
    assert_eq!(code, 404);
    client
        .send_method(
            1,
            &Method::ChannelClose(dwellmq::codec::methods::ChannelClose {
                reply_code: 200,
                reply_text: "crossing".into(),
                class_id: 0,
                method_id: 0,
            }),
        )
        .await;
    assert_eq!(client.recv_method_on(1).await, Method::ChannelCloseOk);
    client.send_method(1, &Method::ChannelCloseOk).await;
    client.open_channel(1).await;
    client.close().await;
    broker.shutdown().await;
}
