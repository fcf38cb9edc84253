//! Delayed-message benchmark: schedule N messages with delays uniform over [min, max] through an
//! `x-delayed-message` exchange with publisher confirms, then measure release lateness.
//!
//! A run goes in phases, one method of [`Plan`] each: set up the two connections, publish with
//! confirms while a consumer thread collects the releases, report the scheduling, then the
//! lateness (and dump the samples).

use std::collections::VecDeque;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use dwellmq_codec::methods::*;
use dwellmq_codec::{
    encode_body, encode_header_raw, encode_method, BasicProperties, FieldTable, FieldValue,
    FramePayload, Method, ShortStr,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;

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

/// One released message as the consumer saw it: (due µs, lateness ms, index in publish order).
type Sample = (u64, f64, u64);

pub(crate) async fn run(options: &Options) -> Result<(), Error> {
    let plan = Plan::read(options)?;
    let consumer = plan.consumer().await?;
    let mut publisher = plan.publisher().await?;
    let rss_before = plan.pid.and_then(rss_kib);
    // The consumer's writer stays here until the run ends: dropping it would close the
    // consumer's connection, and with it the queue and the exchange, before the releases.
    let RawClient {
        reader,
        writer: _open_until_the_end,
        buf,
    } = consumer;
    let consumer_thread = collect(reader, buf, plan.messages, plan.max_delay);
    let scheduled = plan.publish(&mut publisher).await?;
    let rss_held = plan.pid.and_then(rss_kib);
    plan.report_scheduling(&scheduled, rss_before, rss_held);
    if plan.schedule_only {
        // The consumer thread waits for releases that this run does not measure.
        std::process::exit(0);
    }
    let samples = tokio::task::spawn_blocking(move || consumer_thread.join())
        .await?
        .map_err(|_| "consumer thread panicked")?;
    plan.report_lateness(&scheduled, &samples)?;
    plan.dump_samples(scheduled.started_us, &samples)
}

/// What a run is asked to do, read from the command line once.
struct Plan {
    addr: String,
    messages: u64,
    min_delay: u64,
    max_delay: u64,
    /// Unconfirmed messages in flight: a deep pipeline makes the broker see a message later
    /// than the client stamped it, which would count as lateness.
    window: u64,
    pid: Option<u32>,
    worst: usize,
    /// Measure scheduling (publish to confirm) only, without waiting for the releases.
    schedule_only: bool,
    /// Optional CSV of every sample (due µs since publishing started, lateness ms, index in
    /// publish order) for plotting.
    dump: String,
    /// Publish rate cap in messages per second (0 = as fast as confirms allow).
    rate: u64,
    /// A durable exchange (kept after the run): with `--data-dir` the broker holds its
    /// messages on disk, and they survive a restart of the broker.
    durable: bool,
    /// Body size in octets (at least 16: the due time is in the first 8, the message's index
    /// in publish order in the next 8).
    size: usize,
    exchange: String,
    queue: String,
}

/// What publishing measured.
struct Scheduled {
    schedule_secs: f64,
    /// When publishing started and ended (µs since the epoch).
    started_us: u64,
    ended_us: u64,
    /// Publish to confirm of each message (ms), in publish order.
    confirm_ms: Vec<f64>,
}

impl Plan {
    fn read(options: &Options) -> Result<Self, Error> {
        let tag = std::process::id();
        Ok(Plan {
            addr: options.string("addr", "127.0.0.1:5672"),
            messages: options.get("messages", 100_000)?,
            min_delay: options.get("min-delay-ms", 1_000)?,
            max_delay: options.get("max-delay-ms", 10_000)?,
            window: options.get("window", 500)?,
            pid: options.get("pid", 0u32).ok().filter(|&p| p != 0),
            worst: options.get("worst", 0)?,
            schedule_only: options.get("schedule-only", false)?,
            dump: options.string("dump", ""),
            rate: options.get("rate", 0)?,
            durable: options.get("durable", false)?,
            size: options.get::<usize>("size", 16)?.max(16),
            exchange: format!("load-delayed-{tag}"),
            queue: format!("load-delayed-q-{tag}"),
        })
    }

    /// Setup: the delayed exchange, a queue bound to it, and a consumer on it.
    async fn consumer(&self) -> Result<RawClient, Error> {
        let (exchange, queue) = (&self.exchange, &self.queue);
        let mut consumer = RawClient::connect(&self.addr).await?;
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
                    durable: self.durable,
                    auto_delete: !self.durable,
                    arguments: args,
                    ..Default::default()
                }),
            )
            .await?;
        consumer
            .expect(|m| matches!(m, Method::ExchangeDeclareOk))
            .await?;
        consumer.declare_queue(queue).await?;
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
        consumer.consume(queue).await?;
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

    /// Publish with confirms, keeping at most `window` unconfirmed.
    async fn publish(&self, publisher: &mut RawClient) -> Result<Scheduled, Error> {
        let messages = self.messages;
        let started = Instant::now();
        let started_us = wall_us();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut published = 0u64;
        let mut confirms = Confirms::new(messages);
        let mut out = BytesMut::new();
        let mut encoder = Encoder::new(&self.exchange, self.size);
        while confirms.confirmed < messages {
            out.clear();
            let allowed = if self.rate == 0 {
                messages
            } else {
                (started.elapsed().as_secs_f64() * self.rate as f64) as u64 + 1
            };
            // Fill the whole window before reading a confirm, in writes of about 64 KiB: one
            // write per confirm read would cap what is in flight at one write's worth, whatever
            // the window.
            while published < messages.min(allowed) && published - confirms.confirmed < self.window
            {
                if out.len() >= 64 * 1024 {
                    publisher.writer.write_all(&out).await?;
                    out.clear();
                }
                let delay = self.min_delay + rng.next() % (self.max_delay - self.min_delay + 1);
                let stamp_us = wall_us();
                confirms.unconfirmed_since.push_back(stamp_us);
                encoder.push(&mut out, delay, stamp_us + delay * 1000, published);
                published += 1;
            }
            if !out.is_empty() {
                publisher.writer.write_all(&out).await?;
            }
            if published == confirms.confirmed {
                // Nothing outstanding: the rate cap holds the next publish back.
                tokio::time::sleep(std::time::Duration::from_micros(200)).await;
                continue;
            }
            confirms.read(publisher, published, messages).await?;
        }
        let schedule_secs = started.elapsed().as_secs_f64();
        Ok(Scheduled {
            schedule_secs,
            started_us,
            ended_us: wall_us(),
            confirm_ms: confirms.confirm_ms,
        })
    }

    /// Report: the scheduling rate, publish to confirm, and the broker's memory per message.
    fn report_scheduling(
        &self,
        scheduled: &Scheduled,
        rss_before: Option<u64>,
        rss_held: Option<u64>,
    ) {
        let (messages, rate) = (self.messages, self.rate);
        let (min_delay, max_delay) = (self.min_delay, self.max_delay);
        let schedule_secs = scheduled.schedule_secs;
        println!(
            "delayed: {messages} messages, delays uniform over {min_delay}-{max_delay} ms, confirms on, publish rate {}",
            if rate == 0 { "unlimited".to_string() } else { format!("{rate}/s") }
        );
        println!(
            "  scheduled in {schedule_secs:.2} s = {:.0} msg/s (confirmed)",
            messages as f64 / schedule_secs
        );
        // Sorted for the summary; the run keeps them in publish order.
        let mut confirm_ms = scheduled.confirm_ms.clone();
        if let Some(summary) = summary_ms(&mut confirm_ms) {
            println!("  publish to confirm: {summary}");
        }
        if let (Some(before), Some(held)) = (rss_before, rss_held) {
            println!(
                "  broker RSS {before} KiB before, {held} KiB with messages held: ~{:.0} B per held message (upper bound: includes messages already released)",
                (held.saturating_sub(before) * 1024) as f64 / messages as f64
            );
        }
    }

    /// Report: what was received, and how late, overall and by when it was due.
    fn report_lateness(&self, scheduled: &Scheduled, samples: &[Sample]) -> Result<(), Error> {
        let messages = self.messages;
        let received = samples.len() as u64;
        let mut lateness: Vec<f64> = samples.iter().map(|&(_, l, _)| l).collect();
        // The broker saw each publish between its sending and its confirm: lateness counted
        // from the confirm instead bounds the broker's own lateness from below, and the gap
        // between the two is time the publish spent on its way in (socket, read backlog, and
        // with a data directory the commit before the confirm).
        let confirm_by_index = &scheduled.confirm_ms;
        let mut from_confirm: Vec<f64> = samples
            .iter()
            .filter_map(|&(_, l, index)| Some(l - confirm_by_index.get(index as usize)?))
            .collect();
        // Messages due while the publisher was still saturating both cores, and the rest.
        let (mut during, mut after) = due_while_and_after(samples, scheduled.ended_us);
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
        if self.worst > 0 {
            let mut by_lateness = samples.to_vec();
            by_lateness.sort_by(|a, b| b.1.total_cmp(&a.1));
            for (due, late, _) in by_lateness.iter().take(self.worst) {
                println!(
                    "    late {late:.2} ms, due at +{:.3} s",
                    due.saturating_sub(scheduled.started_us) as f64 / 1e6
                );
            }
        }
        Ok(())
    }

    /// Writes every sample to the `--dump` CSV, if one was asked for.
    fn dump_samples(&self, started_us: u64, samples: &[Sample]) -> Result<(), Error> {
        if self.dump.is_empty() {
            return Ok(());
        }
        use std::io::Write;
        let mut file = std::io::BufWriter::new(std::fs::File::create(&self.dump)?);
        for (due, late, index) in samples {
            writeln!(file, "{},{late:.3},{index}", due.saturating_sub(started_us))?;
        }
        file.flush()?;
        Ok(())
    }
}

