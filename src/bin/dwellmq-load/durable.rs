//! Persistent messages with publisher confirms through a durable queue to a consumer that
//! acks: the cost of durability end to end (run it against a broker on a data directory and
//! one in memory to compare).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use dwellmq_codec::methods::*;
use dwellmq_codec::{BasicProperties, Method, ShortStr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::raw_client::{publish_triple_with, Error, RawClient};
use crate::stats::{cpu_seconds, drain_frames};
use crate::Options;

/// `durable`: one publisher (confirms, at most `window` unconfirmed) → one durable queue →
/// one consumer acking every read batch with `multiple`.
pub(crate) async fn run(options: &Options) -> Result<(), Error> {
    let addr = options.string("addr", "127.0.0.1:5672");
    let messages: u64 = options.get("messages", 200_000)?;
    let size: usize = options.get("size", 16)?;
    let window: u64 = options.get("window", 256)?;
    let persistent: bool = options.get("persistent", true)?;
    let pid: Option<u32> = options.get("pid", 0u32).ok().filter(|&p| p != 0);
    // 0: unlimited (every message goes out as it is published); a small prefetch makes
    // messages wait in the queue and be delivered later, as a slow consumer does.
    let prefetch: u16 = options.get("prefetch", 0)?;
    let queue = format!("load-durable-{}", std::process::id());

    let mut consumer = RawClient::connect(&addr).await?;
    consumer
        .send(
            1,
            Method::QueueDeclare(QueueDeclare {
                queue: queue.as_str().into(),
                durable: true,
                ..Default::default()
            }),
        )
        .await?;
    consumer
        .expect(|m| matches!(m, Method::QueueDeclareOk(_)))
        .await?;
    if prefetch > 0 {
        consumer
            .send(
                1,
                Method::BasicQos(BasicQos {
                    prefetch_size: 0,
                    prefetch_count: prefetch,
                    global: false,
                }),
            )
            .await?;
        consumer.expect(|m| matches!(m, Method::BasicQosOk)).await?;
    }
    consumer
        .send(
            1,
            Method::BasicConsume(BasicConsume {
                queue: queue.as_str().into(),
                consumer_tag: ShortStr::from("bench"),
                no_ack: false,
                ..Default::default()
            }),
        )
        .await?;
    consumer
        .expect(|m| matches!(m, Method::BasicConsumeOk(_)))
        .await?;
    let mut publisher = RawClient::connect(&addr).await?;
    publisher
        .send(1, Method::ConfirmSelect(ConfirmSelect { no_wait: false }))
        .await?;
    publisher
        .expect(|m| matches!(m, Method::ConfirmSelectOk))
        .await?;
    let properties = BasicProperties {
        delivery_mode: Some(if persistent { 2 } else { 1 }),
        ..Default::default()
    };
    let triple = publish_triple_with(&queue, &vec![b'x'; size], &properties);

    let cpu_before = pid.and_then(cpu_seconds);
    let started = Instant::now();
    let consumed = Arc::new(AtomicU64::new(0));
    let consumer_task = tokio::spawn(consume(consumer, messages, Arc::clone(&consumed)));
    let mut published = 0u64;
    let mut confirmed = 0u64;
    let mut nacked = 0u64;
    let mut out = BytesMut::new();
    while confirmed < messages {
        let room = (window - (published - confirmed)).min(messages - published);
        if room > 0 {
            out.clear();
            for _ in 0..room {
                out.extend_from_slice(&triple);
            }
            publisher.writer.write_all(&out).await?;
            published += room;
        }
        match publisher.next_frame().await?.payload {
            dwellmq_codec::FramePayload::Method(Method::BasicAck(ack)) => {
                confirmed = confirmed.max(ack.delivery_tag);
            }
            dwellmq_codec::FramePayload::Method(Method::BasicNack(nack)) => {
                nacked += 1;
                confirmed = confirmed.max(nack.delivery_tag);
            }
            dwellmq_codec::FramePayload::Method(m @ Method::ConnectionClose(_))
            | dwellmq_codec::FramePayload::Method(m @ Method::ChannelClose(_)) => {
                return Err(format!("broker closed: {m:?}").into());
            }
            _ => {}
        }
    }
    let confirmed_secs = started.elapsed().as_secs_f64();
    let mut consumer = consumer_task.await??;
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "durable: 1 publisher (confirms, window {window}) -> 1 durable queue -> 1 consumer (acks, \
         prefetch {prefetch}), {size} B bodies, delivery mode {}",
        if persistent { 2 } else { 1 }
    );
    println!(
        "  {messages} messages confirmed in {confirmed_secs:.2} s, consumed in {elapsed:.2} s = {:.0} msg/s{}",
        messages as f64 / elapsed,
        if nacked > 0 { format!(" ({nacked} nacked)") } else { String::new() }
    );
    if let (Some(before), Some(after)) = (cpu_before, pid.and_then(cpu_seconds)) {
        let cpu = after - before;
        println!(
            "  broker CPU {cpu:.2} s = {:.2} µs/msg ({:.0}% of one core)",
            cpu * 1e6 / messages as f64,
            cpu * 100.0 / elapsed
        );
    }
    // Leave nothing behind on the broker's disk.
    consumer
        .send(
            1,
            Method::QueueDelete(QueueDelete {
                queue: queue.as_str().into(),
                ..Default::default()
            }),
        )
        .await?;
    consumer
        .expect(|m| matches!(m, Method::QueueDeleteOk(_)))
        .await?;
    Ok(())
}

/// Counts deliveries and acks them (delivery tags on channel 1 count from 1).
async fn consume(
    mut client: RawClient,
    messages: u64,
    consumed: Arc<AtomicU64>,
) -> Result<RawClient, Error> {
    let mut count = 0u64;
    let mut ack = BytesMut::new();
    while count < messages {
        if client.buf.is_empty() && client.reader.read_buf(&mut client.buf).await? == 0 {
            return Err("broker closed the consumer connection".into());
        }
        let got = drain_frames(&mut client.buf, |_| {}) as u64;
        if got > 0 {
            count += got;
            consumed.store(count, Ordering::Relaxed);
            ack.clear();
            dwellmq_codec::encode_method(
                &mut ack,
                1,
                &Method::BasicAck(BasicAck {
                    delivery_tag: count,
                    multiple: true,
                }),
            );
            client.writer.write_all(&ack).await?;
        } else if client.reader.read_buf(&mut client.buf).await? == 0 {
            return Err("broker closed the consumer connection".into());
        }
        if client.buf.capacity() < 64 * 1024 {
            client.buf.reserve(1 << 20);
        }
    }
    Ok(client)
}
