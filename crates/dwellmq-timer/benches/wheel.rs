//! Timing-wheel throughput. Criterion reports time per iteration; the 1M
//! benchmarks declare 1M elements of throughput, so ns per entry is the
//! iteration time divided by 1M (or 1e9 / the reported elements per second).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode, Throughput};
use dwellmq_timer::{Fired, TimerWheel};

const ENTRIES: u64 = 1_000_000;
const MIN_DELAY_MS: u64 = 1_000;
const MAX_DELAY_MS: u64 = 60_000;
/// Realistic epoch-millis start, so digits above level 0 are not all zero.
const START_MS: u64 = 1_700_000_000_000;

/// splitmix64: deterministic, dependency-free delays.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform over `MIN_DELAY_MS..=MAX_DELAY_MS` (modulo bias is
    /// irrelevant here).
    fn delay_ms(&mut self) -> u64 {
        MIN_DELAY_MS + self.next_u64() % (MAX_DELAY_MS - MIN_DELAY_MS + 1)
    }
}

fn due_times() -> Vec<u64> {
    let mut rng = Rng(42);
    (0..ENTRIES).map(|_| START_MS + rng.delay_ms()).collect()
}

fn filled_wheel(dues: &[u64]) -> TimerWheel<u64> {
    let mut wheel = TimerWheel::new(START_MS);
    for (i, &due) in dues.iter().enumerate() {
        wheel.insert(due, i as u64);
    }
    wheel
}

/// One insert plus one cancel, in a wheel already holding 100k timers so
/// the slab and slot lists are warm rather than empty.
fn insert_cancel(c: &mut Criterion) {
    let mut wheel = filled_wheel(&due_times()[..100_000]);
    let mut rng = Rng(7);
    c.bench_function("insert+cancel (100k pending)", |b| {
        b.iter(|| {
            let key = wheel.insert(START_MS + rng.delay_ms(), 0u64);
            black_box(wheel.cancel(black_box(key)))
        });
    });
}

fn one_million(c: &mut Criterion) {
    let dues = due_times();
    let mut group = c.benchmark_group("1M timers, delays uniform 1-60 s");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(ENTRIES));

    group.bench_function("insert", |b| {
        b.iter_batched(
            || (TimerWheel::new(START_MS), dues.clone()),
            |(mut wheel, dues)| {
                for (i, due) in dues.into_iter().enumerate() {
                    wheel.insert(due, i as u64);
                }
                wheel
            },
            BatchSize::PerIteration,
        );
    });

    group.bench_function("advance in 1 ms steps", |b| {
        b.iter_batched(
            || filled_wheel(&dues),
            |mut wheel| {
                let mut fired: Vec<Fired<u64>> = Vec::with_capacity(1_024);
                let mut count = 0usize;
                for now in START_MS..=START_MS + MAX_DELAY_MS {
                    wheel.advance(now, &mut fired);
                    count += fired.len();
                    fired.clear();
                }
                assert_eq!(count, ENTRIES as usize);
                wheel
            },
            BatchSize::PerIteration,
        );
    });

    group.bench_function("insert then advance in 1 ms steps", |b| {
        b.iter_batched(
            || dues.clone(),
            |dues| {
                let mut wheel = TimerWheel::new(START_MS);
                for (i, due) in dues.into_iter().enumerate() {
                    wheel.insert(due, i as u64);
                }
                let mut fired = 0usize;
                for now in START_MS..=START_MS + MAX_DELAY_MS {
                    wheel.advance_with(now, |_, value| {
                        black_box(value);
                        fired += 1;
                    });
                }
                assert_eq!(fired, ENTRIES as usize);
                wheel
            },
            BatchSize::PerIteration,
        );
    });
    group.finish();
}

criterion_group!(benches, insert_cancel, one_million);
criterion_main!(benches);
