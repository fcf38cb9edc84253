//! A stream's append and replay rates through core's `StreamState` and the store, without a
//! network: what the broker's stream path costs below its sockets.
//!
//! ```text
//! cargo run --release -p dwellmq-store --example stream_bench -- [DIR] [MESSAGES]
//! ```
//!
//! 1. Append `MESSAGES` (default 1,000,000) 100-octet messages with confirms: one publisher
//!    keeping at most 256 unconfirmed, one submission per message (as the shell submits an
//!    `Append`), the stream synced with its progress as confirms come back.
//! 2. Replay from `first` by one consumer with prefetch 1,000 (reads from snapshots, every
//!    delivery made into its message with the `x-stream-offset` header, acked a window at a
//!    time): rate, and the peak RSS above what it was before.
//! 3. Ten consumers replaying the same log at once, each on its own thread: rate, and the peak
//!    RSS growth.
//!
//! Known defect (issue 37): the replay of step 2 does not finish on the current tree (the
//! append completes); run it under `timeout` until that is found.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use dwellmq_codec::BasicProperties;
use dwellmq_core::queue::{ChannelCredit, ConsumerCredit};
use dwellmq_core::stream::{
    OffsetSpec, StreamConsumerSlot, StreamEffect, StreamEffects, StreamProgress, StreamSettings,
    StreamState,
};
use dwellmq_core::{Body, Message};
use dwellmq_store::{Op, Payload, Store};
use parking_lot::{Condvar, Mutex};

const STREAM: u64 = 1;
const WINDOW: usize = 256;
const PREFETCH: u32 = 1000;

