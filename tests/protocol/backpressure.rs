//! A connection's own output bounds it: a client that pipelines requests and never reads gets
//! a bounded buffer (replies, `basic.return`s and deliveries alike), charged to the memory
//! monitor, while the broker goes on serving everyone else; once it reads, everything arrives.
//! Also: frames pipelined behind `connection.open` in the same write are served.

use bytes::BytesMut;
use dwellmq::codec::methods::{BasicConsume, ConnectionOpen, ConnectionTuneOk, QueueDeclare};
use dwellmq::codec::{decode_frame, encode_method, FramePayload, Method};
use dwellmq::BrokerHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use tokio::task::JoinHandle;

use crate::common::raw::{
    publish_frames, queue_declare, start_ok_plain, RawClient, Tune, AMQP_0_9_1,
};
use crate::common::{broker, connect, declare_queue, eventually};

/// The bound above which a connection stops reading (src/server/outbound.rs).
const READ_PAUSE_BYTES: usize = 8 << 20;
/// The bound above which queues stop delivering to a connection.
const CONGESTED_BYTES: usize = 4 << 20;

/// An open in-memory connection with channel 1 open, split in halves.
async fn open_channel(broker: &BrokerHandle) -> (ReadHalf<DuplexStream>, WriteHalf<DuplexStream>) {
    let mut client = RawClient::open_in_memory(broker, Tune::default()).await;
    client.send_method(1, &Method::ChannelOpen).await;
    assert_eq!(client.recv_method().await, (1, Method::ChannelOpenOk));
    tokio::io::split(client.stream)
}

/// Writes `bytes` from a task of its own: it blocks for as long as the broker does not read.
fn write_in_background(mut writer: WriteHalf<DuplexStream>, bytes: BytesMut) -> JoinHandle<()> {
    tokio::spawn(async move {
        writer
            .write_all(&bytes)
            .await
            .expect("the broker reads it all in the end");
        // The write half stays open: dropping it would end the connection.
        std::future::pending::<()>().await;
    })
}

/// Waits until the broker stopped reading the client (its output is over the bound), then
/// checks that it stays bounded, both as buffered output and as charged memory.
async fn assert_bounded_while_unread(broker: &BrokerHandle, bound: usize) {
    eventually(
        "the broker's output to the client reaches its bound",
        || broker.buffered_output() > bound / 2,
    )
    .await;
    for _ in 0..50 {
        let buffered = broker.buffered_output();
        assert!(
            buffered <= bound + 64 * 1024,
            "{buffered} octets buffered for a client that reads nothing (bound {bound})"
        );
        assert!(
            broker.memory_used() >= buffered as i64,
            "buffered output is charged to the memory monitor"
        );
        tokio::task::yield_now().await;
    }
}

/// Another client is served normally meanwhile.
async fn others_are_served(broker: &BrokerHandle) {
    let connection = connect(broker).await;
    let channel = connection.create_channel().await.unwrap();
    declare_queue(&channel, "someone-else").await;
    channel
        .queue_delete("someone-else".into(), Default::default())
        .await
        .unwrap();
    connection.close(200, "bye".into()).await.unwrap();
}

/// Reads frames until `count` methods matching `wanted` arrived; returns how many frames of
/// other kinds came along (content frames).
async fn read_until(
    reader: &mut ReadHalf<DuplexStream>,
    count: usize,
    wanted: impl Fn(&Method) -> bool,
) {
    let mut buf = BytesMut::with_capacity(1 << 20);
    let mut seen = 0;
    while seen < count {
        match decode_frame(&mut buf, u32::MAX).expect("valid frames") {
            Some(frame) => {
                if let FramePayload::Method(method) = frame.payload {
                    assert!(wanted(&method), "unexpected {method:?}");
                    seen += 1;
                }
            }
            None => {
                let read = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    reader.read_buf(&mut buf),
                )
                .await
                .expect("the broker keeps sending")
                .expect("read");
                assert!(read > 0, "EOF after {seen} of {count}");
            }
        }
    }
}

