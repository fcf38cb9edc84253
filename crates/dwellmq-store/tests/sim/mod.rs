//! A deterministic simulation of the store under the disk fault model, failing as real disks
//! fail (`DiskModel::realistic`: at a power cut some unsynced pages reach the disk, some torn
//! at a 512-octet sector; a failed fsync wrote some of its pages first; single reads fail).
//! One seed drives persists, forgets, delayed holds, releases (a queue copy and the hold's
//! removal in one group), dead-letterings (a removal and a copy in one submission, into a
//! queue or a delayed exchange), stream appends and retention truncations (`streams.rs`),
//! failing writes, fsyncs (all of them for a while, or one at a chosen point of a commit),
//! reads and a full disk, and power cuts, between commits or in the middle of one. Odd seeds commit in one phase (redb's recovery of a torn commit runs), even
//! ones in two (quick repair). After every power cut the store is opened on what the disk held
//! and checked against a model of what was acknowledged:
//! - every acknowledged message or hold not acknowledged gone is there, once, with its body;
//! - nothing acknowledged forgotten (or released) comes back;
//! - what was not acknowledged (a failed commit, or one in flight at the cut) is there whole
//!   or not at all: a release or dead-lettering never as the removal without the copy, or both;
//! - each delayed exchange's stored count and octets match what its index holds;
//! - each stream's index counts what its log holds, a truncation is there whole or not at
//!   all, and the offset a restart appends at is above every acknowledged one: no confirmed
//!   offset is lost (unless acknowledged truncated) and none is given again;
//! - the file opens and verifies, and the store never read a page the disk did not hold.
//!
//! Used by `tests/store/simulate.rs` (fixed seeds) and `examples/simulate.rs` (long runs).

#![allow(dead_code)]

mod check;
mod cut;
mod streams;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};

use dwellmq_store::faults::{DiskModel, FaultStats, Faults};
use dwellmq_store::{Completion, DeadlineId, Op, Payload, Store, StoreOptions};

/// splitmix64: small, fast, and the same on every platform.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// What the model expects of one record after a power cut.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// Acknowledged: it must be there, with this body.
    Must(Vec<u8>),
    /// Acknowledged gone: it must not be there.
    Gone,
    /// Its write was not acknowledged (it failed, or was in flight at the cut): it may be
    /// there, with this body, or not.
    May(Vec<u8>),
}

/// A record: a message in a queue (queue, seq), a held delayed message (seq), or a record of
/// a stream's log (stream, offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Message(u64, u64),
    Held(u64),
    Stream(u64, u64),
}

/// Two records of which exactly one must be there: a group whose commit was not acknowledged
/// is retried whole (or was in flight whole), so after a power cut either nothing of it or
/// all of it is on disk.
#[derive(Debug, Clone)]
struct OneOf {
    before: Key,
    after: Key,
    body: Vec<u8>,
}

/// What one run did, for its report.
#[derive(Debug, Default, Clone, Copy)]
pub struct Report {
    pub steps: u64,
    pub commits_ok: u64,
    pub commits_failed: u64,
    pub power_cuts: u64,
    /// Power cuts taken while a commit was in its fsync.
    pub cuts_in_flight: u64,
    pub records_checked: u64,
    /// Stream records found on disk at the restarts' checks.
    pub stream_records: u64,
    /// What the disk model did, over every generation of the run.
    pub faults: FaultStats,
}

impl Report {
    /// Adds `other`'s figures to these.
    pub fn add(&mut self, other: &Report) {
        self.steps += other.steps;
        self.commits_ok += other.commits_ok;
        self.commits_failed += other.commits_failed;
        self.power_cuts += other.power_cuts;
        self.cuts_in_flight += other.cuts_in_flight;
        self.records_checked += other.records_checked;
        self.stream_records += other.stream_records;
        add_faults(&mut self.faults, &other.faults);
    }
}