type State = Mutex<StreamState<u64>>;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Samples RSS every 5 ms until dropped; keeps the peak.
struct PeakRss {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl PeakRss {
    fn start() -> PeakRss {
        let peak = Arc::new(AtomicU64::new(rss_kib()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_kib(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        PeakRss {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

struct Window {
    in_flight: Mutex<usize>,
    freed: Condvar,
}

fn append(store: &Arc<Store>, state: &State, progress: &Arc<StreamProgress>, messages: u64) {
    let body = Message::new(
        "".into(),
        "bench".into(),
        BasicProperties::default(),
        Body::Single(Bytes::from(vec![b'x'; 100])),
        None,
    );
    let window = Arc::new(Window {
        in_flight: Mutex::new(0),
        freed: Condvar::new(),
    });
    let mut fx = StreamEffects::new();
    let started = Instant::now();
    for _ in 0..messages {
        {
            let mut n = window.in_flight.lock();
            while *n >= WINDOW {
                window.freed.wait(&mut n);
            }
            *n += 1;
        }
        let mut state = state.lock();
        state.sync(progress, now_ms(), &mut fx);
        state.publish(Arc::clone(&body), now_ms(), &mut fx);
        for effect in fx.drain() {
            match effect {
                StreamEffect::Append {
                    offset,
                    timestamp_ms,
                    segment,
                    chunk,
                    message,
                } => {
                    let (progress, window) = (progress.clone(), window.clone());
                    let op = Op::StreamAppend {
                        stream: STREAM,
                        offset,
                        timestamp_ms,
                        segment,
                        chunk,
                        message: Payload::Message(message),
                    };
                    store.submit(vec![op], move |done| {
                        progress.completed(offset, done.is_ok());
                        *window.in_flight.lock() -= 1;
                        window.freed.notify_one();
                    });
                }
                StreamEffect::Truncate { before_offset } => {
                    store.submit_detached(vec![Op::StreamTruncate {
                        stream: STREAM,
                        before_offset,
                    }])
                }
                _ => {}
            }
        }
    }
    let mut n = window.in_flight.lock();
    while *n > 0 {
        window.freed.wait(&mut n);
    }
    drop(n);
    state.lock().sync(progress, now_ms(), &mut fx);
    let secs = started.elapsed().as_secs_f64();
    let stats = store.stats();
    println!(
        "append: {messages} x 100 B with confirms (window {WINDOW}) in {secs:.2} s: {:.0} msg/s, \
         {} commits",
        messages as f64 / secs,
        stats.commits
    );
}

/// One consumer replays the whole log from `first`, on this thread. Returns what it got.
fn replay(store: &Store, state: &State, id: u64) -> u64 {
    let channel = Arc::new(ChannelCredit::new(Arc::default()));
    let credit = Arc::new(ConsumerCredit::new(channel, PREFETCH, false));
    let mut fx = StreamEffects::new();
    let end = state.lock().committed_end();
    state
        .lock()
        .consume(
            StreamConsumerSlot {
                id,
                handle: id,
                credit: credit.clone(),
            },
            OffsetSpec::First,
            now_ms(),
            &mut fx,
        )
        .expect("attached");
    let mut delivered = 0u64;
    let mut last = None;
    loop {
        let mut reads = Vec::new();
        let mut got = 0u32;
        for effect in fx.drain() {
            match effect {
                StreamEffect::Read(request) => reads.push(request),
                StreamEffect::Deliver { delivery, .. } => {
                    last = Some(delivery.offset);
                    let message = delivery.into_message().expect("unpacks");
                    std::hint::black_box(&message.properties_encoded);
                    got += 1;
                }
                _ => {}
            }
        }
        delivered += u64::from(got);
        if got > 0 {
            // The consumer acks what it got.
            credit.settled(got);
            state.lock().settled(id, now_ms(), &mut fx);
        }
        for request in reads {
            let result = store
                .snapshot()
                .and_then(|s| s.stream_read(STREAM, &request))
                .expect("read");
            state.lock().read_done(result, now_ms(), &mut fx);
        }
        if fx.is_empty() && last.is_some_and(|o| o + 1 >= end) {
            break;
        }
        if fx.is_empty() {
            state.lock().settled(id, now_ms(), &mut fx);
            if fx.is_empty() {
                break;
            }
        }
    }
    state.lock().cancel(id);
    delivered
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::temp_dir().join(format!("stream-bench-{}", std::process::id()))
        });
    let messages: u64 = args
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(Store::open(&dir).expect("open"));
    let state: Arc<State> = Arc::new(Mutex::new(StreamState::new(StreamSettings::default())));
    let progress = Arc::new(StreamProgress::default());
    append(&store, &state, &progress, messages);
    println!(
        "log: {} messages, {} octets",
        state.lock().message_count(),
        state.lock().log_bytes()
    );

    let before = rss_kib();
    let peak = PeakRss::start();
    let started = Instant::now();
    let got = replay(&store, &state, 1);
    let secs = started.elapsed().as_secs_f64();
    let peak = peak.finish();
    println!(
        "replay from first, 1 consumer, prefetch {PREFETCH}: {got} in {secs:.2} s: {:.0} msg/s; \
         RSS {} MiB before, peak +{} MiB",
        got as f64 / secs,
        before / 1024,
        peak.saturating_sub(before) / 1024
    );

    let before = rss_kib();
    let peak = PeakRss::start();
    let started = Instant::now();
    let threads: Vec<_> = (0..10u64)
        .map(|i| {
            let (store, state) = (store.clone(), state.clone());
            std::thread::spawn(move || replay(&store, &state, 100 + i))
        })
        .collect();
    let got: u64 = threads
        .into_iter()
        .map(|t| t.join().expect("replayed"))
        .sum();
    let secs = started.elapsed().as_secs_f64();
    let peak = peak.finish();
    println!(
        "replay from first, 10 consumers at once: {got} in {secs:.2} s: {:.0} msg/s in all; \
         RSS {} MiB before, peak +{} MiB",
        got as f64 / secs,
        before / 1024,
        peak.saturating_sub(before) / 1024
    );
    match Arc::try_unwrap(store) {
        Ok(store) => store.close(),
        Err(_) => unreachable!("every thread is done"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