#[tokio::test]
async fn pipelined_passive_declares_to_a_client_that_never_reads_stay_bounded() {
    let broker = broker().await;
    let name = "q".repeat(255);
    {
        let connection = connect(&broker).await;
        declare_queue(&connection.create_channel().await.unwrap(), &name).await;
    }
    let (mut reader, writer) = open_channel(&broker).await;
    // 120,000 declares of ~290 octets each: ~35 MB of replies if nothing held them back.
    let count = 120_000;
    let mut requests = BytesMut::new();
    for _ in 0..count {
        encode_method(&mut requests, 1, &queue_declare(&name, true));
    }
    let writing = write_in_background(writer, requests);

    assert_bounded_while_unread(&broker, READ_PAUSE_BYTES).await;
    others_are_served(&broker).await;
    assert_bounded_while_unread(&broker, READ_PAUSE_BYTES).await;

    read_until(
        &mut reader,
        count,
        |m| matches!(m, Method::QueueDeclareOk(ok) if ok.queue.as_str() == name),
    )
    .await;
    writing.abort();
}

#[tokio::test]
async fn mandatory_unroutable_publishes_to_a_client_that_never_reads_stay_bounded() {
    let broker = broker().await;
    let (mut reader, writer) = open_channel(&broker).await;
    // 12,000 returns of 4 KiB bodies: ~50 MB if nothing held them back.
    let count = 12_000;
    let body = vec![b'x'; 4096];
    let mut requests = BytesMut::new();
    for _ in 0..count {
        publish_frames(&mut requests, 1, "", "nowhere", true, &body);
    }
    let writing = write_in_background(writer, requests);

    assert_bounded_while_unread(&broker, READ_PAUSE_BYTES).await;
    others_are_served(&broker).await;

    read_until(
        &mut reader,
        count,
        |m| matches!(m, Method::BasicReturn(r) if r.reply_code == 312),
    )
    .await;
    writing.abort();
}

#[tokio::test]
async fn deliveries_to_a_consumer_that_never_reads_stop_at_the_congestion_bound() {
    let broker = broker().await;
    let count = 5_000;
    {
        let connection = connect(&broker).await;
        let channel = connection.create_channel().await.unwrap();
        declare_queue(&channel, "backlog").await;
        let body = vec![b'x'; 4096];
        for _ in 0..count {
            channel
                .basic_publish(
                    "".into(),
                    "backlog".into(),
                    Default::default(),
                    &body,
                    Default::default(),
                )
                .await
                .unwrap();
        }
        crate::common::sync(&channel).await;
    }
    assert_eq!(broker.queue_info("/", "backlog").unwrap().messages, count);

    let (mut reader, mut writer) = open_channel(&broker).await;
    let mut consume = BytesMut::new();
    encode_method(
        &mut consume,
        1,
        &Method::BasicConsume(BasicConsume {
            queue: "backlog".into(),
            consumer_tag: "never-reads".into(),
            no_ack: true,
            ..Default::default()
        }),
    );
    writer.write_all(&consume).await.unwrap();

    // The whole backlog (~20 MB) would go at once if the queue did not stop at the bound.
    assert_bounded_while_unread(&broker, CONGESTED_BYTES).await;
    let ready = broker.queue_info("/", "backlog").unwrap().messages;
    assert!(
        ready > count / 2,
        "only {} of {count} left the queue",
        count - ready
    );
    others_are_served(&broker).await;

    read_until(&mut reader, count + 1, |m| {
        matches!(m, Method::BasicConsumeOk(_) | Method::BasicDeliver(_))
    })
    .await;
    assert_eq!(broker.queue_info("/", "backlog").unwrap().messages, 0);
}

