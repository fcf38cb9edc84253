//! Group-commit throughput and start-up time of the store.
//!
//! ```text
//! cargo run --release -p dwellmq-store --example store_bench -- [DIR] [MESSAGES] [HELD]
//! ```
//!
//! 1. Persistent messages, 16 B and 1 KiB bodies: 4 producers, each keeping at most 256
//!    unconfirmed (a publisher-confirm window), one submission per message; every confirmed
//!    message is then forgotten (consumed and acked), as on a queue that keeps up. Reports
//!    messages and commits per second.
//! 2. `HELD` messages (100-byte bodies) held by a delayed exchange, due over 7 days: the time to
//!    store them, then the time for a fresh open to have definitions, counters and the first
//!    batch of the delayed index (what a broker needs before accepting connections), and for
//!    a scan of the whole index (keys only).
//!
//! `MESSAGES` or `HELD` 0 skips that part. Runs on `DIR` (default: a directory under the system's temp dir), which must be on the disk
//! to measure; it is removed at the end.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use dwellmq_codec::BasicProperties;
use dwellmq_core::{Body, Message, PackedMessage};
use dwellmq_store::{DeadlineId, ExchangeDef, Op, Payload, Store, StoreOptions, VhostDef};
use parking_lot::{Condvar, Mutex};

const PRODUCERS: u64 = 4;
const WINDOW: usize = 256;

fn message(size: usize) -> Arc<Message> {
    let properties = BasicProperties {
        delivery_mode: Some(2),
        ..Default::default()
    };
    Message::new(
        "".into(),
        "bench".into(),
        properties,
        Body::Single(Bytes::from(vec![b'x'; size])),
        None,
    )
}

/// A confirm window: at most `WINDOW` submissions in flight.
struct Window {
    in_flight: Mutex<usize>,
    freed: Condvar,
}

impl Window {
    fn acquire(&self) {
        let mut n = self.in_flight.lock();
        while *n >= WINDOW {
            self.freed.wait(&mut n);
        }
        *n += 1;
    }
    fn release(&self) {
        *self.in_flight.lock() -= 1;
        self.freed.notify_one();
    }
    fn drain(&self) {
        let mut n = self.in_flight.lock();
        while *n > 0 {
            self.freed.wait(&mut n);
        }
    }
}

fn group_commit(dir: &Path, size: usize, messages: u64, quick_repair: bool) {
    let _ = std::fs::remove_dir_all(dir);
    let options = StoreOptions {
        quick_repair,
        ..StoreOptions::default()
    };
    let store = Arc::new(Store::open_with(dir, options).expect("open"));
    let per_producer = messages / PRODUCERS;
    let msg = message(size);
    let started = Instant::now();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|queue| {
            let store = store.clone();
            let msg = msg.clone();
            std::thread::spawn(move || {
                let window = Arc::new(Window {
                    in_flight: Mutex::new(0),
                    freed: Condvar::new(),
                });
                for seq in 0..per_producer {
                    window.acquire();
                    let (w, s) = (window.clone(), store.clone());
                    let op = Op::Persist {
                        queue,
                        seq,
                        expires_at_ms: 0,
                        delivered: false,
                        message: Payload::Message(msg.clone()),
                    };
                    store.submit(vec![op], move |outcome| {
                        outcome.expect("commit");
                        // Confirmed, then consumed and acked.
                        s.submit_detached(vec![Op::Forget { queue, seq }]);
                        w.release();
                    });
                }
                window.drain();
            })
        })
        .collect();
    for p in producers {
        p.join().expect("producer");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let stats = store.stats();
    let total = per_producer * PRODUCERS;
    println!(
        "persist {size:>5} B, quick_repair={quick_repair}: {:>9.0} msg/s confirmed, {:>6.0} commits/s, {:>6.1} submissions/commit, {} elided",
        total as f64 / elapsed,
        stats.commits as f64 / elapsed,
        stats.submissions as f64 / stats.commits.max(1) as f64,
        stats.ops_elided,
    );
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
}

