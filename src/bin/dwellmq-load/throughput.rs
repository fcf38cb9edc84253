//! Publish → queue → consume throughput, and latency at a fixed rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::raw_client::{publish_triple, Error, RawClient};
use crate::stats::{cpu_seconds, drain_frames, percentiles};
use crate::Options;

/// Publishes this many triples per socket write.
const BATCH: usize = 256;

fn queue_name(i: usize) -> String {
    format!("load-{}-{i}", std::process::id())
}

/// `pairs` publishers, each feeding its own queue and consumer; the publisher keeps at most
/// `window` messages in flight so the run measures steady state, not an ever-growing queue.
pub(crate) async fn run_throughput(options: &Options) -> Result<(), Error> {
    let addr = options.string("addr", "127.0.0.1:5672");
    let pairs: usize = options.get("pairs", 1)?;
    let messages: u64 = options.get("messages", 1_000_000)?;
    let size: usize = options.get("size", 16)?;
    let window: u64 = options.get("window", 20_000)?;
    let pid: Option<u32> = options.get("pid", 0u32).ok().filter(|&p| p != 0);

    let mut consumers = Vec::new();
    let mut publishers = Vec::new();
    for i in 0..pairs {
        let mut consumer = RawClient::connect(&addr).await?;
        consumer.declare_queue(&queue_name(i)).await?;
        consumer.consume(&queue_name(i)).await?;
        consumers.push(consumer);
        publishers.push(RawClient::connect(&addr).await?);
    }
    let cpu_before = pid.and_then(cpu_seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, (consumer, publisher)) in consumers.into_iter().zip(publishers).enumerate() {
        let consumed = Arc::new(AtomicU64::new(0));
        tasks.push(tokio::spawn(consume(
            consumer,
            messages,
            Arc::clone(&consumed),
        )));
        let triple = publish_triple(&queue_name(i), &vec![b'x'; size]);
        tasks.push(tokio::spawn(publish(
            publisher, triple, messages, window, consumed,
        )));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = messages * pairs as u64;
    println!(
        "throughput: {pairs} publisher(s) -> {pairs} queue(s) -> {pairs} consumer(s), {size} B bodies"
    );
    println!(
        "  {total} messages in {elapsed:.2} s = {:.0} msg/s",
        total as f64 / elapsed
    );
    if let (Some(before), Some(after)) = (cpu_before, pid.and_then(cpu_seconds)) {
        let cpu = after - before;
        println!(
            "  broker CPU {cpu:.2} s = {:.2} µs/msg ({:.0}% of one core)",
            cpu * 1e6 / total as f64,
            cpu * 100.0 / elapsed
        );
    }
    Ok(())
}

async fn publish(
    mut client: RawClient,
    triple: bytes::Bytes,
    messages: u64,
    window: u64,
    consumed: Arc<AtomicU64>,
) -> Result<(), Error> {
    let mut batch = BytesMut::with_capacity(triple.len() * BATCH);
    for _ in 0..BATCH {
        batch.extend_from_slice(&triple);
    }
    let batch = batch.freeze();
    let mut published = 0u64;
    while published < messages {
        if published.saturating_sub(consumed.load(Ordering::Relaxed)) > window {
            tokio::time::sleep(Duration::from_micros(100)).await;
            continue;
        }
        let n = (messages - published).min(BATCH as u64) as usize;
        client.writer.write_all(&batch[..triple.len() * n]).await?;
        published += n as u64;
    }
    // Keep the connection open until the consumer has everything.
    while consumed.load(Ordering::Relaxed) < messages {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

async fn consume(
    mut client: RawClient,
    messages: u64,
    consumed: Arc<AtomicU64>,
) -> Result<(), Error> {
    let mut count = drain_frames(&mut client.buf, |_| {}) as u64;
    while count < messages {
        if client.reader.read_buf(&mut client.buf).await? == 0 {
            return Err("broker closed the consumer connection".into());
        }
        count += drain_frames(&mut client.buf, |_| {}) as u64;
        consumed.store(count, Ordering::Relaxed);
        if client.buf.capacity() < 64 * 1024 {
            client.buf.reserve(1 << 20);
        }
    }
    Ok(())
}

/// One publisher at a fixed rate, one consumer; each body carries its send time.
pub(crate) async fn run_latency(options: &Options) -> Result<(), Error> {
    let addr = options.string("addr", "127.0.0.1:5672");
    let rate: u64 = options.get("rate", 20_000)?;
    let seconds: u64 = options.get("seconds", 10)?;
    let pid: Option<u32> = options.get("pid", 0u32).ok().filter(|&p| p != 0);
    let queue = queue_name(999);
    let mut consumer = RawClient::connect(&addr).await?;
    consumer.declare_queue(&queue).await?;
    consumer.consume(&queue).await?;
    let mut publisher = RawClient::connect(&addr).await?;
    let total = rate * seconds;
    let epoch = Instant::now();

    let consumer_task = tokio::spawn(async move {
        let mut latencies = Vec::with_capacity(total as usize);
        let mut buf = std::mem::take(&mut consumer.buf);
        while (latencies.len() as u64) < total {
            if consumer.reader.read_buf(&mut buf).await? == 0 {
                return Err::<Vec<f64>, Error>("broker closed the consumer connection".into());
            }
            let now = epoch.elapsed().as_nanos() as u64;
            drain_frames(&mut buf, |body| {
                if let Some(sent) = body.get(..8) {
                    let sent = u64::from_be_bytes(sent.try_into().unwrap_or_default());
                    latencies.push(now.saturating_sub(sent) as f64 / 1e6);
                }
            });
            if buf.capacity() < 64 * 1024 {
                buf.reserve(1 << 20);
            }
        }
        Ok(latencies)
    });

    let cpu_before = pid.and_then(cpu_seconds);
    let per_tick = (rate / 1000).max(1);
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    let mut sent = 0u64;
    let mut out = BytesMut::new();
    while sent < total {
        ticker.tick().await;
        out.clear();
        let now = epoch.elapsed().as_nanos() as u64;
        for _ in 0..per_tick.min(total - sent) {
            let mut body = [0u8; 16];
            body[..8].copy_from_slice(&now.to_be_bytes());
            out.extend_from_slice(&publish_triple(&queue, &body));
            sent += 1;
        }
        publisher.writer.write_all(&out).await?;
    }
    let mut latencies = consumer_task.await??;
    let (p50, p99, p999, max) = percentiles(&mut latencies).ok_or("no samples")?;
    println!("latency: {rate} msg/s for {seconds} s, 16 B bodies, 1 -> 1");
    println!("  p50 {p50:.3} ms, p99 {p99:.3} ms, p99.9 {p999:.3} ms, max {max:.3} ms");
    if let (Some(before), Some(after)) = (cpu_before, pid.and_then(cpu_seconds)) {
        println!(
            "  broker CPU {:.2} µs/msg",
            (after - before) * 1e6 / total as f64
        );
    }
    Ok(())
}
