//! Framing errors over raw frames: oversized, malformed and unexpected frames and content,
//! and bodies in many tiny frames. RabbitMQ's reply codes and texts are the reference; where
//! dwellmq deliberately says something else, the test says so.

use crate::common::raw::{queue_declare, raw_frame, RawClient, FRAME_METHOD};
use crate::common::{broker, broker_with};
use bytes::BytesMut;
use dwellmq::codec::{encode_method, FramePayload, Method};
use dwellmq::Limits;

// ---------------------------------------------------------------------------------------------
// Tuning and framing errors
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn tune_offers_the_configured_limits() {
    let broker = broker_with(Limits {
        frame_max: 65_536,
        channel_max: 100,
        heartbeat_secs: 30,
        ..Limits::default()
    })
    .await;
    let client = RawClient::open(broker.local_addr()).await;
    assert_eq!(client.server_tune.frame_max, 65_536);
    assert_eq!(client.server_tune.channel_max, 100);
    assert_eq!(client.server_tune.heartbeat, 30);
    drop(client);

    let defaults = Limits::default();
    let other = broker_with(Limits::default()).await;
    let client = RawClient::open(other.local_addr()).await;
    assert_eq!(
        (
            client.server_tune.frame_max,
            client.server_tune.channel_max,
            client.server_tune.heartbeat
        ),
        (
            defaults.frame_max,
            defaults.channel_max,
            defaults.heartbeat_secs
        )
    );
    drop(client);
    broker.shutdown().await;
    other.shutdown().await;
}

#[tokio::test]
async fn an_oversized_frame_is_refused_from_its_header_alone() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    // Only the 7-octet header, announcing 2 GiB: the server must not wait for the payload.
    client
        .send_raw(&[FRAME_METHOD, 0, 1, 0x7f, 0xff, 0xff, 0xff])
        .await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (
            501,
            "FRAME_ERROR - frame size 2147483655 exceeds frame-max 131072",
            0,
            0
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_bad_frame_end_octet_is_501() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    let mut frame = BytesMut::new();
    encode_method(&mut frame, 1, &Method::ChannelOpen);
    let last = frame.len() - 1;
    frame[last] = 0x00;
    client.send_raw(&frame).await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (501, "FRAME_ERROR - frame end octet was 0x00, expected 0xce")
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn an_unknown_frame_type_is_501() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.send_raw(&raw_frame(9, 0, b"", 0xce)).await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (501, "FRAME_ERROR - unknown frame type 9")
    );
    broker.shutdown().await;
}

/// RabbitMQ has no answer here: its reader crashes on `{unknown_method_id, ...}` and the socket
/// just closes. dwellmq closes properly with 503 (the spec's "command-invalid").
#[tokio::test]
async fn an_unknown_class_or_method_is_503() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client
        .send_raw(&raw_frame(FRAME_METHOD, 1, &[0, 99, 0, 1], 0xce))
        .await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (
            503,
            "COMMAND_INVALID - unknown method class 99 method 1",
            99,
            1
        )
    );
    broker.shutdown().await;
}