fn held(dir: &Path, count: u64) {
    let _ = std::fs::remove_dir_all(dir);
    let store = Store::open(dir).expect("open");
    store
        .write(vec![
            Op::PutVhost(VhostDef {
                name: "/".into(),
                metadata: vec![],
            }),
            Op::PutExchange(ExchangeDef {
                vhost: "/".into(),
                name: "delayed".into(),
                kind: "x-delayed-message".into(),
                auto_delete: false,
                internal: false,
                arguments: vec![],
                declared_by: None,
            }),
        ])
        .expect("definitions");
    let packed = PackedMessage::pack(&message(100));
    let now = 1_800_000_000_000u64;
    let week = 7 * 24 * 3600 * 1000u64;
    let started = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel::<dwellmq_store::Completion>();
    let batch: u64 = std::env::var("HELD_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    let window: u64 = std::env::var("HELD_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let mut submitted = 0;
    let mut done = 0;
    for first in (0..count).step_by(batch as usize) {
        // A publisher window: at most 64 batches (64,000 messages) unconfirmed.
        while submitted - done >= window {
            rx.recv().expect("completion").expect("commit");
            done += 1;
        }
        let ops = (first..(first + batch).min(count))
            .map(|seq| Op::Hold {
                held_at_ms: now,
                // Spread over a week in a scrambled order, as publishes with random delays are.
                id: DeadlineId {
                    due_ms: now + (seq.wrapping_mul(2_654_435_761) % week),
                    seq,
                },
                vhost: "/".into(),
                exchange: "delayed".into(),
                message: Payload::Packed(packed.clone()),
            })
            .collect();
        let tx = tx.clone();
        store.submit(ops, move |r| {
            let _ = tx.send(r);
        });
        submitted += 1;
    }
    for _ in done..submitted {
        rx.recv().expect("completion").expect("commit");
    }
    let fill = started.elapsed().as_secs_f64();
    let commits = store.stats().commits;
    store.close();
    let size = std::fs::metadata(dir.join(dwellmq_store::DB_FILE))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "held {count} x 100 B: stored in {fill:.1} s ({:.0} msg/s, {commits} commits), file {} MiB",
        count as f64 / fill,
        size >> 20
    );

    // Drop what the page cache holds of the file, when allowed, for a cold start.
    let cold = drop_caches();
    let started = Instant::now();
    let store = Store::open(dir).expect("reopen");
    let opened = started.elapsed();
    let snapshot = store.snapshot().expect("snapshot");
    let recovery = snapshot.recovery().expect("recovery");
    let first = snapshot.delayed_ids(None, 4096).expect("index");
    let ready = started.elapsed();
    assert_eq!(recovery.delayed_count, count);
    assert_eq!(first.len() as u64, count.min(4096));
    let mut scanned = 0u64;
    let mut after = None;
    loop {
        let page = snapshot.delayed_ids(after, 65_536).expect("index");
        let Some(&last) = page.last() else { break };
        scanned += page.len() as u64;
        after = Some(last);
    }
    let scan = started.elapsed();
    assert_eq!(scanned, count);
    println!(
        "start with {count} held ({}): open {:.1} ms, definitions + counters + first 4096 ids {:.1} ms, whole index scanned {:.0} ms",
        if cold { "cold page cache" } else { "warm page cache" },
        opened.as_secs_f64() * 1e3,
        ready.as_secs_f64() * 1e3,
        scan.as_secs_f64() * 1e3,
    );
    drop(snapshot);
    drop(store);
    let _ = std::fs::remove_dir_all(dir);
}

fn drop_caches() -> bool {
    std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("dwellmq-store-bench"));
    let messages: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let held_count: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    if messages > 0 {
        for size in [16, 1024] {
            group_commit(&dir, size, messages, true);
        }
        group_commit(&dir, 1024, messages, false);
    }
    if held_count > 0 {
        held(&dir, held_count);
    }
}