fn add_faults(to: &mut FaultStats, from: &FaultStats) {
    to.cut_pages_written += from.cut_pages_written;
    to.cut_pages_lost += from.cut_pages_lost;
    to.torn_pages += from.torn_pages;
    to.failed_syncs += from.failed_syncs;
    to.failed_sync_pages_written += from.failed_sync_pages_written;
    to.failed_sync_pages_lost += from.failed_sync_pages_lost;
    to.read_errors += from.read_errors;
    to.lost_page_reads += from.lost_page_reads;
}

/// One simulated run.
pub struct Sim {
    seed: u64,
    rng: Rng,
    root: PathBuf,
    generation: u64,
    dir: PathBuf,
    faults: Arc<Faults>,
    store: Option<Store>,
    records: BTreeMap<Key, Expect>,
    pairs: Vec<OneOf>,
    next_seq: u64,
    report: Report,
    /// The next commit is cut in flight: the fsync it waits in, from now (see `cut.rs`).
    cut_at_sync: Option<u64>,
    /// The image of the disk a cut in flight took.
    cut_image: Option<PathBuf>,
    /// The streams' model (see `streams.rs`).
    streams: streams::Streams,
}

const QUEUES: u64 = 3;

/// Delayed exchanges: holds go to the first, dead-letterings into the second.
const EXCHANGES: [&str; 2] = ["d", "dlx-delayed"];

