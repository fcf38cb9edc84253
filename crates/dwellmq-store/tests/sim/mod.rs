//! A deterministic simulation of the store under the disk fault model: one seed drives
//! persists, forgets, delayed holds, releases (a queue copy and the hold's removal in one
//! group), dead-letterings (a removal and a copy in one submission), failing writes, failing
//! fsyncs, a full disk and power cuts. After every power cut the store is opened on what the
//! disk held and checked against a model of what was confirmed:
//! - every confirmed message not confirmed forgotten is there, once, with its body;
//! - nothing confirmed forgotten (or released) comes back;
//! - a release or dead-lettering whose commit failed is there whole or not at all (never the
//!   removal without the copy, never both);
//! - the file opens and verifies.
//!
//! Used by `tests/store/simulate.rs` (fixed seeds) and `examples/simulate.rs` (long runs).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

use dwellmq_store::faults::Faults;
use dwellmq_store::{Completion, DeadlineId, Op, Payload, Store};

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
    /// Confirmed: it must be there, with this body.
    Must(Vec<u8>),
    /// Confirmed gone: it must not be there.
    Gone,
    /// Its write failed (the submitter was told): it may be there, with this body, or not.
    May(Vec<u8>),
}

/// A record: a message in a queue (queue, seq), or a held delayed message (seq).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Message(u64, u64),
    Held(u64),
}

/// Two records of which exactly one must be there: a group whose commit failed is retried
/// whole, so after a power cut either nothing of it or all of it is on disk.
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
    pub records_checked: u64,
}

/// One simulated run.
pub struct Sim {
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
}

const QUEUES: u64 = 3;

