//! A connection's life over raw frames: heartbeats, isolation from other connections, closing
//! and broker shutdown, the memory watermark (connection.blocked) and the connection limit.
//! RabbitMQ's behaviour is the reference; where dwellmq deliberately differs, the test says so.

use std::time::Duration;

use crate::common;
use crate::common::raw::{
    capabilities_without, publish_frames_with, publish_method, queue_declare, RawClient, Tune,
    AMQP_0_9_1, FRAME_METHOD,
};
use crate::common::{broker, broker_with, consume_no_ack, declare_queue, eventually, next_body};
use bytes::BytesMut;
use dwellmq::codec::methods::ConnectionClose;
use dwellmq::codec::methods::{BasicConsume, QueueDeclare, QueuePurge};
use dwellmq::codec::{encode_method, FieldValue, FramePayload, Method};
use dwellmq::{Broker, BrokerConfig, BrokerHandle, Limits, MemoryWatermark};
use lapin::options::BasicPublishOptions;
use lapin::BasicProperties;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

// ---------------------------------------------------------------------------------------------
// Heartbeats
// ---------------------------------------------------------------------------------------------

/// The heartbeat tests run in memory on tokio's paused clock: the seconds they span pass in
/// virtual time, at once and exactly.
const HEARTBEAT_1S: Tune = Tune {
    channel_max: None,
    frame_max: None,
    heartbeat: Some(1),
};

