//! A tiny raw AMQP 0-9-1 client: frames straight over a `TcpStream` (or an in-memory stream
//! from `BrokerHandle::connect_in_memory`), for the protocol edges a library client never
//! produces (bad frames, odd channel ids, silence instead of heartbeats).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use dwellmq::codec::methods::{
    BasicConsume, BasicDeliver, BasicPublish, ChannelClose, ConnectionClose, ConnectionOpen,
    ConnectionStart, ConnectionStartOk, ConnectionTune, ConnectionTuneOk, QueueDeclare,
    QueueDeclareOk,
};
use dwellmq::codec::{
    decode_frame, encode_body, encode_frame, encode_header, encode_heartbeat, encode_method,
    BasicProperties, ContentHeader, FieldTable, FieldValue, Frame, FramePayload, Method,
};
use dwellmq::BrokerHandle;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::TcpStream;

/// The 0-9-1 protocol header.
pub const AMQP_0_9_1: &[u8; 8] = b"AMQP\x00\x00\x09\x01";

/// The frame type octet of a method frame.
pub const FRAME_METHOD: u8 = 1;

/// One frame with an arbitrary type and end octet (for malformed frames).
pub fn raw_frame(kind: u8, channel: u16, payload: &[u8], end: u8) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(end);
    out
}

/// How long any single expected frame may take: a hang guard, not a timing assertion.
pub const FRAME_WAIT: Duration = Duration::from_secs(5);
/// How long the server may take to close a socket it should close.
pub const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// What the client answers in `connection.tune-ok`; `None` echoes the server's offer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tune {
    pub channel_max: Option<u16>,
    pub frame_max: Option<u32>,
    /// Defaults to 0 (no heartbeats) so that tests are not disturbed by them.
    pub heartbeat: Option<u16>,
}

/// A raw connection: the byte stream (a TCP socket unless given another) plus a read buffer.
pub struct RawClient<S = TcpStream> {
    pub stream: S,
    buf: BytesMut,
    /// What the server offered in `connection.tune` (after [`RawClient::open`]).
    pub server_tune: ConnectionTune,
    /// What this client answered in `connection.tune-ok`.
    pub tune_ok: ConnectionTuneOk,
}

/// The capabilities RabbitMQ clients announce (all of them, switched on).
pub const CAPABILITIES: [(&str, bool); 7] = [
    ("publisher_confirms", true),
    ("exchange_exchange_bindings", true),
    ("basic.nack", true),
    ("consumer_cancel_notify", true),
    ("connection.blocked", true),
    ("authentication_failure_close", true),
    ("per_consumer_qos", true),
];

/// `client-properties` with the capabilities RabbitMQ clients announce.
pub fn client_properties() -> FieldTable {
    client_properties_with(&CAPABILITIES)
}

/// [`CAPABILITIES`] with the ones named in `off` announced as `false`.
pub fn capabilities_without(off: &[&str]) -> Vec<(&'static str, bool)> {
    CAPABILITIES
        .iter()
        .map(|&(name, on)| (name, on && !off.contains(&name)))
        .collect()
}

/// `client-properties` announcing exactly `capabilities`.
pub fn client_properties_with(capabilities: &[(&str, bool)]) -> FieldTable {
    let capabilities: FieldTable = capabilities.iter().copied().collect();
    let mut properties = FieldTable::new();
    properties.insert("product", "dwellmq raw test client");
    properties.insert("capabilities", FieldValue::Table(capabilities));
    properties
}

/// `start-ok` for PLAIN.
pub fn start_ok_plain(user: &str, password: &str) -> Method {
    start_ok_plain_announcing(user, password, &CAPABILITIES)
}

/// `start-ok` for PLAIN, announcing `capabilities`.
pub fn start_ok_plain_announcing(
    user: &str,
    password: &str,
    capabilities: &[(&str, bool)],
) -> Method {
    Method::ConnectionStartOk(ConnectionStartOk {
        client_properties: client_properties_with(capabilities),
        mechanism: "PLAIN".into(),
        response: Bytes::from(format!("\0{user}\0{password}")),
        locale: "en_US".into(),
    })
}