#[tokio::test]
async fn frames_pipelined_with_connection_open_are_served() {
    let broker = broker().await;
    let (mut client, _start) = RawClient::over(broker.connect_in_memory())
        .start_handshake(AMQP_0_9_1)
        .await;
    // Everything up to a queue declaration in one write, without waiting for any reply.
    let mut out = BytesMut::new();
    encode_method(&mut out, 0, &start_ok_plain("guest", "guest"));
    encode_method(
        &mut out,
        0,
        &Method::ConnectionTuneOk(ConnectionTuneOk {
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat: 0,
        }),
    );
    encode_method(
        &mut out,
        0,
        &Method::ConnectionOpen(ConnectionOpen {
            virtual_host: "/".into(),
        }),
    );
    encode_method(&mut out, 1, &Method::ChannelOpen);
    encode_method(
        &mut out,
        1,
        &Method::QueueDeclare(QueueDeclare {
            queue: "pipelined".into(),
            ..Default::default()
        }),
    );
    client.send_raw(&out).await;
    assert!(matches!(
        client.recv_method0().await,
        Method::ConnectionTune(_)
    ));
    assert_eq!(client.recv_method0().await, Method::ConnectionOpenOk);
    assert_eq!(client.recv_method().await, (1, Method::ChannelOpenOk));
    match client.recv_method().await {
        (1, Method::QueueDeclareOk(ok)) => assert_eq!(ok.queue.as_str(), "pipelined"),
        other => panic!("expected queue.declare-ok, got {other:?}"),
    }
}

#[tokio::test]
async fn buffered_output_is_released_when_a_never_reading_client_goes_away() {
    let broker = broker().await;
    let name = "q".repeat(255);
    {
        let connection = connect(&broker).await;
        declare_queue(&connection.create_channel().await.unwrap(), &name).await;
    }
    let baseline = broker.memory_used();
    let (reader, writer) = open_channel(&broker).await;
    let mut requests = BytesMut::new();
    for _ in 0..60_000 {
        encode_method(&mut requests, 1, &queue_declare(&name, true));
    }
    let writing = write_in_background(writer, requests);
    assert_bounded_while_unread(&broker, READ_PAUSE_BYTES).await;
    writing.abort();
    drop(reader);
    eventually("the connection is gone and its output released", || {
        broker.buffered_output() == 0 && broker.memory_used() == baseline
    })
    .await;
}

/// Paused on its output, a connection cannot see the client's heartbeats (they wait unread
/// behind its requests): a client that reads nothing for two heartbeat intervals is dropped
/// then, and what was buffered for it is released.
#[tokio::test(start_paused = true)]
async fn a_paused_client_that_reads_nothing_is_dropped_after_two_heartbeat_intervals() {
    let broker = broker().await;
    let name = "q".repeat(255);
    {
        let mut setup = RawClient::open_in_memory(&broker, Tune::default()).await;
        setup.send_method(1, &Method::ChannelOpen).await;
        setup.recv_method().await;
        setup.send_method(1, &queue_declare(&name, false)).await;
        setup.recv_method().await;
    }
    let heartbeat = Tune {
        heartbeat: Some(1),
        ..Tune::default()
    };
    let mut client = RawClient::open_in_memory(&broker, heartbeat).await;
    client.send_method(1, &Method::ChannelOpen).await;
    assert_eq!(client.recv_method().await, (1, Method::ChannelOpenOk));
    let (_reader, writer) = tokio::io::split(client.stream);
    let mut requests = BytesMut::new();
    for _ in 0..60_000 {
        encode_method(&mut requests, 1, &queue_declare(&name, true));
    }
    let writing = write_in_background(writer, requests);
    eventually("the broker stops reading the client", || {
        broker.buffered_output() > READ_PAUSE_BYTES / 2
    })
    .await;
    // Two intervals without progress, then up to 3 s for the writer to give up on it: in
    // virtual time.
    let started = tokio::time::Instant::now();
    while broker.buffered_output() > 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the silent client is dropped and its output released"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(started.elapsed() >= std::time::Duration::from_secs(2));
    writing.abort();
}
