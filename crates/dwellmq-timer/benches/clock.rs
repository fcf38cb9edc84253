//! The cost of reading the broker's clock, which the hot path does up to twice per message:
//! the anchored system clock (monotonic time added to the wall clock read at start) against
//! reading the wall clock itself, as the broker did before.

use std::hint::black_box;
use std::time::{SystemTime, UNIX_EPOCH};

use criterion::{criterion_group, criterion_main, Criterion};
use dwellmq_timer::{ManualClock, SharedClock, SystemClock};

/// What `SystemClock::now_ms` was: the wall clock read on every call.
fn wall_clock_ms() -> u64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(since_epoch) => u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX),
        Err(_) => 0,
    }
}

fn now_ms(c: &mut Criterion) {
    let mut group = c.benchmark_group("now_ms");
    group.bench_function("wall clock read (before)", |b| {
        b.iter(|| black_box(wall_clock_ms()))
    });
    let system: SharedClock = std::sync::Arc::new(SystemClock::new());
    group.bench_function("anchored system clock (now)", |b| {
        b.iter(|| black_box(black_box(&system).now_ms()))
    });
    let manual: SharedClock = std::sync::Arc::new(ManualClock::new(1_700_000_000_000));
    group.bench_function("manual clock", |b| {
        b.iter(|| black_box(black_box(&manual).now_ms()))
    });
    group.finish();
}

criterion_group!(benches, now_ms);
criterion_main!(benches);