/// `start-ok` for AMQPLAIN (a field table without its length prefix).
pub fn start_ok_amqplain(user: &str, password: &str) -> Method {
    let mut response = Vec::new();
    for (key, value) in [("LOGIN", user), ("PASSWORD", password)] {
        response.push(key.len() as u8);
        response.extend_from_slice(key.as_bytes());
        response.push(b'S');
        response.extend_from_slice(&(value.len() as u32).to_be_bytes());
        response.extend_from_slice(value.as_bytes());
    }
    Method::ConnectionStartOk(ConnectionStartOk {
        client_properties: client_properties(),
        mechanism: "AMQPLAIN".into(),
        response: Bytes::from(response),
        locale: "en_US".into(),
    })
}

/// `basic.publish` alone (the content frames are up to the caller).
pub fn publish_method(exchange: &str, routing_key: &str, mandatory: bool) -> Method {
    Method::BasicPublish(BasicPublish {
        exchange: exchange.into(),
        routing_key: routing_key.into(),
        mandatory,
        immediate: false,
    })
}

/// `queue.declare` of `queue`, passive or not, other flags off.
pub fn queue_declare(queue: &str, passive: bool) -> Method {
    Method::QueueDeclare(QueueDeclare {
        queue: queue.into(),
        passive,
        ..Default::default()
    })
}

/// Appends `basic.publish` + a default content header + one body frame (none for an empty
/// body) to `out`: a publish to send in one write, alone or pipelined with others.
pub fn publish_frames(
    out: &mut BytesMut,
    channel: u16,
    exchange: &str,
    routing_key: &str,
    mandatory: bool,
    body: &[u8],
) {
    let method = publish_method(exchange, routing_key, mandatory);
    publish_frames_with(out, channel, &method, BasicProperties::default(), body);
}

/// Appends the publish `method` + a content header with `properties` + one body frame (none
/// for an empty body) to `out`.
pub fn publish_frames_with(
    out: &mut BytesMut,
    channel: u16,
    method: &Method,
    properties: BasicProperties,
    body: &[u8],
) {
    encode_method(out, channel, method);
    encode_header(
        out,
        channel,
        &ContentHeader {
            class_id: 60,
            body_size: body.len() as u64,
            properties,
        },
    );
    if !body.is_empty() {
        encode_body(out, channel, body);
    }
}

impl RawClient<TcpStream> {
    /// Opens the TCP connection only.
    pub async fn connect(addr: SocketAddr) -> RawClient {
        let stream = tokio::time::timeout(FRAME_WAIT, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("TCP connect");
        stream.set_nodelay(true).unwrap();
        RawClient::over(stream)
    }

    /// Sends the protocol header and returns the server's `connection.start`.
    pub async fn start(addr: SocketAddr) -> (RawClient, ConnectionStart) {
        RawClient::start_with_header(addr, AMQP_0_9_1).await
    }

    /// Sends `header` and returns the server's `connection.start`.
    pub async fn start_with_header(
        addr: SocketAddr,
        header: &[u8],
    ) -> (RawClient, ConnectionStart) {
        RawClient::connect(addr).await.start_handshake(header).await
    }

    /// The whole handshake as guest/guest (PLAIN), echoing the server's limits, heartbeat 0.
    pub async fn open(addr: SocketAddr) -> RawClient {
        RawClient::open_with(addr, Tune::default()).await
    }

    /// The whole handshake as guest/guest (PLAIN) with the given tune-ok values.
    pub async fn open_with(addr: SocketAddr, tune: Tune) -> RawClient {
        RawClient::connect(addr)
            .await
            .handshake(tune, &CAPABILITIES)
            .await
    }

    /// The whole handshake as guest/guest (PLAIN), heartbeat 0, announcing `capabilities`
    /// (see [`capabilities_without`]).
    pub async fn open_announcing(addr: SocketAddr, capabilities: &[(&str, bool)]) -> RawClient {
        RawClient::connect(addr)
            .await
            .handshake(Tune::default(), capabilities)
            .await
    }
}

impl RawClient<DuplexStream> {
    /// The whole handshake as guest/guest over an in-memory connection to `broker`
    /// ([`BrokerHandle::connect_in_memory`]): no socket, so tokio's paused clock stays exact.
    pub async fn open_in_memory(broker: &BrokerHandle, tune: Tune) -> RawClient<DuplexStream> {
        RawClient::over(broker.connect_in_memory())
            .handshake(tune, &CAPABILITIES)
            .await
    }

