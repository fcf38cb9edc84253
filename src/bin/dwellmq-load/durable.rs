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
    let plan = Plan::read(options)?;
    let consumer = plan.consumer().await?;
    let mut publisher = plan.publisher().await?;
    let properties = BasicProperties {
        delivery_mode: Some(if plan.persistent { 2 } else { 1 }),
        ..Default::default()
    };
    let triple = publish_triple_with(&plan.queue, &vec![b'x'; plan.size], &properties);

    let cpu_before = plan.pid.and_then(cpu_seconds);
    let started = Instant::now();
    let consumed = Arc::new(AtomicU64::new(0));
    let consumer_task = tokio::spawn(consume(consumer, plan.messages, Arc::clone(&consumed)));
    let nacked = plan.publish(&mut publisher, &triple).await?;
    let confirmed_secs = started.elapsed().as_secs_f64();
    let mut consumer = consumer_task.await??;
    let elapsed = started.elapsed().as_secs_f64();
    plan.report(confirmed_secs, elapsed, nacked, cpu_before);
    plan.delete_queue(&mut consumer).await
}

/// What a run is asked to do, read from the command line once.
struct Plan {
    addr: String,
    messages: u64,
    size: usize,
    window: u64,
    persistent: bool,
    pid: Option<u32>,
    /// 0: unlimited (every message goes out as it is published); a small prefetch makes
    /// messages wait in the queue and be delivered later, as a slow consumer does.
    prefetch: u16,
    queue: String,
}

impl Plan {
    fn read(options: &Options) -> Result<Self, Error> {
        Ok(Plan {
            addr: options.string("addr", "127.0.0.1:5672"),
            messages: options.get("messages", 200_000)?,
            size: options.get("size", 16)?,
            window: options.get("window", 256)?,
            persistent: options.get("persistent", true)?,
            pid: options.get("pid", 0u32).ok().filter(|&p| p != 0),
            prefetch: options.get("prefetch", 0)?,
            queue: format!("load-durable-{}", std::process::id()),
        })
    }

    /// Setup: the durable queue, and a consumer on it (with the prefetch asked for).
    async fn consumer(&self) -> Result<RawClient, Error> {
        let (queue, prefetch) = (&self.queue, self.prefetch);
        let mut consumer = RawClient::connect(&self.addr).await?;
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
        Ok(consumer)
    }

    /// Setup: the publisher's connection, in confirm mode.
    async fn publisher(&self) -> Result<RawClient, Error> {
        let mut publisher = RawClient::connect(&self.addr).await?;
        publisher
            .send(1, Method::ConfirmSelect(ConfirmSelect { no_wait: false }))
            .await?;
        publisher
            .expect(|m| matches!(m, Method::ConfirmSelectOk))
            .await?;
        Ok(publisher)
    }

    /// Publish: `triple` (one encoded publish) `messages` times, at most `window` unconfirmed,
    /// until every one is confirmed; returns how many confirms were nacks.
    async fn publish(&self, publisher: &mut RawClient, triple: &[u8]) -> Result<u64, Error> {
        let (messages, window) = (self.messages, self.window);
        let mut published = 0u64;
        let mut confirmed = 0u64;
        let mut nacked = 0u64;
        let mut out = BytesMut::new();
        while confirmed < messages {
            let room = (window - (published - confirmed)).min(messages - published);
            if room > 0 {
                out.clear();
                for _ in 0..room {
                    out.extend_from_slice(triple);
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
        Ok(nacked)
    }

    /// Report: the rate end to end, and the broker's CPU per message.
    fn report(&self, confirmed_secs: f64, elapsed: f64, nacked: u64, cpu_before: Option<f64>) {
        let (messages, size, window, prefetch) =
            (self.messages, self.size, self.window, self.prefetch);
        println!(
            "durable: 1 publisher (confirms, window {window}) -> 1 durable queue -> 1 consumer (acks, \
             prefetch {prefetch}), {size} B bodies, delivery mode {}",
            if self.persistent { 2 } else { 1 }
        );
        println!(
            "  {messages} messages confirmed in {confirmed_secs:.2} s, consumed in {elapsed:.2} s = {:.0} msg/s{}",
            messages as f64 / elapsed,
            if nacked > 0 { format!(" ({nacked} nacked)") } else { String::new() }
        );
        if let (Some(before), Some(after)) = (cpu_before, self.pid.and_then(cpu_seconds)) {
            let cpu = after - before;
            println!(
                "  broker CPU {cpu:.2} s = {:.2} µs/msg ({:.0}% of one core)",
                cpu * 1e6 / messages as f64,
                cpu * 100.0 / elapsed
            );
        }
    }

    /// Cleanup: leave nothing behind on the broker's disk.
    async fn delete_queue(&self, consumer: &mut RawClient) -> Result<(), Error> {
        consumer
            .send(
                1,
                Method::QueueDelete(QueueDelete {
                    queue: self.queue.as_str().into(),
                    ..Default::default()
                }),
            )
            .await?;
        consumer
            .expect(|m| matches!(m, Method::QueueDeleteOk(_)))
            .await?;
        Ok(())
    }
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
