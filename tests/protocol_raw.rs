//! Protocol edges a library client never reaches, driven with raw AMQP frames over a socket:
//! protocol headers, negotiation, framing errors, channel state, heartbeats, blocking,
//! connection limits and shutdown. RabbitMQ's reply codes and texts are the reference; where
//! dwellmq deliberately says something else, the test says so.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::BytesMut;
use common::raw::{start_ok_amqplain, start_ok_plain, RawClient, Tune, AMQP_0_9_1};
use common::{consume_no_ack, declare_queue, next_body};
use dwellmq::codec::methods::{
    BasicConsume, ConnectionClose, ConnectionTuneOk, QueueDeclare, QueuePurge,
};
use dwellmq::codec::{encode_method, FieldValue, FramePayload, Method};
use dwellmq::{Broker, BrokerConfig, BrokerHandle, Limits, MemoryWatermark, UserConfig};
use lapin::options::BasicPublishOptions;
use lapin::BasicProperties;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FRAME_METHOD: u8 = 1;

async fn broker() -> BrokerHandle {
    broker_with(Limits::default()).await
}

async fn broker_with(limits: Limits) -> BrokerHandle {
    let mut config = BrokerConfig::ephemeral();
    config.limits = limits;
    Broker::start(config).await.expect("broker starts")
}

/// One frame with an arbitrary type and end octet.
fn raw_frame(kind: u8, channel: u16, payload: &[u8], end: u8) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(end);
    out
}

fn declare(queue: &str, passive: bool) -> Method {
    Method::QueueDeclare(QueueDeclare {
        queue: queue.into(),
        passive,
        ..Default::default()
    })
}

/// Declares `queue` on `channel` and returns its ready-message count.
async fn declare_count(client: &mut RawClient, channel: u16, queue: &str, passive: bool) -> u32 {
    client.send_method(channel, &declare(queue, passive)).await;
    match client.recv_method_on(channel).await {
        Method::QueueDeclareOk(ok) => ok.message_count,
        other => panic!("expected queue.declare-ok, got {other:?}"),
    }
}

/// Polls a broker-side condition (e.g. a connection count that drops after a socket closed).
async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..500 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

