//! A minimal pipelined AMQP client on raw frames: cheap enough that the broker, not the client,
//! is what a benchmark measures.

use bytes::{Bytes, BytesMut};
use dwellmq_codec::methods::*;
use dwellmq_codec::{
    constants::PROTOCOL_HEADER, decode_frame, encode_body, encode_header_raw, encode_method,
    BasicProperties, FieldTable, Frame, FramePayload, Method, ShortStr,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

pub(crate) const FRAME_MAX: u32 = 131_072;

/// One connection with channel 1 open.
pub(crate) struct RawClient {
    pub(crate) reader: OwnedReadHalf,
    pub(crate) writer: OwnedWriteHalf,
    pub(crate) buf: BytesMut,
}

impl RawClient {
    /// Connects to `host:port`, logs in as guest and opens channel 1.
    pub(crate) async fn connect(addr: &str) -> Result<Self, Error> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (reader, writer) = stream.into_split();
        let mut client = RawClient {
            reader,
            writer,
            buf: BytesMut::with_capacity(1 << 20),
        };
        client.writer.write_all(PROTOCOL_HEADER).await?;
        client
            .expect(|m| matches!(m, Method::ConnectionStart(_)))
            .await?;
        client
            .send(
                0,
                Method::ConnectionStartOk(ConnectionStartOk {
                    client_properties: client_properties(),
                    mechanism: "PLAIN".into(),
                    response: Bytes::from_static(b"\0guest\0guest"),
                    locale: "en_US".into(),
                }),
            )
            .await?;
        client
            .expect(|m| matches!(m, Method::ConnectionTune(_)))
            .await?;
        client
            .send(
                0,
                Method::ConnectionTuneOk(ConnectionTuneOk {
                    channel_max: 16,
                    frame_max: FRAME_MAX,
                    heartbeat: 0,
                }),
            )
            .await?;
        client
            .send(
                0,
                Method::ConnectionOpen(ConnectionOpen {
                    virtual_host: "/".into(),
                }),
            )
            .await?;
        client
            .expect(|m| matches!(m, Method::ConnectionOpenOk))
            .await?;
        client.send(1, Method::ChannelOpen).await?;
        client
            .expect(|m| matches!(m, Method::ChannelOpenOk))
            .await?;
        Ok(client)
    }

    pub(crate) async fn send(&mut self, channel: u16, method: Method) -> Result<(), Error> {
        let mut out = BytesMut::new();
        encode_method(&mut out, channel, &method);
        self.writer.write_all(&out).await?;
        Ok(())
    }

    pub(crate) async fn next_frame(&mut self) -> Result<Frame, Error> {
        loop {
            if let Some(frame) = decode_frame(&mut self.buf, FRAME_MAX)? {
                return Ok(frame);
            }
            if self.reader.read_buf(&mut self.buf).await? == 0 {
                return Err("connection closed by the broker".into());
            }
        }
    }

    /// Reads frames until a method matching `want` arrives; a close is an error.
    pub(crate) async fn expect(&mut self, want: impl Fn(&Method) -> bool) -> Result<Method, Error> {
        loop {
            let frame = self.next_frame().await?;
            if let FramePayload::Method(m) = frame.payload {
                if want(&m) {
                    return Ok(m);
                }
                if matches!(m, Method::ConnectionClose(_) | Method::ChannelClose(_)) {
                    return Err(format!("broker closed: {m:?}").into());
                }
            }
        }
    }

    /// Declares a transient, auto-delete queue.
    pub(crate) async fn declare_queue(&mut self, name: &str) -> Result<(), Error> {
        self.send(
            1,
            Method::QueueDeclare(QueueDeclare {
                queue: name.into(),
                auto_delete: true,
                ..Default::default()
            }),
        )
        .await?;
        self.expect(|m| matches!(m, Method::QueueDeclareOk(_)))
            .await?;
        Ok(())
    }

    /// Starts an auto-ack consumer on channel 1.
    pub(crate) async fn consume(&mut self, queue: &str) -> Result<(), Error> {
        self.send(
            1,
            Method::BasicConsume(BasicConsume {
                queue: queue.into(),
                consumer_tag: ShortStr::from("bench"),
                no_ack: true,
                ..Default::default()
            }),
        )
        .await?;
        self.expect(|m| matches!(m, Method::BasicConsumeOk(_)))
            .await?;
        Ok(())
    }
}

/// A ready-made publish triple (method + header + body) for the default exchange.
pub(crate) fn publish_triple(queue: &str, body: &[u8]) -> Bytes {
    publish_triple_with(queue, body, &BasicProperties::default())
}

/// The same with these properties (delivery mode 2 for persistent messages).
pub(crate) fn publish_triple_with(queue: &str, body: &[u8], properties: &BasicProperties) -> Bytes {
    let mut out = BytesMut::new();
    encode_method(
        &mut out,
        1,
        &Method::BasicPublish(BasicPublish {
            exchange: ShortStr::EMPTY,
            routing_key: queue.into(),
            mandatory: false,
            immediate: false,
        }),
    );
    let mut props = BytesMut::new();
    properties.encode(&mut props);
    encode_header_raw(&mut out, 1, 60, body.len() as u64, &props);
    encode_body(&mut out, 1, body);
    out.freeze()
}

/// Says the client takes `connection.blocked`, so a broker tells it when it blocks it.
fn client_properties() -> FieldTable {
    let mut capabilities = FieldTable::new();
    capabilities.insert("connection.blocked", dwellmq_codec::FieldValue::Bool(true));
    let mut properties = FieldTable::new();
    properties.insert(
        "capabilities",
        dwellmq_codec::FieldValue::Table(capabilities),
    );
    properties
}
