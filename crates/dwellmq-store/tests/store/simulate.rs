//! The deterministic simulation (`sim/mod.rs`) on fixed seeds: each runs a few hundred steps
//! with faults and power cuts and checks every recovery against its model. Longer runs:
//! `cargo run --release -p dwellmq-store --example simulate -- --seconds 3600`.

use crate::sim;

#[test]
fn fixed_seeds_keep_every_acknowledged_record_through_faults_and_power_cuts() {
    let root = std::env::temp_dir();
    let mut total = sim::Report::default();
    for seed in 1..=6u64 {
        total.add(&sim::Sim::new(seed, &root).run(150));
    }
    // The seeds do reach the paths they are for.
    assert!(total.power_cuts >= 30, "{total:?}");
    assert!(total.cuts_in_flight >= 5, "{total:?}");
    assert!(total.commits_failed >= 20, "{total:?}");
    assert!(total.records_checked >= 500, "{total:?}");
    assert!(total.stream_records >= 100, "{total:?}");
    let disk = total.faults;
    assert!(
        disk.torn_pages > 0 && disk.cut_pages_written > 0,
        "{total:?}"
    );
    assert!(disk.failed_sync_pages_written > 0, "{total:?}");
    assert!(disk.failed_sync_pages_lost > 0, "{total:?}");
    assert!(disk.read_errors > 0, "{total:?}");
}