/// The lateness of the samples due before `ended_us` (publishing still running), and of the
/// rest.
fn due_while_and_after(samples: &[Sample], ended_us: u64) -> (Vec<f64>, Vec<f64>) {
    let during = samples
        .iter()
        .filter(|&&(due, _, _)| due < ended_us)
        .map(|&(_, l, _)| l)
        .collect();
    let after = samples
        .iter()
        .filter(|&&(due, _, _)| due >= ended_us)
        .map(|&(_, l, _)| l)
        .collect();
    (during, after)
}

/// Collect: the consumer's reading half gets its own thread and runtime, so that its time
/// stamps do not wait behind the publisher's encoding work. It returns the samples of up to
/// `messages` releases, fewer if the connection ends or stays idle past the longest delay and
/// half a minute.
fn collect(
    mut reader: OwnedReadHalf,
    mut buf: BytesMut,
    messages: u64,
    max_delay: u64,
) -> std::thread::JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("consumer runtime");
        runtime.block_on(async move {
            let mut lateness_ms: Vec<Sample> = Vec::with_capacity(messages as usize);
            let idle_limit = std::time::Duration::from_millis(max_delay + 30_000);
            while (lateness_ms.len() as u64) < messages {
                let read = tokio::time::timeout(idle_limit, reader.read_buf(&mut buf)).await;
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
    })
}