impl Sim {
    /// A run of `seed` in a fresh directory under `root` (removed when done).
    pub fn new(seed: u64, root: &Path) -> Sim {
        let root = root.join(format!("sim-{seed}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut sim = Sim {
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
        };
        sim.open_generation();
        sim
    }

    fn open_generation(&mut self) {
        self.generation += 1;
        self.dir = self.root.join(format!("gen-{}", self.generation));
        std::fs::create_dir_all(&self.dir).expect("a directory");
        self.faults = Arc::new(Faults::default());
        let mut options = dwellmq_store::faults::options(self.faults.clone());
        options.retry_interval = std::time::Duration::from_millis(20);
        let store = Store::open_with(&self.dir, options).unwrap_or_else(|e| {
            panic!(
                "generation {}: the store does not open: {e}",
                self.generation
            )
        });
        self.store = Some(store);
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
        let report = self.report;
        if let Some(store) = self.store.take() {
            store.close();
        }
        let _ = std::fs::remove_dir_all(&self.root);
        report
    }

    fn step(&mut self) {
        self.report.steps += 1;
        match self.rng.below(100) {
            0..=29 => self.persist(),
            30..=44 => self.forget(),
            45..=59 => self.hold(),
            60..=71 => self.release(),
            72..=79 => self.dead_letter(),
            80..=91 => self.toggle_fault(),
            _ => self.power_cut(),
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

    /// Submits `submissions` (in one group when there are several) and waits for each.
    fn commit(&mut self, submissions: Vec<Vec<Op>>) -> bool {
        let (tx, rx) = mpsc::channel::<Completion>();
        let count = submissions.len();
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
        let expect = if ok {
            Expect::Must(body)
        } else {
            Expect::May(body)
        };
        self.records.insert(Key::Message(queue, seq), expect);
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

    fn hold(&mut self) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let body = self.body(seq);
        let due_ms = 1_000 + self.rng.below(1_000_000);
        // Held at various distances before its due time, so that buckets of every width
        // (and wide ones overlapping narrow ones) are read back in due order.
        let held_at_ms = due_ms.saturating_sub(1 << self.rng.below(21));
        let op = Op::Hold {
            held_at_ms,
            id: DeadlineId { due_ms, seq },
            vhost: "/".into(),
            exchange: "d".into(),
            message: Self::payload(&body),
        };
        let ok = self.commit(vec![vec![op]]);
        let expect = if ok {
            Expect::Must(body)
        } else {
            Expect::May(body)
        };
        self.records.insert(Key::Held(seq), expect);
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
        let copy_key = Key::Message(queue, copy_seq);
        if ok {
            self.records.insert(key, Expect::Gone);
            self.records.insert(copy_key, Expect::Must(body));
        } else {
            self.pairs.push(OneOf {
                before: key,
                after: copy_key,
                body,
            });
        }
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
        let copy_key = Key::Message(target, copy_seq);
        if self.commit(vec![ops]) {
            self.records.insert(key, Expect::Gone);
            self.records.insert(copy_key, Expect::Must(body));
        } else {
            self.pairs.push(OneOf {
                before: key,
                after: copy_key,
                body,
            });
        }
    }

    fn toggle_fault(&mut self) {
        let switch = match self.rng.below(3) {
            0 => &self.faults.fail_writes,
            1 => &self.faults.fail_sync,
            _ => &self.faults.disk_full,
        };
        let on = !switch.load(Ordering::SeqCst) && self.rng.chance(60);
        switch.store(on, Ordering::SeqCst);
    }

    fn clear_faults(&self) {
        for switch in [
            &self.faults.fail_writes,
            &self.faults.fail_sync,
            &self.faults.disk_full,
        ] {
            switch.store(false, Ordering::SeqCst);
        }
    }

    /// The power goes now: the store is opened again on what the disk held, and checked.
    fn power_cut(&mut self) {
        self.report.power_cuts += 1;
        let image = self.root.join(format!("gen-{}-image", self.generation));
        std::fs::create_dir_all(&image).expect("a directory");
        let file = dwellmq_store::DB_FILE;
        self.faults
            .disk_image(&self.dir.join(file), &image.join(file))
            .expect("the disk's image");
        // The old store goes on in its own directory until it is closed: nothing of it
        // reaches the image any more.
        self.clear_faults();
        if let Some(old) = self.store.take() {
            old.close();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        self.open_on(&image);
        self.check();
    }

    fn open_on(&mut self, image: &Path) {
        self.generation += 1;
        self.dir = self.root.join(format!("gen-{}", self.generation));
        std::fs::rename(image, &self.dir).expect("the image becomes the data directory");
        self.faults = Arc::new(Faults::default());
        let mut options = dwellmq_store::faults::options(self.faults.clone());
        options.retry_interval = std::time::Duration::from_millis(20);
        let store = Store::open_with(&self.dir, options).unwrap_or_else(|e| {
            panic!(
                "after power cut {}: the store does not open: {e}",
                self.report.power_cuts
            )
        });
        self.store = Some(store);
    }

    /// Checks what the disk held against the model, then settles the model on it.
    fn check(&mut self) {
        let on_disk = self.read_all();
        let cut = self.report.power_cuts;
        for (key, expect) in self.records.clone() {
            if self.in_pair(key) {
                continue;
            }
            self.report.records_checked += 1;
            let found = on_disk.get(&key);
            match (&expect, found) {
                (Expect::Must(body), Some(stored)) => {
                    assert_eq!(stored, body, "power cut {cut}: {key:?} came back changed")
                }
                (Expect::Must(_), None) => {
                    panic!("power cut {cut}: confirmed {key:?} was lost")
                }
                (Expect::Gone, Some(_)) => {
                    panic!("power cut {cut}: {key:?}, confirmed gone, came back")
                }
                (Expect::May(body), Some(stored)) => {
                    assert_eq!(stored, body, "power cut {cut}: {key:?} came back changed");
                    self.records.insert(key, Expect::Must(body.clone()));
                }
                (Expect::May(_), None) => {
                    self.records.insert(key, Expect::Gone);
                }
                (Expect::Gone, None) => {}
            }
        }
        for pair in std::mem::take(&mut self.pairs) {
            self.report.records_checked += 2;
            let before = on_disk.get(&pair.before);
            let after = on_disk.get(&pair.after);
            let (keep, drop) = match (before, after) {
                (Some(_), None) => (pair.before, pair.after),
                (None, Some(_)) => (pair.after, pair.before),
                (Some(_), Some(_)) => panic!(
                    "power cut {cut}: {:?} and {:?} both there: a group was split",
                    pair.before, pair.after
                ),
                (None, None) => panic!(
                    "power cut {cut}: neither {:?} nor {:?}: a group's removal was written without its copy",
                    pair.before, pair.after
                ),
            };
            assert_eq!(
                on_disk.get(&keep),
                Some(&pair.body),
                "power cut {cut}: {keep:?} came back changed"
            );
            self.records.insert(keep, Expect::Must(pair.body.clone()));
            self.records.insert(drop, Expect::Gone);
        }
        // Nothing is on disk that the model never wrote.
        for key in on_disk.keys() {
            assert!(
                self.records.contains_key(key),
                "power cut {cut}: {key:?} was never written"
            );
        }
    }

    fn read_all(&self) -> BTreeMap<Key, Vec<u8>> {
        let snapshot = self.store().snapshot().expect("a snapshot after opening");
        let mut out = BTreeMap::new();
        for queue in 1..=QUEUES {
            for stored in snapshot.queue_messages(queue, 0, usize::MAX).expect("read") {
                out.insert(Key::Message(queue, stored.seq), body_of(&stored.message));
            }
        }
        for id in snapshot.delayed_ids(None, usize::MAX).expect("read") {
            let held = snapshot
                .delayed_message(id)
                .expect("read")
                .expect("an indexed hold has its message");
            out.insert(Key::Held(id.seq), body_of(&held.message));
        }
        assert_eq!(
            snapshot.delayed_count().expect("count") as usize,
            out.keys().filter(|k| matches!(k, Key::Held(_))).count(),
            "the delayed count agrees with the index"
        );
        out
    }
}

fn body_of(message: &dwellmq_core::PackedMessage) -> Vec<u8> {
    let bytes = message.as_slice();
    bytes[bytes.len() - message.body_len()..].to_vec()
}
