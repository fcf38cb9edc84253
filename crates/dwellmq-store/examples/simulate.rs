//! Long runs of the store's deterministic simulation (see `tests/sim/mod.rs`):
//!
//!     cargo run --release -p dwellmq-store --example simulate -- --seconds 3600 [--first-seed N]
//!
//! Runs seed after seed (500 steps each) until the time is up; a failed check panics with
//! the seed, which `--first-seed N --seeds 1` replays. Odd seeds commit in one phase, even
//! ones in two (see `tests/sim/mod.rs`).

#[path = "../tests/sim/mod.rs"]
mod sim;

use std::time::{Duration, Instant};

fn main() {
    let mut seconds = 60u64;
    let mut first_seed = 1u64;
    let mut seeds = u64::MAX;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| usage(&arg))
        };
        match arg.as_str() {
            "--seconds" => seconds = value(),
            "--first-seed" => first_seed = value(),
            "--seeds" => seeds = value(),
            other => usage(other),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let root = std::env::temp_dir();
    let mut total = sim::Report::default();
    let mut ran = 0u64;
    let started = Instant::now();
    for seed in (first_seed..).take(seeds.min(u64::MAX - first_seed) as usize) {
        if Instant::now() >= deadline {
            break;
        }
        let report = std::panic::catch_unwind(|| sim::Sim::new(seed, &root).run(500))
            .unwrap_or_else(|_| {
                eprintln!("seed {seed} failed: replay with --first-seed {seed} --seeds 1");
                std::process::exit(1);
            });
        ran += 1;
        total.add(&report);
    }
    let f = total.faults;
    println!(
        "{ran} seeds from {first_seed} in {:.0} s: {} steps, {} commits ok, {} failed, {} power cuts \
         ({} in a commit's fsync), {} records checked ({} stream records); disk: {} failed fsyncs (pages written \
         {} / lost {}), {} pages written at cuts ({} torn, {} lost), {} read errors, {} lost \
         pages read; no violation",
        started.elapsed().as_secs_f64(),
        total.steps,
        total.commits_ok,
        total.commits_failed,
        total.power_cuts,
        total.cuts_in_flight,
        total.records_checked,
        total.stream_records,
        f.failed_syncs,
        f.failed_sync_pages_written,
        f.failed_sync_pages_lost,
        f.cut_pages_written,
        f.torn_pages,
        f.cut_pages_lost,
        f.read_errors,
        f.lost_page_reads,
    );
}

fn usage(arg: &str) -> ! {
    eprintln!(
        "unexpected argument {arg}; usage: simulate [--seconds N] [--first-seed N] [--seeds N]"
    );
    std::process::exit(2);
}