/// Encodes the publishes: each body carries its due time and its index in publish order.
struct Encoder<'a> {
    exchange: &'a str,
    /// Reused per publish (no allocation).
    props: BytesMut,
    body: Vec<u8>,
}

impl<'a> Encoder<'a> {
    fn new(exchange: &'a str, size: usize) -> Self {
        Encoder {
            exchange,
            props: BytesMut::new(),
            body: vec![0u8; size],
        }
    }

    /// Appends one publish (method, header, body) delayed by `delay` ms to `out`.
    fn push(&mut self, out: &mut BytesMut, delay: u64, due_us: u64, index: u64) {
        let mut headers = FieldTable::new();
        headers.insert("x-delay", FieldValue::I64(delay as i64));
        self.props.clear();
        BasicProperties {
            headers: Some(headers),
            ..Default::default()
        }
        .encode(&mut self.props);
        encode_method(
            out,
            1,
            &Method::BasicPublish(BasicPublish {
                exchange: self.exchange.into(),
                routing_key: ShortStr::from_static("k"),
                ..Default::default()
            }),
        );
        self.body[..8].copy_from_slice(&due_us.to_be_bytes());
        self.body[8..16].copy_from_slice(&index.to_be_bytes());
        encode_header_raw(out, 1, 60, self.body.len() as u64, &self.props);
        encode_body(out, 1, &self.body);
    }
}

/// The publisher's confirms: how many came, and how long each message waited for its own.
struct Confirms {
    confirmed: u64,
    /// Publish time stamps (µs) of unconfirmed messages, oldest first.
    unconfirmed_since: VecDeque<u64>,
    /// Publish to confirm of each confirmed message (ms), in publish order.
    confirm_ms: Vec<f64>,
}

impl Confirms {
    fn new(messages: u64) -> Self {
        Confirms {
            confirmed: 0,
            unconfirmed_since: VecDeque::new(),
            confirm_ms: Vec::with_capacity(messages as usize),
        }
    }

    /// Every message up to delivery tag `tag` is confirmed now.
    fn up_to(&mut self, tag: u64) {
        let now = wall_us();
        while self.confirmed < tag {
            if let Some(stamp) = self.unconfirmed_since.pop_front() {
                self.confirm_ms
                    .push(now.saturating_sub(stamp) as f64 / 1000.0);
            }
            self.confirmed += 1;
        }
    }

    /// Reads a frame's worth of confirms (and every one already buffered); a nack or a close
    /// ends the run.
    async fn read(
        &mut self,
        publisher: &mut RawClient,
        published: u64,
        messages: u64,
    ) -> Result<(), Error> {
        let frame = publisher.next_frame().await?;
        match frame.payload {
            FramePayload::Method(Method::BasicAck(ack)) => self.up_to(ack.delivery_tag),
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
                self.up_to(ack.delivery_tag);
            }
        }
        if publisher.buf.is_empty() && published > self.confirmed && published == messages {
            let _ = publisher.reader.read_buf(&mut publisher.buf).await;
        }
        Ok(())
    }
}
