//! Measures candidate layouts for messages held by delayed exchanges with redb directly: holds
//! due at random times over a week, committed in groups as the writer does, then the file's
//! size and each table's leaf pages. `BucketRecordsAndLog` is the shape format 4 chose
//! (DESIGN.md, "Messages held by delayed exchanges"; the store sizes its buckets per hold, here
//! they are fixed); `BucketIndexAndLog` was format 3's; the others are what they were chosen
//! against, and `LogOnly` what the bodies cost alone.
//!
//! ```text
//! cargo run --release -p dwellmq-store --example held_layouts -- DIR MESSAGES PER_COMMIT
//! LAYOUT=BucketIndex cargo run --release -p dwellmq-store --example held_layouts -- DIR 300000 2000
//! ```

use std::time::Instant;

use redb::{Database, Durability, ReadableDatabase, ReadableTableMetadata, TableDefinition};

type Bin = TableDefinition<'static, &'static [u8], &'static [u8]>;
const HELD: Bin = TableDefinition::new("held");
const BODIES: Bin = TableDefinition::new("bodies");
const WEEK: u64 = 7 * 24 * 3600 * 1000;
const NOW: u64 = 1_800_000_000_000;
const VALUE: usize = 140;

#[derive(Clone, Copy, Debug)]
enum Layout {
    /// Today: `exchange ‖ due ‖ seq` → value.
    DueKeyed,
    /// `exchange ‖ due bucket ‖ seq` → `due ‖ value`.
    Bucketed(u32),
    /// `exchange ‖ due ‖ seq` → () and `seq` → value.
    IndexAndLog,
    /// `exchange ‖ due bucket ‖ seq` → due and `seq` → value.
    BucketIndexAndLog(u32),
    /// The same, with each commit's index entries inserted in key order.
    SortedBucketIndexAndLog(u32),
    /// `seq` → value and, per commit, one index record per bucket it touched:
    /// `exchange ‖ due bucket ‖ first seq` → `(seq, due)` of each of its holds in that bucket.
    BucketRecordsAndLog(u32),
    /// Only `seq` → value: what appending the bodies costs alone.
    LogOnly,
}

fn run(dir: &std::path::Path, layout: Layout, count: u64, per_commit: u64) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("held.redb");
    let db = Database::builder().create(&path).unwrap();
    let value = vec![b'x'; VALUE];
    let started = Instant::now();
    let mut seq = 0u64;
    while seq < count {
        let mut tx = db.begin_write().unwrap();
        tx.set_durability(Durability::Immediate).unwrap();
        {
            let mut held = tx.open_table(HELD).unwrap();
            let mut bodies = tx.open_table(BODIES).unwrap();
            let mut index: Vec<(Vec<u8>, u64)> = Vec::new();
            let mut records: std::collections::BTreeMap<u32, Vec<u8>> = Default::default();
            for _ in 0..per_commit.min(count - seq) {
                let due = NOW + (seq.wrapping_mul(2_654_435_761) % WEEK);
                let mut key = Vec::with_capacity(20);
                key.extend_from_slice(&1u32.to_be_bytes());
                match layout {
                    Layout::DueKeyed => {
                        key.extend_from_slice(&due.to_be_bytes());
                        key.extend_from_slice(&seq.to_be_bytes());
                        held.insert(key.as_slice(), value.as_slice()).unwrap();
                    }
                    Layout::Bucketed(shift) => {
                        key.extend_from_slice(&((due >> shift) as u32).to_be_bytes());
                        key.extend_from_slice(&seq.to_be_bytes());
                        let mut v = due.to_be_bytes().to_vec();
                        v.extend_from_slice(&value);
                        held.insert(key.as_slice(), v.as_slice()).unwrap();
                    }
                    Layout::IndexAndLog => {
                        key.extend_from_slice(&due.to_be_bytes());
                        key.extend_from_slice(&seq.to_be_bytes());
                        held.insert(key.as_slice(), [].as_slice()).unwrap();
                        bodies
                            .insert(seq.to_be_bytes().as_slice(), value.as_slice())
                            .unwrap();
                    }
                    Layout::SortedBucketIndexAndLog(shift) => {
                        key.extend_from_slice(&((due >> shift) as u32).to_be_bytes());
                        key.extend_from_slice(&seq.to_be_bytes());
                        index.push((key, due));
                        bodies
                            .insert(seq.to_be_bytes().as_slice(), value.as_slice())
                            .unwrap();
                    }
                    Layout::BucketRecordsAndLog(shift) => {
                        let entries = records.entry((due >> shift) as u32).or_default();
                        entries.extend_from_slice(&seq.to_be_bytes());
                        entries
                            .extend_from_slice(&((due & ((1 << shift) - 1)) as u32).to_be_bytes());
                        bodies
                            .insert(seq.to_be_bytes().as_slice(), value.as_slice())
                            .unwrap();
                    }
                    Layout::LogOnly => {
                        bodies
                            .insert(seq.to_be_bytes().as_slice(), value.as_slice())
                            .unwrap();
                    }
                    Layout::BucketIndexAndLog(shift) => {
                        key.extend_from_slice(&((due >> shift) as u32).to_be_bytes());
                        key.extend_from_slice(&seq.to_be_bytes());
                        held.insert(key.as_slice(), due.to_be_bytes().as_slice())
                            .unwrap();
                        bodies
                            .insert(seq.to_be_bytes().as_slice(), value.as_slice())
                            .unwrap();
                    }
                }
                seq += 1;
            }
            for (bucket, entries) in records {
                let mut key = 1u32.to_be_bytes().to_vec();
                key.extend_from_slice(&bucket.to_be_bytes());
                key.extend_from_slice(&entries[..8]);
                held.insert(key.as_slice(), entries.as_slice()).unwrap();
            }
            index.sort_unstable();
            for (key, due) in index {
                held.insert(key.as_slice(), due.to_be_bytes().as_slice())
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let took = started.elapsed().as_secs_f64();
    let size = std::fs::metadata(&path).unwrap().len();
    let tx = db.begin_read().unwrap();
    let held = tx.open_table(HELD).unwrap().stats().unwrap();
    let bodies = tx.open_table(BODIES).unwrap().stats().unwrap();
    let leaves = format!(
        "held {} leaves {} stored {} fragmented, bodies {} leaves {} stored {} fragmented",
        held.leaf_pages(),
        held.stored_bytes(),
        held.fragmented_bytes(),
        bodies.leaf_pages(),
        bodies.stored_bytes(),
        bodies.fragmented_bytes()
    );
    println!(
        "{layout:?}: {count} holds, {per_commit} per commit: {:.0} msg/s, file {:.1} MiB = {:.0} B/msg ({leaves})",
        count as f64 / took,
        size as f64 / (1 << 20) as f64,
        size as f64 / count as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(&args[1]);
    let count: u64 = args[2].parse().unwrap();
    let per_commit: u64 = args[3].parse().unwrap();
    let only = std::env::var("LAYOUT").ok();
    for layout in [
        Layout::DueKeyed,
        Layout::Bucketed(22),
        Layout::IndexAndLog,
        Layout::BucketIndexAndLog(22),
        Layout::SortedBucketIndexAndLog(22),
        Layout::Bucketed(26),
        Layout::BucketRecordsAndLog(22),
        Layout::LogOnly,
    ] {
        if only
            .as_deref()
            .is_some_and(|o| !format!("{layout:?}").starts_with(o))
        {
            continue;
        }
        run(&dir, layout, count, per_commit);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