/// RabbitMQ answers undecodable arguments with 501 "FRAME_ERROR - cannot decode <<...>>";
/// dwellmq's codec classifies them as 502 SYNTAX_ERROR (the spec's wording for bad fields).
#[tokio::test]
async fn truncated_method_arguments_are_502() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    // queue.declare: reserved short, then a queue name announcing 5 octets but holding 1.
    client
        .send_raw(&raw_frame(
            FRAME_METHOD,
            1,
            &[0, 50, 0, 10, 0, 0, 5, b'a'],
            0xce,
        ))
        .await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (
            502,
            "SYNTAX_ERROR - malformed arguments for queue.declare",
            50,
            10
        )
    );

    // Too short to hold even the class and method ids.
    let mut client = RawClient::open(broker.local_addr()).await;
    client
        .send_raw(&raw_frame(FRAME_METHOD, 0, &[0, 10], 0xce))
        .await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (502, "SYNTAX_ERROR - method frame too short")
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_content_header_without_a_publish_is_505() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.send_content_header(1, 3).await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (
            505,
            "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
        )
    );

    // A body frame with nothing pending: the same.
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.send_body(1, b"abc").await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (
            505,
            "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_content_frame_on_channel_0_is_505_for_the_connection() {
    // RabbitMQ answers 501 FRAME_ERROR with a snippet of the payload here; dwellmq names the
    // frame it did not expect (505), as it does on other channels.
    let broker = broker().await;
    for content in ["header", "body"] {
        let mut client = RawClient::open(broker.local_addr()).await;
        client.open_channel(1).await;
        match content {
            "header" => client.send_content_header(0, 3).await,
            _ => client.send_body(0, b"abc").await,
        }
        assert_eq!(
            client.expect_close_and_ack().await,
            (
                505,
                "UNEXPECTED_FRAME - content frame on channel 0".into(),
                0,
                0
            ),
            "a content {content} frame"
        );
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn a_method_where_a_content_header_was_expected_is_505() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.send_publish_method(1, "", "q").await;
    client.send_method(1, &queue_declare("q", false)).await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(code, 505);
    // RabbitMQ's text exactly, which dwellmq follows with the offending method's name.
    assert!(
        text.starts_with(
            "UNEXPECTED_FRAME - expected content header for class 60, \
             got non content header frame instead"
        ),
        "{text}"
    );

    // A body frame where the header was expected: RabbitMQ's text.
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.send_publish_method(1, "", "q").await;
    client.send_body(1, b"abc").await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (
            505,
            "UNEXPECTED_FRAME - expected content header for class 60, \
             got non content header frame instead"
        )
    );

    // A second header where a body was expected.
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.send_publish_method(1, "", "q").await;
    client.send_content_header(1, 3).await;
    client.send_content_header(1, 3).await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (
            505,
            "UNEXPECTED_FRAME - expected content body, got non content body frame instead"
        )
    );
    broker.shutdown().await;
}

/// RabbitMQ sends 501 "FRAME_ERROR - content body frame exceeds remaining content size" here
/// (rabbit_command_assembler); dwellmq's channel.rs sends 505.
#[tokio::test]
async fn a_body_larger_than_announced_is_501_as_in_rabbitmq() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.send_publish_method(1, "", "q").await;
    client.send_content_header(1, 3).await;
    client.send_body(1, b"abcde").await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (
            501,
            "FRAME_ERROR - content body frame exceeds remaining content size",
            60,
            40
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_body_in_thousands_of_tiny_frames_is_delivered_intact() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.declare_queue(1, "tiny-frames", false).await;
    // 1500 one-octet body frames: more than the broker keeps as separate slices.
    let body: Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8).collect();
    client.send_publish_method(1, "", "tiny-frames").await;
    client.send_content_header(1, body.len() as u64).await;
    for octet in &body {
        client.send_body(1, std::slice::from_ref(octet)).await;
    }
    assert_eq!(
        client
            .declare_queue(1, "tiny-frames", true)
            .await
            .message_count,
        1
    );
    client
        .send_method(
            1,
            &Method::BasicGet(dwellmq::codec::methods::BasicGet {
                queue: "tiny-frames".into(),
                no_ack: true,
            }),
        )
        .await;
    assert!(matches!(
        client.recv_method_on(1).await,
        Method::BasicGetOk(_)
    ));
    match client.recv_non_heartbeat().await.payload {
        FramePayload::Header(h) => assert_eq!(h.body_size, 1500),
        other => panic!("expected a content header, got {other:?}"),
    }
    match client.recv_non_heartbeat().await.payload {
        FramePayload::Body(chunk) => assert_eq!(&chunk[..], &body[..], "one frame, intact"),
        other => panic!("expected a body frame, got {other:?}"),
    }
    client.close().await;
    broker.shutdown().await;
}