// ---------------------------------------------------------------------------------------------
// 1. Protocol header
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn other_protocol_headers_get_ours_and_the_socket_closes() {
    let broker = broker().await;
    let headers: [&[u8]; 5] = [
        b"AMQP\x00\x00\x09\x00",              // 0-9-0 (revision 0)
        b"AMQP\x01\x01\x00\x0a",              // 0-10
        b"AMQP\x03\x01\x00\x00",              // AMQP 1.0 SASL
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", // HTTP
        b"\x16\x03\x01\x02\x00\x01\x00\x01",  // a TLS ClientHello
    ];
    for header in headers {
        let mut client = RawClient::connect(broker.local_addr()).await;
        client.send_raw(header).await;
        assert_eq!(
            client.read_raw(8).await,
            AMQP_0_9_1.to_vec(),
            "answer to {header:?}"
        );
        let rest = client.expect_eof().await;
        assert!(rest.is_empty(), "nothing after the header: {rest:?}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn a_non_amqp_peer_is_answered_without_waiting_for_eight_octets() {
    let broker = broker().await;
    let mut client = RawClient::connect(broker.local_addr()).await;
    client.send_raw(b"HI").await;
    assert_eq!(client.read_raw(8).await, AMQP_0_9_1.to_vec());
    client.expect_eof().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn the_amqp_0_9_header_is_served_as_0_9_1_like_rabbitmq() {
    let broker = broker().await;
    let (mut client, start) =
        RawClient::start_with_header(broker.local_addr(), b"AMQP\x01\x01\x00\x09").await;
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    client
        .send_method(0, &start_ok_plain("guest", "guest"))
        .await;
    client.finish_handshake(Tune::default()).await;
    client.open_channel(1).await;
    client.close().await;
    broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 2. connection.start and authentication
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn connection_start_offers_0_9_plain_amqplain_and_rabbitmq_capabilities() {
    let broker = broker().await;
    let (mut client, start) = RawClient::start(broker.local_addr()).await;
    assert_eq!((start.version_major, start.version_minor), (0, 9));
    let mechanisms = std::str::from_utf8(&start.mechanisms).unwrap();
    let mechanisms: Vec<&str> = mechanisms.split(' ').collect();
    assert!(mechanisms.contains(&"PLAIN"), "{mechanisms:?}");
    assert!(mechanisms.contains(&"AMQPLAIN"), "{mechanisms:?}");
    assert_eq!(&start.locales[..], b"en_US");
    let Some(FieldValue::Table(capabilities)) = start.server_properties.get("capabilities") else {
        panic!("no capabilities table: {:?}", start.server_properties);
    };
    for capability in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
    ] {
        assert_eq!(
            capabilities.get(capability),
            Some(&FieldValue::Bool(true)),
            "capability {capability}"
        );
    }
    for key in ["product", "version", "platform"] {
        assert!(
            start.server_properties.get(key).is_some(),
            "server property {key}"
        );
    }
    client
        .send_method(0, &start_ok_plain("guest", "guest"))
        .await;
    client.finish_handshake(Tune::default()).await;
    client.close().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn amqplain_login_opens_the_connection() {
    let broker = broker().await;
    let (mut client, _) = RawClient::start(broker.local_addr()).await;
    client
        .send_method(0, &start_ok_amqplain("guest", "guest"))
        .await;
    client.finish_handshake(Tune::default()).await;
    client.open_channel(1).await;
    client.close().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn wrong_credentials_are_refused_with_rabbitmqs_403() {
    let broker = broker().await;
    let attempts = [
        (start_ok_plain("guest", "wrong"), "PLAIN"),
        (start_ok_plain("nobody", "guest"), "PLAIN"),
        (start_ok_amqplain("guest", "wrong"), "AMQPLAIN"),
    ];
    for (start_ok, mechanism) in attempts {
        let (mut client, _) = RawClient::start(broker.local_addr()).await;
        client.send_method(0, &start_ok).await;
        let (code, text, _, _) = client.expect_close_and_ack().await;
        assert_eq!(code, 403);
        assert_eq!(
            text,
            format!(
                "ACCESS_REFUSED - Login was refused using authentication mechanism {mechanism}. \
                 For details see the broker logfile."
            )
        );
    }
    // A mechanism that was not offered. (RabbitMQ closes silently after 3 s here, having
    // raised 503 internally; dwellmq tells the client.)
    let (mut client, _) = RawClient::start(broker.local_addr()).await;
    client
        .send_method(
            0,
            &Method::ConnectionStartOk(dwellmq::codec::methods::ConnectionStartOk {
                client_properties: common::raw::client_properties(),
                mechanism: "EXTERNAL".into(),
                response: bytes::Bytes::new(),
                locale: "en_US".into(),
            }),
        )
        .await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (
            403,
            "ACCESS_REFUSED - unsupported authentication mechanism 'EXTERNAL'"
        )
    );
    // The broker reads until the client closes its side too, as RabbitMQ does.
    drop(client);
    eventually("the refused connections are gone", || {
        broker.connection_count() == 0
    })
    .await;
    broker.shutdown().await;
}

/// A local address that is not loopback (the machine's own interface), if it has one.
fn non_loopback_local_ip() -> Option<IpAddr> {
    // Connecting a UDP socket sends nothing; it only asks the kernel for the source address.
    for target in ["192.0.2.1:9", "10.255.255.254:9", "203.0.113.1:9"] {
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        if socket.connect(target).is_ok() {
            if let Ok(local) = socket.local_addr() {
                let ip = local.ip();
                if !ip.is_loopback() && !ip.is_unspecified() {
                    return Some(ip);
                }
            }
        }
    }
    None
}

#[tokio::test]
async fn guest_is_refused_from_a_non_loopback_address() {
    let Some(ip) = non_loopback_local_ip() else {
        // handshake.rs's unit test `loopback_only_users_are_refused_from_other_addresses`
        // covers the rule without a network interface.
        eprintln!("skipped: this machine has no non-loopback address");
        return;
    };
    let mut config = BrokerConfig::ephemeral();
    config.listen = vec![SocketAddr::new(ip, 0)];
    config.users.push(UserConfig {
        name: "app".into(),
        password: "secret".into(),
        vhosts: vec!["*".into()],
        loopback_only: false,
    });
    let broker = Broker::start(config).await.expect("broker starts");

    let (mut client, _) = RawClient::start(broker.local_addr()).await;
    client
        .send_method(0, &start_ok_plain("guest", "guest"))
        .await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(code, 403);
    // RabbitMQ (with authentication_failure_close) sends its generic text here; dwellmq
    // names the reason, which is not a secret.
    assert_eq!(
        text,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
         User 'guest' can only connect via localhost"
    );

    // A user without the loopback restriction gets in from the same address.
    let (mut client, _) = RawClient::start(broker.local_addr()).await;
    client
        .send_method(0, &start_ok_plain("app", "secret"))
        .await;
    client.finish_handshake(Tune::default()).await;
    client.close().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn connection_close_during_the_handshake_gets_close_ok() {
    let broker = broker().await;
    let (mut client, _) = RawClient::start(broker.local_addr()).await;
    client
        .send_method(
            0,
            &Method::ConnectionClose(ConnectionClose {
                reply_code: 200,
                reply_text: "changed my mind".into(),
                class_id: 0,
                method_id: 0,
            }),
        )
        .await;
    assert_eq!(client.recv_method0().await, Method::ConnectionCloseOk);
    client.expect_eof().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn an_out_of_order_negotiation_method_is_503() {
    let broker = broker().await;
    let (mut client, _) = RawClient::start(broker.local_addr()).await;
    client
        .send_method(
            0,
            &Method::ConnectionOpen(dwellmq::codec::methods::ConnectionOpen {
                virtual_host: "/".into(),
            }),
        )
        .await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (
            503,
            "COMMAND_INVALID - expected a connection negotiation method, got connection.open",
            10,
            40
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn opening_an_unknown_vhost_is_530() {
    let broker = broker().await;
    let (mut client, _) = RawClient::start(broker.local_addr()).await;
    client
        .send_method(0, &start_ok_plain("guest", "guest"))
        .await;
    let _tune = client.recv_method0().await;
    let tune_ok = Method::ConnectionTuneOk(ConnectionTuneOk {
        channel_max: 0,
        frame_max: 131_072,
        heartbeat: 0,
    });
    client.send_method(0, &tune_ok).await;
    client
        .send_method(
            0,
            &Method::ConnectionOpen(dwellmq::codec::methods::ConnectionOpen {
                virtual_host: "nope".into(),
            }),
        )
        .await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (530, "NOT_ALLOWED - vhost nope not found", 10, 40)
    );
    broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 3. Tuning and framing errors
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
async fn a_method_where_a_content_header_was_expected_is_505() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client
        .send_method(
            1,
            &Method::BasicPublish(dwellmq::codec::methods::BasicPublish {
                exchange: "".into(),
                routing_key: "q".into(),
                mandatory: false,
                immediate: false,
            }),
        )
        .await;
    client.send_method(1, &declare("q", false)).await;
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
    client
        .send_method(
            1,
            &Method::BasicPublish(dwellmq::codec::methods::BasicPublish {
                exchange: "".into(),
                routing_key: "q".into(),
                mandatory: false,
                immediate: false,
            }),
        )
        .await;
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
    client
        .send_method(
            1,
            &Method::BasicPublish(dwellmq::codec::methods::BasicPublish {
                exchange: "".into(),
                routing_key: "q".into(),
                mandatory: false,
                immediate: false,
            }),
        )
        .await;
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
    client
        .send_method(
            1,
            &Method::BasicPublish(dwellmq::codec::methods::BasicPublish {
                exchange: "".into(),
                routing_key: "q".into(),
                mandatory: false,
                immediate: false,
            }),
        )
        .await;
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

// ---------------------------------------------------------------------------------------------
// 4. Channels
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_method_on_an_unopened_channel_is_504() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.send_method(5, &declare("q", false)).await;
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
    client.send_method(0, &declare("q", false)).await;
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
    client.send_method(1, &declare("missing", true)).await;
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
        .send_method(1, &declare("made-while-closing", false))
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
        declare_count(&mut client, 1, "after-reopen", false).await,
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
    client.send_method(1, &declare("missing", true)).await;
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

// ---------------------------------------------------------------------------------------------
// 5. Heartbeats
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_silent_client_gets_heartbeats_and_is_then_disconnected() {
    let broker = broker().await;
    let mut client = RawClient::open_with(
        broker.local_addr(),
        Tune {
            heartbeat: Some(1),
            ..Tune::default()
        },
    )
    .await;
    // Hang guard only: expect_eof fails if the socket is still open after 10 s.
    let seen = client.expect_eof().await;
    assert!(
        seen.iter()
            .any(|f| matches!(f.payload, FramePayload::Heartbeat)),
        "the server sent heartbeats: {seen:?}"
    );
    // Like RabbitMQ, a missed-heartbeat timeout closes the socket without connection.close.
    assert!(
        seen.iter()
            .all(|f| matches!(f.payload, FramePayload::Heartbeat)),
        "{seen:?}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_client_sending_heartbeats_stays_connected() {
    let broker = broker().await;
    let mut client = RawClient::open_with(
        broker.local_addr(),
        Tune {
            heartbeat: Some(1),
            ..Tune::default()
        },
    )
    .await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        client.send_heartbeat().await;
    }
    // Four seconds (two missed-heartbeat windows twice over) later the connection works.
    client.open_channel(1).await;
    client.close().await;
    broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 6. Isolation
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn garbage_on_one_connection_does_not_disturb_the_others() {
    let t = common::start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "steady").await;
    let mut consumer = consume_no_ack(&ch, "steady").await;
    let addr = t.broker.local_addr();

    let vandal = tokio::spawn(async move {
        let garbage: [&[u8]; 4] = [
            &[FRAME_METHOD, 0, 1, 0x7f, 0xff, 0xff, 0xff],
            &[9, 0, 0, 0, 0, 0, 0, 0xce],
            &[FRAME_METHOD, 0, 1, 0, 0, 0, 4, 0, 99, 0, 1, 0xce],
            &[FRAME_METHOD, 0, 0, 0, 0, 0, 0, 0x00],
        ];
        let mut codes = Vec::new();
        for bytes in garbage {
            let mut client = RawClient::open(addr).await;
            client.send_raw(bytes).await;
            codes.push(client.expect_close_and_ack().await.0);
        }
        // And one that speaks another protocol entirely.
        let mut client = RawClient::connect(addr).await;
        client.send_raw(b"GET / HTTP/1.1\r\n\r\n").await;
        assert_eq!(client.read_raw(8).await, AMQP_0_9_1.to_vec());
        client.expect_eof().await;
        codes
    });

    for i in 0..200 {
        ch.basic_publish(
            "".into(),
            "steady".into(),
            BasicPublishOptions::default(),
            format!("m{i}").as_bytes(),
            BasicProperties::default(),
        )
        .await
        .expect("publish");
        if i % 20 == 0 {
            tokio::task::yield_now().await;
        }
    }
    for i in 0..200 {
        assert_eq!(next_body(&mut consumer).await, format!("m{i}"));
    }
    assert_eq!(vandal.await.unwrap(), vec![501, 501, 503, 501]);

    // Still fine afterwards.
    ch.basic_publish(
        "".into(),
        "steady".into(),
        BasicPublishOptions::default(),
        b"after",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    assert_eq!(next_body(&mut consumer).await, "after");
}

// ---------------------------------------------------------------------------------------------
// 7. Closing and shutdown
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn client_connection_close_gets_close_ok_and_the_socket_closes() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    declare_count(&mut client, 1, "excl-check", false).await;
    client.close().await; // asserts close-ok, then EOF
                          // The broker reads until the client closes its side too, as RabbitMQ does.
    drop(client);
    eventually("the connection is gone", || broker.connection_count() == 0).await;
    broker.shutdown().await;
}

/// Writes `last` (a `connection.close` or `close-ok`) followed by 4 MiB of `channel.close-ok`
/// frames in one write, then ends the client's side. That is far more than the broker reads
/// at once or the kernel buffers, so the write completes only if the broker keeps reading
/// after the close handshake; a broker that closed its socket instead would reset it, and
/// the write would fail with EPIPE or ECONNRESET. (amqp091-go sends the `channel.close-ok`
/// it owes after its `connection.close` when it closes right after a channel exception;
/// amqplib closes with its write buffer still full.)
async fn send_with_frames_after(client: &mut RawClient, last: &Method) {
    let mut out = BytesMut::new();
    encode_method(&mut out, 0, last);
    while out.len() < 4 * 1024 * 1024 {
        encode_method(&mut out, 1, &Method::ChannelCloseOk);
    }
    client
        .try_send_raw(&out)
        .await
        .expect("the broker reads what the client still sends after the close");
    client.stream.shutdown().await.expect("client side ends");
}

/// Expects a clean end of stream next (after the broker's last frame).
async fn expect_clean_end(client: &mut RawClient) {
    let mut rest = [0u8; 64];
    let end = tokio::time::timeout(Duration::from_secs(5), client.stream.read(&mut rest))
        .await
        .expect("the broker ends the socket once the client has");
    assert!(
        matches!(end, Ok(0)),
        "expected a clean end of stream, got {end:?}"
    );
}

#[tokio::test]
async fn frames_after_the_clients_close_are_discarded_and_the_socket_ends_cleanly() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    let close = Method::ConnectionClose(ConnectionClose {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    });
    send_with_frames_after(&mut client, &close).await;
    assert_eq!(client.recv_method0().await, Method::ConnectionCloseOk);
    expect_clean_end(&mut client).await;
    eventually("the connection is gone", || broker.connection_count() == 0).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn after_its_own_close_the_broker_reads_until_the_client_closes() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    // Any connection error will do: a channel method on channel 0.
    client.send_method(0, &Method::ChannelOpen).await;
    let close = client.expect_connection_close().await;
    assert_eq!(close.reply_code, 504);
    send_with_frames_after(&mut client, &Method::ConnectionCloseOk).await;
    expect_clean_end(&mut client).await;
    eventually("the connection is gone", || broker.connection_count() == 0).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn broker_shutdown_sends_320_and_waits_for_close_ok() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    let shutdown = tokio::spawn(broker.shutdown());
    let close = client.expect_connection_close().await;
    assert_eq!(
        (
            close.reply_code,
            close.reply_text.as_str(),
            close.class_id,
            close.method_id
        ),
        (
            320,
            "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'",
            0,
            0
        )
    );
    client.send_method(0, &Method::ConnectionCloseOk).await;
    client.expect_eof().await;
    tokio::time::timeout(Duration::from_secs(5), shutdown)
        .await
        .expect("shutdown returns once the client has acknowledged")
        .unwrap();
}

#[tokio::test]
async fn shutdown_does_not_wait_for_a_client_stuck_in_the_handshake() {
    let broker = broker().await;
    let (mut client, _start) = RawClient::start(broker.local_addr()).await;
    // The client never answers connection.start. Shutdown must not wait for the 10 s
    // handshake timeout (5 s is a hang guard below that).
    tokio::time::timeout(Duration::from_secs(5), broker.shutdown())
        .await
        .expect("shutdown returns without waiting for the handshake timeout");
    client.expect_eof().await;
}

#[tokio::test]
async fn dropping_the_handle_does_not_stop_the_broker() {
    let broker = broker().await;
    let addr = broker.local_addr();
    let mut before = RawClient::open(addr).await;
    drop(broker);
    // The documented contract: only `shutdown` stops the broker.
    before.open_channel(1).await;
    let mut after = RawClient::open(addr).await;
    after.open_channel(1).await;
    after.close().await;
    before.close().await;
}

/// Delayed messages must still be released after the handle is dropped (system clock).
#[tokio::test]
async fn dropping_the_handle_does_not_stop_delayed_releases() {
    use dwellmq::codec::methods::{BasicPublish, ExchangeDeclare, QueueBind};
    use dwellmq::codec::{encode_body, encode_header, BasicProperties, ContentHeader, FieldTable};

    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    let mut arguments = FieldTable::new();
    arguments.insert("x-delayed-type", "direct");
    client
        .send_method(
            1,
            &Method::ExchangeDeclare(ExchangeDeclare {
                exchange: "later".into(),
                kind: "x-delayed-message".into(),
                arguments,
                ..Default::default()
            }),
        )
        .await;
    assert_eq!(client.recv_method_on(1).await, Method::ExchangeDeclareOk);
    declare_count(&mut client, 1, "due", false).await;
    client
        .send_method(
            1,
            &Method::QueueBind(QueueBind {
                queue: "due".into(),
                exchange: "later".into(),
                routing_key: "k".into(),
                ..Default::default()
            }),
        )
        .await;
    assert_eq!(client.recv_method_on(1).await, Method::QueueBindOk);
    client
        .send_method(
            1,
            &Method::BasicConsume(BasicConsume {
                queue: "due".into(),
                consumer_tag: "c".into(),
                no_ack: true,
                ..Default::default()
            }),
        )
        .await;
    assert!(matches!(
        client.recv_method_on(1).await,
        Method::BasicConsumeOk(_)
    ));

    let mut headers = FieldTable::new();
    headers.insert("x-delay", FieldValue::I32(200));
    let mut out = BytesMut::new();
    encode_method(
        &mut out,
        1,
        &Method::BasicPublish(BasicPublish {
            exchange: "later".into(),
            routing_key: "k".into(),
            mandatory: false,
            immediate: false,
        }),
    );
    encode_header(
        &mut out,
        1,
        &ContentHeader {
            class_id: 60,
            body_size: 2,
            properties: BasicProperties {
                headers: Some(headers),
                ..Default::default()
            },
        },
    );
    encode_body(&mut out, 1, b"hi");
    client.send_raw(&out).await;
    declare_count(&mut client, 1, "due", true).await; // the publish has been handled
    drop(broker);

    assert!(matches!(
        client.recv_method_on(1).await,
        Method::BasicDeliver(_)
    ));
}

// ---------------------------------------------------------------------------------------------
// 8. Memory watermark
// ---------------------------------------------------------------------------------------------

/// What the broker counts per message beyond its body.
const OVERHEAD: i64 = dwellmq::MESSAGE_MEMORY_OVERHEAD as i64;

/// Fills queue "held" past a 1 KiB watermark from `publisher` and waits for
/// `connection.blocked`.
async fn publish_until_blocked(publisher: &mut RawClient) {
    publisher.open_channel(1).await;
    assert_eq!(declare_count(publisher, 1, "held", false).await, 0);
    publisher.publish(1, "", "held", &[b'x'; 600]).await;
    publisher.publish(1, "", "held", &[b'y'; 600]).await;
    assert_eq!(
        publisher.recv_method0().await,
        Method::ConnectionBlocked(dwellmq::codec::methods::ConnectionBlocked {
            reason: "low on memory".into()
        })
    );
}

/// Purges "held" from another (non-publishing) connection.
async fn purge_held(addr: SocketAddr) {
    let mut operator = RawClient::open(addr).await;
    operator.open_channel(1).await;
    operator
        .send_method(
            1,
            &Method::QueuePurge(QueuePurge {
                queue: "held".into(),
                no_wait: false,
            }),
        )
        .await;
    match operator.recv_method_on(1).await {
        Method::QueuePurgeOk(ok) => assert_eq!(ok.message_count, 2),
        other => panic!("expected queue.purge-ok, got {other:?}"),
    }
    operator.close().await;
}

#[tokio::test]
async fn the_memory_watermark_blocks_a_publisher_until_memory_is_freed() {
    let broker = broker_with(Limits {
        memory_high_watermark: MemoryWatermark::Absolute(1024),
        ..Limits::default()
    })
    .await;
    let mut publisher = RawClient::open(broker.local_addr()).await;
    publish_until_blocked(&mut publisher).await;
    assert_eq!(broker.memory_used(), 1200 + 2 * OVERHEAD);

    // Sent while blocked: the server does not read it until it unblocks.
    publisher.publish(1, "", "held", b"later").await;
    publisher.send_method(1, &declare("held", true)).await;

    purge_held(broker.local_addr()).await;
    assert_eq!(publisher.recv_method0().await, Method::ConnectionUnblocked);
    // The publish sent while blocked was handled after the purge: it is the only message.
    match publisher.recv_method_on(1).await {
        Method::QueueDeclareOk(ok) => assert_eq!(ok.message_count, 1),
        other => panic!("expected queue.declare-ok, got {other:?}"),
    }
    assert_eq!(broker.memory_used(), 5 + OVERHEAD);
    publisher.close().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn a_blocked_connection_is_not_dropped_for_unread_heartbeats() {
    let broker = broker_with(Limits {
        memory_high_watermark: MemoryWatermark::Absolute(1024),
        ..Limits::default()
    })
    .await;
    let mut publisher = RawClient::open_with(
        broker.local_addr(),
        Tune {
            heartbeat: Some(1),
            ..Tune::default()
        },
    )
    .await;
    publish_until_blocked(&mut publisher).await;
    // The client keeps sending heartbeats; the blocked server does not read them. Four
    // seconds is twice the missed-heartbeat window.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        publisher.send_heartbeat().await;
    }
    purge_held(broker.local_addr()).await;
    assert_eq!(publisher.recv_method0().await, Method::ConnectionUnblocked);
    assert_eq!(declare_count(&mut publisher, 1, "held", true).await, 0);
    publisher.close().await;
    broker.shutdown().await;
}

/// Messages cost memory beyond their bodies: empty ones alone reach the watermark, and the
/// publisher learns why it is blocked.
#[tokio::test]
async fn empty_messages_count_toward_the_watermark_and_the_block_says_why() {
    let watermark = 10 * dwellmq::MESSAGE_MEMORY_OVERHEAD as u64;
    let broker = broker_with(Limits {
        memory_high_watermark: MemoryWatermark::Absolute(watermark),
        ..Limits::default()
    })
    .await;
    assert_eq!(broker.memory_high_watermark(), watermark);
    let mut publisher = RawClient::open(broker.local_addr()).await;
    publisher.open_channel(1).await;
    assert_eq!(declare_count(&mut publisher, 1, "held", false).await, 0);
    // Ten fill it exactly (not over); the declare's reply proves none blocked the connection.
    for _ in 0..10 {
        publisher.publish(1, "", "held", b"").await;
    }
    assert_eq!(declare_count(&mut publisher, 1, "held", true).await, 10);
    assert_eq!(broker.memory_used(), 10 * OVERHEAD);
    // The eleventh crosses it.
    publisher.publish(1, "", "held", b"").await;
    assert_eq!(
        publisher.recv_method0().await,
        Method::ConnectionBlocked(dwellmq::codec::methods::ConnectionBlocked {
            reason: "low on memory".into()
        })
    );
    assert_eq!(broker.memory_used(), 11 * OVERHEAD);

    // Consuming one brings usage back to the watermark: the publisher is unblocked.
    let mut consumer = RawClient::open(broker.local_addr()).await;
    consumer.open_channel(1).await;
    consumer
        .send_method(
            1,
            &Method::BasicGet(dwellmq::codec::methods::BasicGet {
                queue: "held".into(),
                no_ack: true,
            }),
        )
        .await;
    assert!(matches!(
        consumer.recv_method_on(1).await,
        Method::BasicGetOk(_)
    ));
    assert_eq!(publisher.recv_method0().await, Method::ConnectionUnblocked);
    assert_eq!(declare_count(&mut publisher, 1, "held", true).await, 10);
    publisher.close().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn a_relative_watermark_of_zero_blocks_every_publisher_and_a_negative_one_is_refused() {
    let broker = broker_with(Limits {
        memory_high_watermark: MemoryWatermark::Relative(0.0),
        ..Limits::default()
    })
    .await;
    assert_eq!(broker.memory_high_watermark(), 0);
    let mut publisher = RawClient::open(broker.local_addr()).await;
    publisher.open_channel(1).await;
    publisher.publish(1, "", "nowhere", b"").await;
    assert!(matches!(
        publisher.recv_method0().await,
        Method::ConnectionBlocked(_)
    ));
    broker.shutdown().await;

    let refused = Broker::start(BrokerConfig {
        limits: Limits {
            memory_high_watermark: MemoryWatermark::Relative(-0.5),
            ..Limits::default()
        },
        ..BrokerConfig::ephemeral()
    })
    .await;
    assert_eq!(
        refused.err().map(|e| e.to_string()),
        Some("a relative memory watermark must be a fraction of 0 or more, not -0.5".into())
    );
}

// ---------------------------------------------------------------------------------------------
// 9. Connection limit
// ---------------------------------------------------------------------------------------------

/// Over the limit, the socket is accepted and closed at once: the client reads EOF without a
/// single octet (no protocol header, no connection.close). RabbitMQ instead completes the
/// handshake and refuses `connection.open` with 530 "connection refused: node connection
/// limit (N) is reached".
#[tokio::test]
async fn connections_beyond_max_connections_are_closed_unserved() {
    let broker = broker_with(Limits {
        max_connections: 2,
        ..Limits::default()
    })
    .await;
    let mut first = RawClient::open(broker.local_addr()).await;
    let mut second = RawClient::open(broker.local_addr()).await;
    assert_eq!(broker.connection_count(), 2);

    let mut third = RawClient::connect(broker.local_addr()).await;
    assert_eq!(
        third.read_raw(8).await,
        Vec::<u8>::new(),
        "EOF, nothing sent"
    );
    assert_eq!(broker.connection_count(), 2);

    // The first two are unaffected.
    second.open_channel(1).await;
    first.close().await;
    eventually("a slot frees up", || broker.connection_count() == 1).await;
    let mut fourth = RawClient::open(broker.local_addr()).await;
    fourth.open_channel(1).await;
    fourth.close().await;
    second.close().await;
    broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 10. Client-chosen limits
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_smaller_client_channel_max_wins() {
    let broker = broker().await;
    let mut client = RawClient::open_with(
        broker.local_addr(),
        Tune {
            channel_max: Some(2),
            ..Tune::default()
        },
    )
    .await;
    assert_eq!(client.server_tune.channel_max, 2047);
    client.open_channel(1).await;
    client.open_channel(2).await;
    client.send_method(3, &Method::ChannelOpen).await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (
            530,
            "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_smaller_client_frame_max_wins_both_ways() {
    let broker = broker().await;
    let mut client = RawClient::open_with(
        broker.local_addr(),
        Tune {
            frame_max: Some(4096),
            ..Tune::default()
        },
    )
    .await;
    client.open_channel(1).await;
    declare_count(&mut client, 1, "small-frames", false).await;

    // Inbound: a body in frames of exactly 4096 octets (4088 of payload) is fine.
    let body: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let mut out = BytesMut::new();
    encode_method(
        &mut out,
        1,
        &Method::BasicPublish(dwellmq::codec::methods::BasicPublish {
            exchange: "".into(),
            routing_key: "small-frames".into(),
            mandatory: false,
            immediate: false,
        }),
    );
    client.send_raw(&out).await;
    client.send_content_header(1, body.len() as u64).await;
    for chunk in body.chunks(4088) {
        client.send_body(1, chunk).await;
    }
    assert_eq!(declare_count(&mut client, 1, "small-frames", true).await, 1);

    // Outbound: the delivery is split to the client's frame-max.
    client
        .send_method(
            1,
            &Method::BasicConsume(BasicConsume {
                queue: "small-frames".into(),
                consumer_tag: "c".into(),
                no_ack: true,
                ..Default::default()
            }),
        )
        .await;
    assert!(matches!(
        client.recv_method_on(1).await,
        Method::BasicConsumeOk(_)
    ));
    assert!(matches!(
        client.recv_method_on(1).await,
        Method::BasicDeliver(_)
    ));
    let header = client.recv_non_heartbeat().await;
    match header.payload {
        FramePayload::Header(h) => assert_eq!(h.body_size, 10_000),
        other => panic!("expected a content header, got {other:?}"),
    }
    let mut received = Vec::new();
    let mut frames = 0;
    while received.len() < body.len() {
        match client.recv_non_heartbeat().await.payload {
            FramePayload::Body(chunk) => {
                assert!(chunk.len() <= 4088, "body frame of {} octets", chunk.len());
                received.extend_from_slice(&chunk);
                frames += 1;
            }
            other => panic!("expected a body frame, got {other:?}"),
        }
    }
    assert_eq!(received, body);
    assert_eq!(frames, 3);

    // One octet more than the negotiated frame-max is a frame error.
    client.send_raw(&[3, 0, 1, 0, 0, 0x0f, 0xf9]).await; // payload 4089 -> frame 4097
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (501, "FRAME_ERROR - frame size 4097 exceeds frame-max 4096")
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_larger_client_frame_max_is_capped_by_the_server() {
    let broker = broker().await;
    let mut client = RawClient::open_with(
        broker.local_addr(),
        Tune {
            frame_max: Some(1 << 20),
            ..Tune::default()
        },
    )
    .await;
    client.open_channel(1).await;
    let payload = 131_072u32 - 8 + 1;
    let mut header = vec![3, 0, 1];
    header.extend_from_slice(&payload.to_be_bytes());
    client.send_raw(&header).await;
    let (code, text, _, _) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str()),
        (
            501,
            "FRAME_ERROR - frame size 131073 exceeds frame-max 131072"
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_frame_max_below_4096_is_refused_with_rabbitmqs_text() {
    let broker = broker().await;
    let (mut client, _) = RawClient::start(broker.local_addr()).await;
    client
        .send_method(0, &start_ok_plain("guest", "guest"))
        .await;
    assert!(matches!(
        client.recv_method0().await,
        Method::ConnectionTune(_)
    ));
    client
        .send_method(
            0,
            &Method::ConnectionTuneOk(ConnectionTuneOk {
                channel_max: 0,
                frame_max: 1024,
                heartbeat: 0,
            }),
        )
        .await;
    let (code, text, class_id, method_id) = client.expect_close_and_ack().await;
    assert_eq!(
        (code, text.as_str(), class_id, method_id),
        (
            530,
            "NOT_ALLOWED - negotiated frame_max = 1024 is lower than the minimum allowed value (4096)",
            10,
            30
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn zero_limits_mean_no_limit() {
    let broker = broker_with(Limits {
        frame_max: 0,
        channel_max: 0,
        ..Limits::default()
    })
    .await;
    // The client echoes the server's zeros: no channel or frame limit on either side.
    let mut client = RawClient::open(broker.local_addr()).await;
    assert_eq!(
        (client.server_tune.frame_max, client.server_tune.channel_max),
        (0, 0)
    );
    assert_eq!(
        (client.tune_ok.frame_max, client.tune_ok.channel_max),
        (0, 0)
    );
    client.open_channel(1).await;
    client.open_channel(65_535).await;
    declare_count(&mut client, 1, "big", false).await;
    // A single body frame well above the usual 128 KiB frame-max.
    client.publish(1, "", "big", &vec![7u8; 300_000]).await;
    assert_eq!(declare_count(&mut client, 1, "big", true).await, 1);
    client.close().await;
    broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// 12. Handshake timeout
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_client_that_never_finishes_the_handshake_is_dropped() {
    let broker = broker_with(Limits {
        handshake_timeout: Duration::from_millis(300),
        ..Limits::default()
    })
    .await;
    let (mut client, _start) = RawClient::start(broker.local_addr()).await;
    // The raw client's own guards are shorter than the timeout: read with a longer one.
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(
        Duration::from_secs(15),
        tokio::io::AsyncReadExt::read(&mut client.stream, &mut buf),
    )
    .await
    .expect("closed after the handshake timeout (hang guard)");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    broker.shutdown().await;
}

#[tokio::test]
async fn a_body_in_thousands_of_tiny_frames_is_delivered_intact() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    declare_count(&mut client, 1, "tiny-frames", false).await;
    // 1500 one-octet body frames: more than the broker keeps as separate slices.
    let body: Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8).collect();
    let mut out = BytesMut::new();
    encode_method(
        &mut out,
        1,
        &Method::BasicPublish(dwellmq::codec::methods::BasicPublish {
            exchange: "".into(),
            routing_key: "tiny-frames".into(),
            mandatory: false,
            immediate: false,
        }),
    );
    client.send_raw(&out).await;
    client.send_content_header(1, body.len() as u64).await;
    for octet in &body {
        client.send_body(1, std::slice::from_ref(octet)).await;
    }
    assert_eq!(declare_count(&mut client, 1, "tiny-frames", true).await, 1);
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