    /// Sends the protocol header over an in-memory connection to `broker` and returns the
    /// server's `connection.start`.
    pub async fn start_in_memory(
        broker: &BrokerHandle,
    ) -> (RawClient<DuplexStream>, ConnectionStart) {
        RawClient::over(broker.connect_in_memory())
            .start_handshake(AMQP_0_9_1)
            .await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> RawClient<S> {
    /// A client on an already connected byte stream.
    pub fn over(stream: S) -> RawClient<S> {
        RawClient {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            server_tune: ConnectionTune::default(),
            tune_ok: ConnectionTuneOk::default(),
        }
    }

    /// Sends `header` and returns the server's `connection.start`.
    pub async fn start_handshake(mut self, header: &[u8]) -> (RawClient<S>, ConnectionStart) {
        self.send_raw(header).await;
        match self.recv_method0().await {
            Method::ConnectionStart(start) => (self, start),
            other => panic!("expected connection.start, got {other:?}"),
        }
    }

    /// The whole handshake as guest/guest (PLAIN), with `tune` and `capabilities`.
    pub async fn handshake(self, tune: Tune, capabilities: &[(&str, bool)]) -> RawClient<S> {
        let (mut client, _start) = self.start_handshake(AMQP_0_9_1).await;
        client
            .send_method(
                0,
                &start_ok_plain_announcing("guest", "guest", capabilities),
            )
            .await;
        client.finish_handshake(tune).await;
        client
    }

    /// After `start-ok`: receives `tune`, answers `tune-ok`, sends `open` to `/`, awaits
    /// `open-ok`.
    pub async fn finish_handshake(&mut self, tune: Tune) {
        self.server_tune = match self.recv_method0().await {
            Method::ConnectionTune(t) => t,
            other => panic!("expected connection.tune, got {other:?}"),
        };
        self.tune_ok = ConnectionTuneOk {
            channel_max: tune.channel_max.unwrap_or(self.server_tune.channel_max),
            frame_max: tune.frame_max.unwrap_or(self.server_tune.frame_max),
            heartbeat: tune.heartbeat.unwrap_or(0),
        };
        let tune_ok = Method::ConnectionTuneOk(self.tune_ok.clone());
        self.send_method(0, &tune_ok).await;
        self.send_method(
            0,
            &Method::ConnectionOpen(ConnectionOpen {
                virtual_host: "/".into(),
            }),
        )
        .await;
        match self.recv_method0().await {
            Method::ConnectionOpenOk => {}
            other => panic!("expected connection.open-ok, got {other:?}"),
        }
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write to broker");
    }

    /// Writes, tolerating a server that has already closed (for garbage after an error).
    pub async fn try_send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await
    }

    pub async fn send_frame(&mut self, frame: &Frame) {
        let mut out = BytesMut::new();
        encode_frame(&mut out, frame);
        self.send_raw(&out).await;
    }

    pub async fn send_method(&mut self, channel: u16, method: &Method) {
        let mut out = BytesMut::new();
        encode_method(&mut out, channel, method);
        self.send_raw(&out).await;
    }

    pub async fn send_heartbeat(&mut self) {
        let mut out = BytesMut::new();
        encode_heartbeat(&mut out);
        self.send_raw(&out).await;
    }

    /// A content header announcing `body_size` octets, default properties.
    pub async fn send_content_header(&mut self, channel: u16, body_size: u64) {
        let mut out = BytesMut::new();
        encode_header(
            &mut out,
            channel,
            &ContentHeader {
                class_id: 60,
                body_size,
                properties: BasicProperties::default(),
            },
        );
        self.send_raw(&out).await;
    }

    pub async fn send_body(&mut self, channel: u16, body: &[u8]) {
        let mut out = BytesMut::new();
        encode_body(&mut out, channel, body);
        self.send_raw(&out).await;
    }

    /// A lone `basic.publish` method frame (not mandatory), without its content.
    pub async fn send_publish_method(&mut self, channel: u16, exchange: &str, routing_key: &str) {
        self.send_method(channel, &publish_method(exchange, routing_key, false))
            .await;
    }

    /// `basic.publish` + header + one body frame, in one write.
    pub async fn publish(&mut self, channel: u16, exchange: &str, routing_key: &str, body: &[u8]) {
        self.publish_mandatory(channel, exchange, routing_key, false, body)
            .await;
    }

    /// The next frame, or `None` once the server closed the socket (EOF or reset).
    /// Panics if nothing arrives within [`FRAME_WAIT`].
    pub async fn try_recv_frame(&mut self) -> Option<Frame> {
        tokio::time::timeout(FRAME_WAIT, self.read_frame())
            .await
            .expect("a frame (or EOF) arrives in time")
    }

    async fn read_frame(&mut self) -> Option<Frame> {
        loop {
            // The client accepts any size: tests assert frame sizes themselves.
            match decode_frame(&mut self.buf, u32::MAX) {
                Ok(Some(frame)) => return Some(frame),
                Ok(None) => {}
                Err(e) => panic!("server sent an undecodable frame: {e}"),
            }
            match self.stream.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    /// The next frame; panics on EOF.
    pub async fn recv_frame(&mut self) -> Frame {
        self.try_recv_frame()
            .await
            .expect("the server closed the socket, expected a frame")
    }

    /// The next frame that is not a heartbeat.
    pub async fn recv_non_heartbeat(&mut self) -> Frame {
        loop {
            let frame = self.recv_frame().await;
            if !matches!(frame.payload, FramePayload::Heartbeat) {
                return frame;
            }
        }
    }

    /// The next non-heartbeat frame, which must be a method; returns (channel, method).
    pub async fn recv_method(&mut self) -> (u16, Method) {
        let frame = self.recv_non_heartbeat().await;
        match frame.payload {
            FramePayload::Method(m) => (frame.channel, m),
            other => panic!(
                "expected a method frame, got {other:?} on channel {}",
                frame.channel
            ),
        }
    }

    /// The next method, which must be on channel 0.
    pub async fn recv_method0(&mut self) -> Method {
        let (channel, method) = self.recv_method().await;
        assert_eq!(channel, 0, "expected a channel-0 method, got {method:?}");
        method
    }

    /// The next method, which must be on `channel`.
    pub async fn recv_method_on(&mut self, channel: u16) -> Method {
        let (got, method) = self.recv_method().await;
        assert_eq!(got, channel, "method {method:?} on an unexpected channel");
        method
    }

    /// Expects `connection.close` as the next non-heartbeat frame; returns it without
    /// answering.
    pub async fn expect_connection_close(&mut self) -> ConnectionClose {
        match self.recv_method0().await {
            Method::ConnectionClose(close) => close,
            other => panic!("expected connection.close, got {other:?}"),
        }
    }

    /// Expects `connection.close`, answers `close-ok`, and waits for the socket to close.
    /// Returns (reply code, reply text, class id, method id).
    pub async fn expect_close_and_ack(&mut self) -> (u16, String, u16, u16) {
        let close = self.expect_connection_close().await;
        // The server may already have closed the socket (a fatal frame error): ignore errors.
        let mut out = BytesMut::new();
        encode_method(&mut out, 0, &Method::ConnectionCloseOk);
        let _ = self.try_send_raw(&out).await;
        self.expect_eof().await;
        (
            close.reply_code,
            close.reply_text.as_str().to_string(),
            close.class_id,
            close.method_id,
        )
    }

    /// Expects `channel.close` on `channel`; returns (code, text, class id, method id).
    pub async fn expect_channel_close(&mut self, channel: u16) -> (u16, String, u16, u16) {
        match self.recv_method_on(channel).await {
            Method::ChannelClose(ChannelClose {
                reply_code,
                reply_text,
                class_id,
                method_id,
            }) => (
                reply_code,
                reply_text.as_str().to_string(),
                class_id,
                method_id,
            ),
            other => panic!("expected channel.close, got {other:?}"),
        }
    }

    /// Reads (discarding heartbeats and anything else) until the server closes the socket;
    /// panics if it is still open after [`CLOSE_WAIT`]. Returns the frames discarded.
    pub async fn expect_eof(&mut self) -> Vec<Frame> {
        let mut seen = Vec::new();
        let wait = async {
            loop {
                match decode_frame(&mut self.buf, u32::MAX) {
                    Ok(Some(frame)) => {
                        seen.push(frame);
                        continue;
                    }
                    Ok(None) => {}
                    // Not a frame (e.g. a protocol header): drop the bytes.
                    Err(_) => self.buf.clear(),
                }
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(CLOSE_WAIT, wait)
            .await
            .expect("the server closes the socket in time");
        seen
    }

    /// Reads raw octets until `n` are buffered or the socket ends; returns what was read.
    pub async fn read_raw(&mut self, n: usize) -> Vec<u8> {
        let wait = async {
            while self.buf.len() < n {
                match self.stream.read_buf(&mut self.buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        };
        tokio::time::timeout(FRAME_WAIT, wait)
            .await
            .expect("octets (or EOF) arrive in time");
        let take = self.buf.len().min(n);
        self.buf.split_to(take).to_vec()
    }

    /// Sends `method` on `channel` and returns the next method on it (the reply).
    pub async fn call(&mut self, channel: u16, method: &Method) -> Method {
        self.send_method(channel, method).await;
        self.recv_method_on(channel).await
    }

    /// `queue.declare` of `queue` (passive or not, other flags off); returns the declare-ok.
    pub async fn declare_queue(
        &mut self,
        channel: u16,
        queue: &str,
        passive: bool,
    ) -> QueueDeclareOk {
        match self.call(channel, &queue_declare(queue, passive)).await {
            Method::QueueDeclareOk(ok) => ok,
            other => panic!("expected queue.declare-ok for {queue}, got {other:?}"),
        }
    }

    /// Ready messages in `queue` (a passive declare on `channel`).
    pub async fn queue_depth(&mut self, channel: u16, queue: &str) -> u32 {
        self.declare_queue(channel, queue, true).await.message_count
    }

    /// `basic.consume` on `queue` with consumer tag `tag`, expecting `consume-ok`.
    pub async fn consume(&mut self, channel: u16, queue: &str, tag: &str, no_ack: bool) {
        let consume = Method::BasicConsume(BasicConsume {
            queue: queue.into(),
            consumer_tag: tag.into(),
            no_ack,
            ..Default::default()
        });
        match self.call(channel, &consume).await {
            Method::BasicConsumeOk(ok) => assert_eq!(ok.consumer_tag.as_str(), tag),
            other => panic!("expected basic.consume-ok, got {other:?}"),
        }
    }

    /// `basic.publish` + header + body in one write, with `mandatory` as given.
    pub async fn publish_mandatory(
        &mut self,
        channel: u16,
        exchange: &str,
        routing_key: &str,
        mandatory: bool,
        body: &[u8],
    ) {
        let mut out = BytesMut::new();
        publish_frames(&mut out, channel, exchange, routing_key, mandatory, body);
        self.send_raw(&out).await;
    }

    /// The next delivery on `channel`: `basic.deliver`, its header and its body (one frame
    /// or several, joined).
    pub async fn recv_delivery(&mut self, channel: u16) -> (BasicDeliver, Vec<u8>) {
        let deliver = match self.recv_method_on(channel).await {
            Method::BasicDeliver(deliver) => deliver,
            other => panic!("expected basic.deliver, got {other:?}"),
        };
        let body = self.recv_content(channel).await;
        (deliver, body)
    }

    /// A content header and the body frames it announces; returns the body.
    pub async fn recv_content(&mut self, channel: u16) -> Vec<u8> {
        let frame = self.recv_non_heartbeat().await;
        let size = match frame.payload {
            FramePayload::Header(header) if frame.channel == channel => header.body_size,
            other => panic!("expected a content header on channel {channel}, got {other:?}"),
        };
        let mut body = Vec::new();
        while (body.len() as u64) < size {
            let frame = self.recv_non_heartbeat().await;
            match frame.payload {
                FramePayload::Body(chunk) if frame.channel == channel => {
                    body.extend_from_slice(&chunk)
                }
                other => panic!("expected a body frame on channel {channel}, got {other:?}"),
            }
        }
        body
    }

    /// `channel.open` on `channel`, expecting `open-ok`.
    pub async fn open_channel(&mut self, channel: u16) {
        self.send_method(channel, &Method::ChannelOpen).await;
        match self.recv_method_on(channel).await {
            Method::ChannelOpenOk => {}
            other => panic!("expected channel.open-ok, got {other:?}"),
        }
    }

    /// Sends `connection.close` and expects `close-ok`, then the socket to close.
    pub async fn close(&mut self) {
        self.send_method(
            0,
            &Method::ConnectionClose(ConnectionClose {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            }),
        )
        .await;
        match self.recv_method0().await {
            Method::ConnectionCloseOk => {}
            other => panic!("expected connection.close-ok, got {other:?}"),
        }
        self.expect_eof().await;
    }
}
