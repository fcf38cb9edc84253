//! Delayed-message benchmark: schedule N messages with delays uniform over [min, max] through an
//! `x-delayed-message` exchange with publisher confirms, then measure release lateness.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use dwellmq_codec::methods::*;
use dwellmq_codec::{
    encode_body, encode_header_raw, encode_method, BasicProperties, FieldTable, FieldValue,
    FramePayload, Method, ShortStr,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::raw_client::{Error, RawClient};
use crate::stats::{drain_frames, summary_ms};
use crate::Options;

fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A small deterministic generator (xorshift) so runs are repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub(crate) async fn run(options: &Options) -> Result<(), Error> {
    let addr = options.string("addr", "127.0.0.1:5672");
    let messages: u64 = options.get("messages", 100_000)?;
    let min_delay: u64 = options.get("min-delay-ms", 1_000)?;
    let max_delay: u64 = options.get("max-delay-ms", 10_000)?;
    // Unconfirmed messages in flight: a deep pipeline makes the broker see a message later than
    // the client stamped it, which would count as lateness.
    let window: u64 = options.get("window", 500)?;
    let pid: Option<u32> = options.get("pid", 0u32).ok().filter(|&p| p != 0);
    let worst: usize = options.get("worst", 0)?;
    // Measure scheduling (publish to confirm) only, without waiting for the releases.
    let schedule_only = options.get("schedule-only", false)?;
    // Optional CSV of every sample (due µs since publishing started, lateness ms, index in
    // publish order) for plotting.
    let dump = options.string("dump", "");
    // Publish rate cap in messages per second (0 = as fast as confirms allow).
    let rate: u64 = options.get("rate", 0)?;
    // A durable exchange (kept after the run): with `--data-dir` the broker holds its messages
    // on disk, and they survive a restart of the broker.
    let durable = options.get("durable", false)?;
    // Body size in octets (at least 16: the due time is in the first 8, the message's index in
    // publish order in the next 8).
    let size: usize = options.get::<usize>("size", 16)?.max(16);
    let tag = std::process::id();
    let exchange = format!("load-delayed-{tag}");
    let queue = format!("load-delayed-q-{tag}");

    let mut consumer = RawClient::connect(&addr).await?;
    let mut args = FieldTable::new();
    args.insert("x-delayed-type", "direct");
    consumer
        .send(
            1,
            Method::ExchangeDeclare(ExchangeDeclare {
                exchange: exchange.as_str().into(),
                kind: if std::env::var_os("DWELLMQ_LOAD_PLAIN").is_some() {
                    "direct".into()
                } else {
                    "x-delayed-message".into()
                },
                durable,
                auto_delete: !durable,
                arguments: args,
                ..Default::default()
            }),
        )
        .await?;
    consumer
        .expect(|m| matches!(m, Method::ExchangeDeclareOk))
        .await?;
    consumer.declare_queue(&queue).await?;
    consumer
        .send(
            1,
            Method::QueueBind(QueueBind {
                queue: queue.as_str().into(),
                exchange: exchange.as_str().into(),
                routing_key: "k".into(),
                ..Default::default()
            }),
        )
        .await?;
    consumer
        .expect(|m| matches!(m, Method::QueueBindOk))
        .await?;
    consumer.consume(&queue).await?;

    let mut publisher = RawClient::connect(&addr).await?;
    publisher
        .send(1, Method::ConfirmSelect(ConfirmSelect { no_wait: false }))
        .await?;
    publisher
        .expect(|m| matches!(m, Method::ConfirmSelectOk))
        .await?;

    let rss_before = pid.and_then(rss_kib);
    // The consumer gets its own thread and runtime: time stamps must not wait behind the
    // publisher's encoding work.
    let consumer_thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("consumer runtime");
        runtime.block_on(async move {
            // (due µs, lateness ms, index in publish order)
            let mut lateness_ms: Vec<(u64, f64, u64)> = Vec::with_capacity(messages as usize);
            let mut buf = std::mem::take(&mut consumer.buf);
            let idle_limit = std::time::Duration::from_millis(max_delay + 30_000);
            while (lateness_ms.len() as u64) < messages {
                let read =
                    tokio::time::timeout(idle_limit, consumer.reader.read_buf(&mut buf)).await;
                match read {
                    Ok(Ok(0)) | Ok(Err(_)) => break,
                    Err(_) => break,
                    Ok(Ok(_)) => {}
                }
                let now = wall_us();
                drain_frames(&mut buf, |body| {
                    let word = |at: usize| {
                        body.get(at..at + 8)
                            .and_then(|b| b.try_into().ok())
                            .map(u64::from_be_bytes)
                    };
                    if let (Some(due), Some(index)) = (word(0), word(8)) {
                        lateness_ms.push((due, (now as f64 - due as f64) / 1000.0, index));
                    }
                });
                if buf.capacity() < 64 * 1024 {
                    buf.reserve(1 << 20);
                }
            }
            lateness_ms
        })
    });

    // Publish with confirms, keeping at most `window` unconfirmed.
    let started = Instant::now();
    let publishing_started_us = wall_us();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut published = 0u64;
    let mut confirmed = 0u64;
    let mut out = BytesMut::new();
    let mut props = BytesMut::new();
    // Publish time stamps of unconfirmed messages, and how long each waited for its confirm.
    let mut unconfirmed_since: std::collections::VecDeque<u64> = Default::default();
    let mut confirm_ms: Vec<f64> = Vec::with_capacity(messages as usize);
    let mut confirm_up_to =
        |tag: u64, confirmed: &mut u64, since: &mut std::collections::VecDeque<u64>| {
            let now = wall_us();
            while *confirmed < tag {
                if let Some(stamp) = since.pop_front() {
                    confirm_ms.push(now.saturating_sub(stamp) as f64 / 1000.0);
                }
                *confirmed += 1;
            }
        };
    let mut body = vec![0u8; size];
    while confirmed < messages {
        out.clear();
        let allowed = if rate == 0 {
            messages
        } else {
            (started.elapsed().as_secs_f64() * rate as f64) as u64 + 1
        };
        // Fill the whole window before reading a confirm, in writes of about 64 KiB: one
        // write per confirm read would cap what is in flight at one write's worth, whatever
        // the window.
        while published < messages.min(allowed) && published - confirmed < window {
            if out.len() >= 64 * 1024 {
                publisher.writer.write_all(&out).await?;
                out.clear();
            }
            let delay = min_delay + rng.next() % (max_delay - min_delay + 1);
            let stamp_us = wall_us();
            unconfirmed_since.push_back(stamp_us);
            let due_us = stamp_us + delay * 1000;
            let mut headers = FieldTable::new();
            headers.insert("x-delay", FieldValue::I64(delay as i64));
            props.clear();
            BasicProperties {
                headers: Some(headers),
                ..Default::default()
            }
            .encode(&mut props);
            encode_method(
                &mut out,
                1,
                &Method::BasicPublish(BasicPublish {
                    exchange: exchange.as_str().into(),
                    routing_key: ShortStr::from_static("k"),
                    ..Default::default()
                }),
            );
            body[..8].copy_from_slice(&due_us.to_be_bytes());
            body[8..16].copy_from_slice(&published.to_be_bytes());
            encode_header_raw(&mut out, 1, 60, body.len() as u64, &props);
            encode_body(&mut out, 1, &body);
            published += 1;
        }
        if !out.is_empty() {
            publisher.writer.write_all(&out).await?;
        }
        if published == confirmed {
            // Nothing outstanding: the rate cap holds the next publish back.
            tokio::time::sleep(std::time::Duration::from_micros(200)).await;
            continue;
        }
        // Read confirms.
        let frame = publisher.next_frame().await?;
        match frame.payload {
            FramePayload::Method(Method::BasicAck(ack)) => {
                confirm_up_to(ack.delivery_tag, &mut confirmed, &mut unconfirmed_since)
            }
            FramePayload::Method(Method::BasicNack(nack)) => {
                return Err(format!("broker nacked {}", nack.delivery_tag).into())
            }
            FramePayload::Method(m @ (Method::ConnectionClose(_) | Method::ChannelClose(_))) => {
                return Err(format!("broker closed: {m:?}").into())
            }
            _ => {}
        }
        while let Ok(Some(frame)) =
            dwellmq_codec::decode_frame(&mut publisher.buf, crate::raw_client::FRAME_MAX)
        {
            if let FramePayload::Method(Method::BasicAck(ack)) = frame.payload {
                confirm_up_to(ack.delivery_tag, &mut confirmed, &mut unconfirmed_since);
            }
        }
        if publisher.buf.is_empty() && published > confirmed && published == messages {
            let _ = publisher.reader.read_buf(&mut publisher.buf).await;
        }
    }
    let schedule_secs = started.elapsed().as_secs_f64();
    let started_us = publishing_started_us;
    let publishing_ended_us = wall_us();
    let rss_held = pid.and_then(rss_kib);
    println!(
        "delayed: {messages} messages, delays uniform over {min_delay}-{max_delay} ms, confirms on, publish rate {}",
        if rate == 0 { "unlimited".to_string() } else { format!("{rate}/s") }
    );
    println!(
        "  scheduled in {schedule_secs:.2} s = {:.0} msg/s (confirmed)",
        messages as f64 / schedule_secs
    );
    // Publish to confirm of each message, in publish order (sorted below).
    let confirm_by_index = confirm_ms.clone();
    if let Some(summary) = summary_ms(&mut confirm_ms) {
        println!("  publish to confirm: {summary}");
    }
    if let (Some(before), Some(held)) = (rss_before, rss_held) {
        println!(
            "  broker RSS {before} KiB before, {held} KiB with messages held: ~{:.0} B per held message (upper bound: includes messages already released)",
            (held.saturating_sub(before) * 1024) as f64 / messages as f64
        );
    }
    if schedule_only {
        // The consumer thread waits for releases that this run does not measure.
        std::process::exit(0);
    }
    let samples = tokio::task::spawn_blocking(move || consumer_thread.join())
        .await?
        .map_err(|_| "consumer thread panicked")?;
    let received = samples.len() as u64;
    let mut lateness: Vec<f64> = samples.iter().map(|&(_, l, _)| l).collect();
    // The broker saw each publish between its sending and its confirm: lateness counted from
    // the confirm instead bounds the broker's own lateness from below, and the gap between the
    // two is time the publish spent on its way in (socket, read backlog, and with a data
    // directory the commit before the confirm).
    let mut from_confirm: Vec<f64> = samples
        .iter()
        .filter_map(|&(_, l, index)| Some(l - confirm_by_index.get(index as usize)?))
        .collect();
    // Messages due while the publisher was still saturating both cores, and the rest.
    let mut during: Vec<f64> = samples
        .iter()
        .filter(|&&(due, _, _)| due < publishing_ended_us)
        .map(|&(_, l, _)| l)
        .collect();
    let mut after: Vec<f64> = samples
        .iter()
        .filter(|&&(due, _, _)| due >= publishing_ended_us)
        .map(|&(_, l, _)| l)
        .collect();
    println!(
        "  received {received} / {messages} (lost {})",
        messages - received
    );
    let summary = summary_ms(&mut lateness).ok_or("no messages received")?;
    println!("  lateness (receive - due): {summary}");
    for (label, set) in [
        ("due while publishing", &mut during),
        ("due after publishing", &mut after),
    ] {
        let count = set.len();
        if let Some(summary) = summary_ms(set) {
            println!("    {label} ({count}): {summary}");
        }
    }
    if let Some(summary) = summary_ms(&mut from_confirm) {
        println!("  lateness counted from the confirm (a lower bound): {summary}");
    }
    if worst > 0 {
        let mut by_lateness = samples.clone();
        by_lateness.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (due, late, _) in by_lateness.iter().take(worst) {
            println!(
                "    late {late:.2} ms, due at +{:.3} s",
                due.saturating_sub(started_us) as f64 / 1e6
            );
        }
    }
    if !dump.is_empty() {
        use std::io::Write;
        let mut file = std::io::BufWriter::new(std::fs::File::create(&dump)?);
        for (due, late, index) in &samples {
            writeln!(file, "{},{late:.3},{index}", due.saturating_sub(started_us))?;
        }
        file.flush()?;
    }
    Ok(())
}
