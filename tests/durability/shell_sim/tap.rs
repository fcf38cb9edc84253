//! A TCP relay between the simulation's client and the broker that notes the frames going
//! each way (the last ones, by channel and method) and each side's end of the stream, so that
//! a close that does not complete can be told apart: which side did not do its part. It can
//! also cut the connection, as a client giving up on a close does.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use dwellmq::codec::{decode_frame, FramePayload, Method};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Frames kept per direction.
const KEPT: usize = 48;

/// What went through one direction.
#[derive(Default, Debug, Clone)]
pub struct Direction {
    /// The last frames, oldest first: "ch1 basic.publish ×3".
    pub frames: Vec<String>,
    /// Seen at all, in order: `connection.close`, `connection.close-ok`,
    /// `connection.blocked`, `connection.unblocked`, `channel.close`, `channel.close-ok`.
    pub connection_methods: Vec<&'static str>,
    /// The stream ended (the sender shut its side or closed).
    pub ended: bool,
}

#[derive(Default, Debug, Clone)]
pub struct Traffic {
    pub to_broker: Direction,
    pub to_client: Direction,
}

impl Traffic {
    pub fn sent_to_broker(&self, method: &str) -> bool {
        self.to_broker.connection_methods.contains(&method)
    }

    pub fn sent_to_client(&self, method: &str) -> bool {
        self.to_client.connection_methods.contains(&method)
    }
}

pub struct Tap {
    pub addr: SocketAddr,
    traffic: Arc<Mutex<Traffic>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Tap {
    /// Relays every connection made to the returned tap's address to `broker`.
    pub async fn new(broker: SocketAddr) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("tap listens");
        let addr = listener.local_addr().expect("tap address");
        let traffic = Arc::new(Mutex::new(Traffic::default()));
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let traffic = Arc::clone(&traffic);
            let tasks = Arc::clone(&tasks);
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(upstream) = TcpStream::connect(broker).await else {
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = upstream.set_nodelay(true);
                    *traffic.lock() = Traffic::default();
                    let (client_read, client_write) = client.into_split();
                    let (broker_read, broker_write) = upstream.into_split();
                    let mut tasks = tasks.lock();
                    tasks.push(tokio::spawn(pump(
                        client_read,
                        broker_write,
                        Arc::clone(&traffic),
                        true,
                    )));
                    tasks.push(tokio::spawn(pump(
                        broker_read,
                        client_write,
                        Arc::clone(&traffic),
                        false,
                    )));
                }
            })
        };
        Tap {
            addr,
            traffic,
            tasks,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("amqp://{}/%2f", self.addr)
    }

    /// What went through so far (the last connection's).
    pub fn traffic(&self) -> Traffic {
        self.traffic.lock().clone()
    }

    /// Cuts every relayed connection: both sockets close at once.
    pub fn cut(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// Copies one direction, noting its frames; passes an end of stream on as a shutdown of
/// the other side's write half.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    traffic: Arc<Mutex<Traffic>>,
    to_broker: bool,
) {
    let mut parse = BytesMut::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut header_skipped = !to_broker;
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&chunk[..n]).await.is_err() {
            break;
        }
        parse.extend_from_slice(&chunk[..n]);
        if !header_skipped && parse.len() >= 8 {
            let _ = parse.split_to(8);
            header_skipped = true;
        }
        if header_skipped {
            note_frames(&mut parse, &traffic, to_broker);
        }
    }
    let _ = to.shutdown().await;
    let mut traffic = traffic.lock();
    direction(&mut traffic, to_broker).ended = true;
}

fn direction(traffic: &mut Traffic, to_broker: bool) -> &mut Direction {
    if to_broker {
        &mut traffic.to_broker
    } else {
        &mut traffic.to_client
    }
}

fn note_frames(parse: &mut BytesMut, traffic: &Mutex<Traffic>, to_broker: bool) {
    loop {
        let frame = match decode_frame(parse, 1 << 24) {
            Ok(Some(frame)) => frame,
            Ok(None) => return,
            Err(e) => {
                let mut traffic = traffic.lock();
                direction(&mut traffic, to_broker)
                    .frames
                    .push(format!("undecodable: {e}"));
                parse.clear();
                return;
            }
        };
        let name = match &frame.payload {
            FramePayload::Method(m) => method_name(m),
            FramePayload::Header(_) => "header".to_string(),
            FramePayload::Body(_) => "body".to_string(),
            FramePayload::Heartbeat => "heartbeat".to_string(),
        };
        let connection_method = match &frame.payload {
            FramePayload::Method(Method::ConnectionClose(_)) => Some("connection.close"),
            FramePayload::Method(Method::ConnectionCloseOk) => Some("connection.close-ok"),
            FramePayload::Method(Method::ConnectionBlocked(_)) => Some("connection.blocked"),
            FramePayload::Method(Method::ConnectionUnblocked) => Some("connection.unblocked"),
            FramePayload::Method(Method::ChannelClose(_)) => Some("channel.close"),
            FramePayload::Method(Method::ChannelCloseOk) => Some("channel.close-ok"),
            _ => None,
        };
        let mut traffic = traffic.lock();
        let d = direction(&mut traffic, to_broker);
        if let Some(m) = connection_method {
            d.connection_methods.push(m);
        }
        let entry = format!("ch{} {name}", frame.channel);
        match d.frames.last_mut() {
            Some(last) if last.split(" ×").next() == Some(entry.as_str()) => {
                let count: u64 = last
                    .split(" ×")
                    .nth(1)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1);
                *last = format!("{entry} ×{}", count + 1);
            }
            _ => d.frames.push(entry),
        }
        if d.frames.len() > KEPT {
            d.frames.remove(0);
        }
    }
}

/// `ConnectionClose(…)` → `ConnectionClose`: the variant's name is enough.
fn method_name(m: &Method) -> String {
    let debug = format!("{m:?}");
    debug
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or("?")
        .to_string()
}