impl Sim {
    /// A run of `seed` in a fresh directory under `root` (removed when done).
    pub fn new(seed: u64, root: &Path) -> Sim {
        let root = root.join(format!("sim-{seed}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut sim = Sim {
            seed,
            rng: Rng::new(seed),
            root,
            generation: 0,
            dir: PathBuf::new(),
            faults: Arc::new(Faults::default()),
            store: None,
            records: BTreeMap::new(),
            pairs: Vec::new(),
            next_seq: 1,
            report: Report::default(),
            cut_at_sync: None,
            cut_image: None,
            streams: streams::Streams::default(),
        };
        sim.generation = 1;
        sim.dir = sim.root.join("gen-1");
        std::fs::create_dir_all(&sim.dir).expect("a directory");
        sim.open_store("the first open");
        sim
    }

    /// Opens the store in the current generation's directory, on a fresh disk model.
    fn open_store(&mut self, when: &str) {
        let disk = DiskModel::realistic(self.seed.wrapping_mul(1_000_003) ^ self.generation);
        self.faults = Arc::new(Faults::with_model(disk));
        let store = Store::open_with(&self.dir, self.options())
            .unwrap_or_else(|e| panic!("seed {} {when}: the store does not open: {e}", self.seed));
        self.store = Some(store);
    }

    fn options(&self) -> StoreOptions {
        let mut options = dwellmq_store::faults::options(self.faults.clone());
        options.retry_interval = std::time::Duration::from_millis(20);
        // Odd seeds commit in one phase: a torn commit is found by redb's checksums.
        options.quick_repair = self.seed.is_multiple_of(2);
        options
    }

    fn store(&self) -> &Store {
        self.store.as_ref().expect("open")
    }

    /// Runs `steps` steps, then one last power cut and check.
    pub fn run(mut self, steps: u64) -> Report {
        for _ in 0..steps {
            self.step();
        }
        self.clear_faults();
        self.power_cut();
        self.absorb_fault_stats();
        let report = self.report;
        if let Some(store) = self.store.take() {
            store.close();
        }
        let _ = std::fs::remove_dir_all(&self.root);
        report
    }

    fn step(&mut self) {
        self.report.steps += 1;
        match self.rng.below(112) {
            0..=25 => self.persist(),
            26..=39 => self.forget(),
            40..=52 => self.hold(),
            53..=63 => self.release(),
            64..=69 => self.dead_letter(),
            70..=74 => self.dead_letter_to_delayed(),
            75..=88 => self.toggle_fault(),
            89..=94 => self.cut_in_flight(),
            95..=99 => self.power_cut(),
            100..=108 => self.stream_append(),
            _ => self.stream_truncate(),
        }
    }

    fn body(&mut self, seq: u64) -> Vec<u8> {
        let large = self.rng.chance(5);
        let len = 1 + self.rng.below(if large { 20_000 } else { 64 }) as usize;
        let mut body = seq.to_be_bytes().to_vec();
        body.resize(len.max(8), (seq % 251) as u8);
        body
    }

    fn payload(body: &[u8]) -> Payload {
        let message = dwellmq_core::Message::new(
            "".into(),
            "k".into(),
            dwellmq_codec::BasicProperties::default(),
            dwellmq_core::Body::Single(bytes::Bytes::copy_from_slice(body)),
            None,
        );
        Payload::Message(message)
    }

    /// Submits `submissions` (in one group when there are several) and waits for each:
    /// whether all were acknowledged (always `false` for a commit cut in flight, whose image
    /// may or may not hold it).
    fn commit(&mut self, submissions: Vec<Vec<Op>>) -> bool {
        let (tx, rx) = mpsc::channel::<Completion>();
        let count = submissions.len();
        if let Some(at) = self.cut_at_sync {
            self.faults.pause_after(at);
        }
        let syncs_before = self.faults.syncs.load(std::sync::atomic::Ordering::SeqCst);
        {
            let store = self.store.as_ref().expect("open");
            let _group = (count > 1).then(|| store.group());
            for ops in submissions {
                let tx = tx.clone();
                store.submit(ops, move |outcome| {
                    let _ = tx.send(outcome);
                });
            }
        }
        if let Some(at) = self.cut_at_sync.take() {
            self.cut_during_commit(&rx, count, syncs_before + at + 1);
            return false;
        }
        let mut ok = true;
        for _ in 0..count {
            ok &= rx.recv().expect("every submission completes").is_ok();
        }
        if ok {
            self.report.commits_ok += 1;
        } else {
            self.report.commits_failed += 1;
        }
        ok
    }

    fn persist(&mut self) {
        let queue = 1 + self.rng.below(QUEUES);
        let seq = self.next_seq;
        self.next_seq += 1;
        let body = self.body(seq);
        let op = Op::Persist {
            queue,
            seq,
            expires_at_ms: 0,
            delivered: false,
            message: Self::payload(&body),
        };
        let ok = self.commit(vec![vec![op]]);
        self.records
            .insert(Key::Message(queue, seq), expect(ok, body));
    }

    /// A record the model says is surely there, of the kind `pick` accepts.
    fn pick_present(&mut self, pick: impl Fn(&Key) -> bool) -> Option<(Key, Vec<u8>)> {
        let present: Vec<(Key, Vec<u8>)> = self
            .records
            .iter()
            .filter(|(k, e)| pick(k) && matches!(e, Expect::Must(_)))
            .filter(|(k, _)| !self.in_pair(**k))
            .map(|(k, e)| match e {
                Expect::Must(body) => (*k, body.clone()),
                _ => unreachable!(),
            })
            .collect();
        if present.is_empty() {
            return None;
        }
        let at = self.rng.below(present.len() as u64) as usize;
        Some(present[at].clone())
    }

    fn in_pair(&self, key: Key) -> bool {
        self.pairs.iter().any(|p| p.before == key || p.after == key)
    }

    fn forget(&mut self) {
        let Some((key, body)) = self.pick_present(|k| matches!(k, Key::Message(..))) else {
            return;
        };
        let Key::Message(queue, seq) = key else {
            return;
        };
        if self.commit(vec![vec![Op::Forget { queue, seq }]]) {
            self.records.insert(key, Expect::Gone);
        } else {
            // Retried by the writer: gone once a later commit succeeds, unless the power goes
            // first.
            self.records.insert(key, Expect::May(body));
        }
    }

    fn hold_op(&mut self, seq: u64, exchange: &str, body: &[u8]) -> Op {
        let due_ms = 1_000 + self.rng.below(1_000_000);
        // Held at various distances before its due time, so that buckets of every width
        // (and wide ones overlapping narrow ones) are read back in due order.
        let held_at_ms = due_ms.saturating_sub(1 << self.rng.below(21));
        Op::Hold {
            held_at_ms,
            id: DeadlineId { due_ms, seq },
            vhost: "/".into(),
            exchange: exchange.into(),
            message: Self::payload(body),
        }
    }

    fn hold(&mut self) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let body = self.body(seq);
        let op = self.hold_op(seq, EXCHANGES[0], &body);
        let ok = self.commit(vec![vec![op]]);
        self.records.insert(Key::Held(seq), expect(ok, body));
    }

