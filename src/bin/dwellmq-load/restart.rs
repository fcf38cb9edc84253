//! How fast a broker comes back with a long durable queue: `fill` publishes persistent
//! messages with confirms into a durable queue that nobody consumes (and keeps it);
//! `first-delivery` starts the broker (`--exec`), connects as soon as it accepts, consumes the
//! queue and reports the time from exec to accepting and to the first delivery, and the
//! broker's RSS then. Between the two, kill the broker (SIGKILL) to measure a crash restart.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use dwellmq_codec::methods::*;
use dwellmq_codec::{BasicProperties, FramePayload, Method, ShortStr};
use tokio::io::AsyncWriteExt;

use crate::raw_client::{publish_triple_with, Error, RawClient};
use crate::Options;

/// `fill --addr A --queue Q --messages N --size B --window W [--transient true]`: with
/// `--transient`, transient messages into a transient queue (memory pressure: they page to
/// disk only when the broker spills them); the count of `connection.blocked` frames is
/// reported.
pub(crate) async fn fill(options: &Options) -> Result<(), Error> {
    let addr = options.string("addr", "127.0.0.1:5672");
    let queue = options.string("queue", "load-restart");
    let messages: u64 = options.get("messages", 1_000_000)?;
    let size: usize = options.get("size", 16)?;
    let window: u64 = options.get("window", 256)?;
    let transient: bool = options.get("transient", false)?;
    let mut client = RawClient::connect(&addr).await?;
    declare(&mut client, &queue, !transient).await?;
    client
        .send(1, Method::ConfirmSelect(ConfirmSelect { no_wait: false }))
        .await?;
    client
        .expect(|m| matches!(m, Method::ConfirmSelectOk))
        .await?;
    let properties = BasicProperties {
        delivery_mode: Some(if transient { 1 } else { 2 }),
        ..Default::default()
    };
    let triple = publish_triple_with(&queue, &vec![b'x'; size], &properties);
    let started = Instant::now();
    let (mut published, mut confirmed, mut nacked, mut blocked) = (0u64, 0u64, 0u64, 0u64);
    let mut out = BytesMut::new();
    while confirmed < messages {
        let room = (window - (published - confirmed)).min(messages - published);
        if room > 0 {
            out.clear();
            for _ in 0..room {
                out.extend_from_slice(&triple);
            }
            client.writer.write_all(&out).await?;
            published += room;
        }
        match client.next_frame().await?.payload {
            FramePayload::Method(Method::BasicAck(ack)) => confirmed = ack.delivery_tag,
            FramePayload::Method(Method::BasicNack(nack)) => {
                nacked += 1;
                confirmed = nack.delivery_tag;
            }
            FramePayload::Method(Method::ConnectionBlocked(_)) => blocked += 1,
            FramePayload::Method(m @ (Method::ConnectionClose(_) | Method::ChannelClose(_))) => {
                return Err(format!("broker closed: {m:?}").into());
            }
            _ => {}
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let (kind, queue_kind) = if transient {
        ("transient", "transient")
    } else {
        ("persistent", "durable")
    };
    println!(
        "fill: {messages} {kind} {size} B messages confirmed into {queue_kind} queue '{queue}' \
         in {secs:.2} s = {:.0} msg/s{}; connection.blocked {blocked} times",
        messages as f64 / secs,
        if nacked > 0 {
            format!(" ({nacked} nacked)")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// `first-delivery --exec "BROKER ARGS" --addr A --queue Q [--timeout-s 60]`.
pub(crate) async fn first_delivery(options: &Options) -> Result<(), Error> {
    let command = options.string("exec", "");
    let addr = options.string("addr", "127.0.0.1:5672");
    let queue = options.string("queue", "load-restart");
    let timeout = Duration::from_secs(options.get("timeout-s", 60u64)?);
    let mut words = command.split_whitespace();
    let program = words.next().ok_or("--exec BROKER-COMMAND is required")?;
    let started = Instant::now();
    let mut child = std::process::Command::new(program).args(words).spawn()?;
    let pid = child.id();
    let outcome = measure(&addr, &queue, started, timeout, pid).await;
    let _ = child.kill();
    let _ = child.wait();
    outcome
}

async fn measure(
    addr: &str,
    queue: &str,
    started: Instant,
    timeout: Duration,
    pid: u32,
) -> Result<(), Error> {
    let mut client = loop {
        match RawClient::connect(addr).await {
            Ok(client) => break client,
            Err(e) if started.elapsed() > timeout => {
                return Err(format!("the broker never accepted: {e}").into())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    };
    let accepted = started.elapsed();
    client
        .send(
            1,
            Method::BasicConsume(BasicConsume {
                queue: queue.into(),
                consumer_tag: ShortStr::from("restart"),
                no_ack: false,
                ..Default::default()
            }),
        )
        .await?;
    loop {
        match client.next_frame().await?.payload {
            FramePayload::Method(Method::BasicDeliver(_)) => break,
            FramePayload::Method(m @ (Method::ConnectionClose(_) | Method::ChannelClose(_))) => {
                return Err(format!("broker closed: {m:?}").into());
            }
            _ => {}
        }
    }
    let delivered = started.elapsed();
    println!(
        "first-delivery: exec -> accepting {:.3} s, exec -> first delivery {:.3} s, broker RSS {} MiB",
        accepted.as_secs_f64(),
        delivered.as_secs_f64(),
        rss_mib(pid).map_or("?".into(), |m| format!("{m:.0}"))
    );
    Ok(())
}

async fn declare(client: &mut RawClient, queue: &str, durable: bool) -> Result<(), Error> {
    client
        .send(
            1,
            Method::QueueDeclare(QueueDeclare {
                queue: queue.into(),
                durable,
                ..Default::default()
            }),
        )
        .await?;
    client
        .expect(|m| matches!(m, Method::QueueDeclareOk(_)))
        .await?;
    Ok(())
}

/// Resident memory of process `pid` (Linux `/proc/PID/status`).
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