#[tokio::test(start_paused = true)]
async fn a_silent_client_gets_heartbeats_and_is_then_disconnected() {
    let broker = broker().await;
    let opened = Instant::now();
    let mut client = RawClient::open_in_memory(&broker, HEARTBEAT_1S).await;
    let seen = client.expect_eof().await;
    // RabbitMQ gives up after two heartbeat intervals of silence: not before, and (checking
    // every half interval) not much later.
    let after = opened.elapsed();
    assert!(
        after > Duration::from_secs(2) && after <= Duration::from_millis(2500),
        "disconnected after {after:?}"
    );
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

#[tokio::test(start_paused = true)]
async fn a_client_sending_heartbeats_stays_connected() {
    let broker = broker().await;
    let mut client = RawClient::open_in_memory(&broker, HEARTBEAT_1S).await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        client.send_heartbeat().await;
    }
    // Four seconds (two missed-heartbeat windows twice over) later the connection works.
    client.open_channel(1).await;
    client.close().await;
    broker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn exclusive_and_auto_delete_queues_go_when_heartbeats_time_out() {
    let broker = broker().await;
    let mut client = RawClient::open_in_memory(&broker, HEARTBEAT_1S).await;
    client.open_channel(1).await;
    for (queue, exclusive, auto_delete) in [("mine", true, false), ("temp", false, true)] {
        let declare = Method::QueueDeclare(QueueDeclare {
            queue: queue.into(),
            exclusive,
            auto_delete,
            ..Default::default()
        });
        assert!(matches!(
            client.call(1, &declare).await,
            Method::QueueDeclareOk(_)
        ));
    }
    client.declare_queue(1, "kept", false).await;
    client.consume(1, "temp", "c", false).await;
    assert_eq!(broker.queue_names("/"), ["kept", "mine", "temp"]);
    // Silence: the broker drops the connection after two heartbeat intervals.
    client.expect_eof().await;
    eventually("the exclusive and auto-delete queues are gone", || {
        broker.queue_names("/") == ["kept"]
    })
    .await;
    broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Isolation
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
// Closing and shutdown
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn client_connection_close_gets_close_ok_and_the_socket_closes() {
    let broker = broker().await;
    let mut client = RawClient::open(broker.local_addr()).await;
    client.open_channel(1).await;
    client.declare_queue(1, "excl-check", false).await;
    client.close().await; // asserts close-ok, then EOF
                          // The broker reads until the client closes its side too, as RabbitMQ does.
    drop(client);
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

#[tokio::test(start_paused = true)]
async fn shutdown_does_not_wait_for_a_client_stuck_in_the_handshake() {
    let broker = broker().await;
    let (mut client, _start) = RawClient::start_in_memory(&broker).await;
    // The client never answers connection.start. Shutdown must not wait for the 10 s
    // handshake timeout; in memory on the paused clock, it takes no (virtual) time at all.
    let asked = Instant::now();
    broker.shutdown().await;
    assert_eq!(asked.elapsed(), Duration::ZERO);
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
    use dwellmq::codec::methods::{ExchangeDeclare, QueueBind};
    use dwellmq::codec::{BasicProperties, FieldTable};

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
    client.declare_queue(1, "due", false).await;
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
    let properties = BasicProperties {
        headers: Some(headers),
        ..Default::default()
    };
    publish_frames_with(
        &mut out,
        1,
        &publish_method("later", "k", false),
        properties,
        b"hi",
    );
    // Taken before the publish leaves, so at or before the broker computes its due time.
    let published = std::time::Instant::now();
    client.send_raw(&out).await;
    client.declare_queue(1, "due", true).await; // the publish has been handled
    drop(broker);

    assert!(matches!(
        client.recv_method_on(1).await,
        Method::BasicDeliver(_)
    ));
    // Not early. The broker's clock counts whole milliseconds, so its due time can lie up to
    // 1 ms before `published` + 200 ms.
    assert!(
        published.elapsed() >= Duration::from_millis(199),
        "released after {:?}, before its 200 ms delay",
        published.elapsed()
    );
}

// ---------------------------------------------------------------------------------------------
// Memory watermark
// ---------------------------------------------------------------------------------------------

/// Fills queue "held" past a 1 KiB watermark from `publisher` and waits for
/// `connection.blocked`.
async fn publish_until_blocked<S: AsyncRead + AsyncWrite + Unpin>(publisher: &mut RawClient<S>) {
    publisher.open_channel(1).await;
    assert_eq!(
        publisher
            .declare_queue(1, "held", false)
            .await
            .message_count,
        0
    );
    publisher.publish(1, "", "held", &[b'x'; 600]).await;
    publisher.publish(1, "", "held", &[b'y'; 600]).await;
    assert_eq!(
        publisher.recv_method0().await,
        Method::ConnectionBlocked(dwellmq::codec::methods::ConnectionBlocked {
            reason: "low on memory".into()
        })
    );
}

/// Purges "held" from another (non-publishing) connection, in memory.
async fn purge_held(broker: &BrokerHandle) {
    let mut operator = RawClient::open_in_memory(broker, Tune::default()).await;
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

/// What the broker counts for a message waiting in "held" (packed, body included).
fn held(body_len: usize) -> i64 {
    dwellmq::queued_message_footprint("", "held", &Default::default(), body_len) as i64
}

/// Output waiting for a client is counted too: room for a small reply, under what one waiting
/// empty message is counted.
const REPLY_ROOM: u64 = 48;

// The memory tests run in memory on the paused clock too, for the heartbeat one's sake.

#[tokio::test(start_paused = true)]
async fn the_memory_watermark_blocks_a_publisher_until_memory_is_freed() {
    let broker = broker_with(Limits {
        memory_high_watermark: MemoryWatermark::Absolute(1024),
        ..Limits::default()
    })
    .await;
    let mut publisher = RawClient::open_in_memory(&broker, Tune::default()).await;
    publish_until_blocked(&mut publisher).await;
    broker.settle().await.unwrap();
    assert_eq!(broker.memory_used(), held(600) * 2);

    // Sent while blocked: the server does not read it until it unblocks.
    publisher.publish(1, "", "held", b"later").await;
    publisher.send_method(1, &queue_declare("held", true)).await;

    purge_held(&broker).await;
    assert_eq!(publisher.recv_method0().await, Method::ConnectionUnblocked);
    // The publish sent while blocked was handled after the purge: it is the only message.
    match publisher.recv_method_on(1).await {
        Method::QueueDeclareOk(ok) => assert_eq!(ok.message_count, 1),
        other => panic!("expected queue.declare-ok, got {other:?}"),
    }
    broker.settle().await.unwrap();
    assert_eq!(broker.memory_used(), held(5));
    publisher.close().await;
    broker.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_client_without_the_connection_blocked_capability_is_blocked_without_notice() {
    let broker = broker_with(Limits {
        memory_high_watermark: MemoryWatermark::Absolute(1024),
        ..Limits::default()
    })
    .await;
    let mut publisher = RawClient::over(broker.connect_in_memory())
        .handshake(
            Tune::default(),
            &capabilities_without(&["connection.blocked"]),
        )
        .await;
    publisher.open_channel(1).await;
    assert_eq!(
        publisher
            .declare_queue(1, "held", false)
            .await
            .message_count,
        0
    );
    publisher.publish(1, "", "held", &[b'x'; 600]).await;
    publisher.publish(1, "", "held", &[b'y'; 600]).await;
    // Handled, and over the watermark: the server stops reading right after this reply.
    assert_eq!(
        publisher.declare_queue(1, "held", true).await.message_count,
        2
    );
    broker.settle().await.unwrap();
    assert_eq!(broker.memory_used(), held(600) * 2);

    // Sent while blocked: not read until memory is freed (the purge finds two messages).
    publisher.publish(1, "", "held", b"later").await;
    publisher.send_method(1, &queue_declare("held", true)).await;
    purge_held(&broker).await;
    // Neither connection.blocked nor connection.unblocked came first (RabbitMQ sends them only
    // to clients that announce the capability): the next frame is the declare's reply.
    match publisher.recv_method_on(1).await {
        Method::QueueDeclareOk(ok) => assert_eq!(ok.message_count, 1),
        other => panic!("expected queue.declare-ok, got {other:?}"),
    }
    publisher.close().await;
    broker.shutdown().await;
}

/// Messages cost memory beyond their bodies: empty ones alone reach the watermark, and the
/// publisher learns why it is blocked.
#[tokio::test]
async fn empty_messages_count_toward_the_watermark_and_the_block_says_why() {
    // Ten messages, plus room for the reply buffered on its way out (it counts too).
    assert!(REPLY_ROOM < held(0) as u64);
    let watermark = 10 * held(0) as u64 + REPLY_ROOM;
    let broker = broker_with(Limits {
        memory_high_watermark: MemoryWatermark::Absolute(watermark),
        ..Limits::default()
    })
    .await;
    assert_eq!(broker.memory_high_watermark(), watermark);
    let mut publisher = RawClient::open(broker.local_addr()).await;
    publisher.open_channel(1).await;
    assert_eq!(
        publisher
            .declare_queue(1, "held", false)
            .await
            .message_count,
        0
    );
    // Ten fill it (not over); the declare's reply proves none blocked the connection.
    for _ in 0..10 {
        publisher.publish(1, "", "held", b"").await;
    }
    assert_eq!(
        publisher.declare_queue(1, "held", true).await.message_count,
        10
    );
    broker.settle().await.unwrap();
    assert_eq!(broker.memory_used(), 10 * held(0));
    // The eleventh crosses it.
    publisher.publish(1, "", "held", b"").await;
    assert_eq!(
        publisher.recv_method0().await,
        Method::ConnectionBlocked(dwellmq::codec::methods::ConnectionBlocked {
            reason: "low on memory".into()
        })
    );
    broker.settle().await.unwrap();
    assert_eq!(broker.memory_used(), 11 * held(0));

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
    assert_eq!(
        publisher.declare_queue(1, "held", true).await.message_count,
        10
    );
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

#[tokio::test(start_paused = true)]
async fn a_blocked_connection_is_not_dropped_for_unread_heartbeats() {
    let broker = broker_with(Limits {
        memory_high_watermark: MemoryWatermark::Absolute(1024),
        ..Limits::default()
    })
    .await;
    let mut publisher = RawClient::open_in_memory(&broker, HEARTBEAT_1S).await;
    publish_until_blocked(&mut publisher).await;
    // The client keeps sending heartbeats; the blocked server does not read them. Four
    // seconds is twice the missed-heartbeat window.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        publisher.send_heartbeat().await;
    }
    purge_held(&broker).await;
    assert_eq!(publisher.recv_method0().await, Method::ConnectionUnblocked);
    assert_eq!(
        publisher.declare_queue(1, "held", true).await.message_count,
        0
    );
    publisher.close().await;
    broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Connection limit
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