    fn held_id(&self, seq: u64) -> Option<DeadlineId> {
        let snapshot = self.store().snapshot().ok()?;
        let ids = snapshot.delayed_ids(None, usize::MAX).ok()?;
        ids.into_iter().find(|id| id.seq == seq)
    }

    /// A held message released: its copy into a queue and its hold's removal, in one group.
    fn release(&mut self) {
        let Some((key, body)) = self.pick_present(|k| matches!(k, Key::Held(_))) else {
            return;
        };
        let Key::Held(seq) = key else { return };
        let Some(id) = self.held_id(seq) else {
            // The store cannot be read right now (closed after a failure): next time.
            return;
        };
        let queue = 1 + self.rng.below(QUEUES);
        let copy_seq = self.next_seq;
        self.next_seq += 1;
        let copy = Op::Persist {
            queue,
            seq: copy_seq,
            expires_at_ms: 0,
            delivered: false,
            message: Self::payload(&body),
        };
        let ok = self.commit(vec![vec![copy], vec![Op::Release { id }]]);
        self.settle_move(ok, key, Key::Message(queue, copy_seq), body);
    }

    /// A dead-lettering: the removal from one queue and the copy into another, in one
    /// submission.
    fn dead_letter(&mut self) {
        let Some((key, body)) = self.pick_present(|k| matches!(k, Key::Message(..))) else {
            return;
        };
        let Key::Message(queue, seq) = key else {
            return;
        };
        let target = 1 + (queue % QUEUES);
        let copy_seq = self.next_seq;
        self.next_seq += 1;
        let ops = vec![
            Op::Forget { queue, seq },
            Op::Persist {
                queue: target,
                seq: copy_seq,
                expires_at_ms: 0,
                delivered: false,
                message: Self::payload(&body),
            },
        ];
        let ok = self.commit(vec![ops]);
        self.settle_move(ok, key, Key::Message(target, copy_seq), body);
    }

    /// A dead-lettering into a delayed exchange: the removal from its queue and the hold, in
    /// one group. A commit that fails late (after reaching the disk) replays the hold with the
    /// removal: it must be counted once.
    fn dead_letter_to_delayed(&mut self) {
        let Some((key, body)) = self.pick_present(|k| matches!(k, Key::Message(..))) else {
            return;
        };
        let Key::Message(queue, seq) = key else {
            return;
        };
        let held_seq = self.next_seq;
        self.next_seq += 1;
        let hold = self.hold_op(held_seq, EXCHANGES[1], &body);
        let ok = self.commit(vec![vec![Op::Forget { queue, seq }], vec![hold]]);
        self.settle_move(ok, key, Key::Held(held_seq), body);
    }

    /// A move of a record (release, dead-lettering): done when acknowledged, else one of the
    /// two until a power cut tells which.
    fn settle_move(&mut self, ok: bool, from: Key, to: Key, body: Vec<u8>) {
        if ok {
            self.records.insert(from, Expect::Gone);
            self.records.insert(to, Expect::Must(body));
        } else {
            self.pairs.push(OneOf {
                before: from,
                after: to,
                body,
            });
        }
    }
}

fn expect(acknowledged: bool, body: Vec<u8>) -> Expect {
    if acknowledged {
        Expect::Must(body)
    } else {
        Expect::May(body)
    }
}
