//! The far tier's two forms against one model: a transient exchange's messages (in-memory far
//! tier) and a durable one's (disk tier, with the store's commit lag: holds and removals
//! submitted and not committed while the writer is held back, windows read ahead, failed
//! commits) go through the same seeded runs of holds, cancels, purges, commits and clock
//! jumps, and must both hold and release exactly what a plain ordered map says, in due order.

use std::collections::BTreeMap;
use std::sync::{mpsc, Arc};

use dwellmq_codec::BasicProperties;
use dwellmq_core::Message;

use super::tests_disk::{on_disk, TempStore};
use super::DelayedMessages;
use crate::broker::exchange::Exchange;
use crate::broker::memory::MemoryMonitor;
use crate::broker::queue::Queue;
use crate::broker::vhost::VHost;

const DAY_MS: u64 = 86_400_000;

/// A small deterministic generator (xorshift64*): a failing seed replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One form under test: its holder, exchange and the queue it releases into.
struct Form {
    name: &'static str,
    delayed: DelayedMessages,
    vhost: Arc<VHost>,
    exchange: Arc<Exchange>,
    queue: Arc<Queue>,
}

impl Form {
    fn hold(&self, due_ms: u64, tag: u64) {
        let message = Message::new(
            "d".into(),
            "k".into(),
            BasicProperties::default(),
            bytes::Bytes::from(tag.to_be_bytes().to_vec()).into(),
            None,
        );
        self.delayed
            .hold(&self.vhost, &self.exchange, message, due_ms);
    }

    /// Serves every deadline up to `now_ms`, as the manual clock does.
    fn advance(&self, now_ms: u64) {
        for _ in 0..10_000 {
            self.delayed.release_due(now_ms);
            self.delayed.move_in(now_ms, None);
            if self.delayed.next_wake().is_none_or(|w| w > now_ms) {
                return;
            }
        }
        panic!("{}: deadlines keep falling due at {now_ms}", self.name);
    }

    /// Tags of the messages released so far (taken out of the queue).
    fn released(&self) -> Vec<u64> {
        let mut tags = Vec::new();
        while let Some((entry, _)) = self.queue.get(&*self.vhost, true) {
            let chunks = entry.message.body.chunks().concat();
            tags.push(u64::from_be_bytes(
                chunks.try_into().expect("an 8-octet tag"),
            ));
        }
        tags
    }

    /// The due times of the messages it holds, in due order, as its listing shows them.
    fn listed(&self, limit: usize) -> Vec<u64> {
        let all = self.delayed.list("/", "d", limit);
        all.iter().map(|info| info.due_ms).collect()
    }
}

/// Holds the store's writer back while it lives: a group open on another thread keeps the
/// writer from gathering a batch, so what is submitted meanwhile waits uncommitted (as behind
/// a slow fsync), and reads go on.
struct HeldBack {
    let_go: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl HeldBack {
    fn new(store: &Arc<dwellmq_store::Store>) -> HeldBack {
        let store = Arc::clone(store);
        let (let_go, wait) = mpsc::channel::<()>();
        let (open, opened) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            let _group = store.group();
            let _ = open.send(());
            let _ = wait.recv();
        });
        opened.recv().expect("the group opens");
        HeldBack { let_go, thread }
    }

    fn let_go(self) {
        drop(self.let_go);
        self.thread.join().expect("the holding thread");
    }
}

/// Lets the writer go and waits until everything submitted so far is committed (a commit
/// that was made to fail is followed by one that commits what it carries).
fn commit_all(store: &dwellmq_store::Store, held_back: &mut Option<HeldBack>) {
    if let Some(held_back) = held_back.take() {
        held_back.let_go();
    }
    for _ in 0..3 {
        if store.write(Vec::new()).is_ok() {
            return;
        }
    }
    panic!("the store does not commit");
}

/// Held messages by (due, tag): tags grow with every hold, as the scheduler's sequence does,
/// so this is the release order.
type Model = BTreeMap<(u64, u64), ()>;

fn run(seed: u64, steps: usize) {
    let temp = TempStore::new(&format!("far-tier-model-{seed}"));
    let memory = MemoryMonitor::new(u64::MAX);
    let (vhost, exchange, queue) = super::tests::setup_with(false);
    let in_memory = Form {
        name: "in memory",
        delayed: DelayedMessages::new(0, Arc::clone(&memory)),
        vhost,
        exchange,
        queue,
    };
    let (vhost, exchange, queue) = super::tests::setup_with(true);
    let on_disk = Form {
        name: "on disk",
        delayed: on_disk(&temp, Arc::clone(&memory)),
        vhost,
        exchange,
        queue,
    };
    let forms = [in_memory, on_disk];
    let on_disk = &forms[1];
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut model = Model::new();
    let mut now = 0u64;
    let mut tag = 0u64;
    let mut held_back: Option<HeldBack> = None;
    for step in 0..steps {
        let mut released = Vec::new();
        match rng.below(100) {
            // Holds: within the horizon, beyond it, days away, and many in one millisecond.
            0..=49 => {
                let delay = match rng.below(4) {
                    0 => rng.below(1_000),
                    1 => 1_000 + rng.below(60_000),
                    2 => DAY_MS + rng.below(DAY_MS),
                    _ => 5_000,
                };
                for _ in 0..=rng.below(3) {
                    tag += 1;
                    for form in &forms {
                        form.hold(now + delay, tag);
                    }
                    model.insert((now + delay, tag), ());
                }
            }
            // A cancel of the k-th held message, found through each form's listing.
            50..=59 if !model.is_empty() => {
                let k = rng.below(model.len() as u64) as usize;
                let key = *model.keys().nth(k).expect("k-th");
                for form in &forms {
                    let listed = form.delayed.list("/", "d", k + 1);
                    let id = listed.get(k).map(|info| info.id);
                    let id = id.unwrap_or_else(|| panic!("{}: no {k}-th message", form.name));
                    assert_eq!(id.due_ms, key.0, "{}: seed {seed} step {step}", form.name);
                    assert!(
                        form.delayed.cancel(id),
                        "{}: seed {seed} step {step}",
                        form.name
                    );
                }
                model.remove(&key);
            }
            60..=62 => {
                for form in &forms {
                    form.delayed.purge_exchange(&"/".into(), &"d".into());
                }
                model.clear();
            }
            // The store commits what is submitted (otherwise it commits when it gets to it).
            63..=70 => commit_all(&temp.store, &mut held_back),
            // The writer is held back: what follows is submitted and not committed until a
            // commit step lets it go.
            71..=75 => {
                held_back.get_or_insert_with(|| HeldBack::new(&temp.store));
            }
            // A commit fails: holds on disk (the durable form's alone, as a failed one is
            // nacked and gone), maybe one of them cancelled, and maybe a cancel of a held one
            // in both forms, all in one batch that fails; the cancel's removal is retried.
            76..=78 => {
                commit_all(&temp.store, &mut held_back);
                held_back = Some(HeldBack::new(&temp.store));
                let failing = 1 + rng.below(3) as usize;
                for k in 0..failing {
                    // Due after everything the model holds (at most two days ahead).
                    on_disk.hold(now + 3 * DAY_MS + k as u64, u64::MAX);
                }
                // (Not the only one: a hold and its release that meet in a batch are not
                // written, and a batch writing no hold is not one made to fail.)
                if failing > 1 && rng.below(2) == 0 {
                    let all = on_disk.delayed.list("/", "d", model.len() + failing);
                    let last = all.last().expect("the failing holds are listed").id;
                    assert!(on_disk.delayed.cancel(last), "seed {seed} step {step}");
                }
                if !model.is_empty() && rng.below(2) == 0 {
                    let k = rng.below(model.len() as u64) as usize;
                    let key = *model.keys().nth(k).expect("k-th");
                    for form in &forms {
                        let id = form.delayed.list("/", "d", k + 1)[k].id;
                        assert!(form.delayed.cancel(id), "{}: seed {seed}", form.name);
                    }
                    model.remove(&key);
                }
                temp.store.fail_next_commits(1);
                commit_all(&temp.store, &mut held_back);
                assert_eq!(temp.store.commits_to_fail(), 0, "seed {seed} step {step}");
            }
            // Time passes: a little, past the horizon, or days at once.
            _ => {
                now += match rng.below(5) {
                    0 => 2 * DAY_MS,
                    1 => 1_000 + rng.below(5_000),
                    _ => rng.below(1_200),
                };
                let due: Vec<(u64, u64)> = model.range(..(now + 1, 0)).map(|(k, _)| *k).collect();
                for key in due {
                    model.remove(&key);
                    released.push(key.1);
                }
                for form in &forms {
                    form.advance(now);
                }
            }
        }
        for form in &forms {
            let context = format!("{}: seed {seed} step {step} at {now}", form.name);
            assert_eq!(form.released(), released, "released, {context}");
            assert_eq!(form.delayed.len(), model.len(), "held, {context}");
            assert_eq!(
                form.delayed.stats("/", "d").0,
                model.len(),
                "counted, {context}"
            );
            let first: Vec<u64> = model.keys().take(8).map(|k| k.0).collect();
            assert_eq!(form.listed(8), first, "listed, {context}");
        }
        // The store's index, lag included, holds what the model holds.
        let view = temp.store.held_view().expect("view");
        let held = view.delayed_count().expect("count");
        assert_eq!(
            held,
            model.len() as u64,
            "stored: seed {seed} step {step} at {now}"
        );
    }
    commit_all(&temp.store, &mut held_back);
    // Everything left comes out in due order, and the store keeps nothing.
    now += 3 * DAY_MS;
    let rest: Vec<u64> = model.keys().map(|k| k.1).collect();
    for form in &forms {
        form.advance(now);
        assert_eq!(
            form.released(),
            rest,
            "{}: seed {seed} at the end",
            form.name
        );
        assert_eq!(form.delayed.len(), 0);
    }
    temp.store.write(Vec::new()).expect("commit");
    let snapshot = temp.store.snapshot().expect("snapshot");
    assert_eq!(snapshot.delayed_count().expect("count"), 0, "seed {seed}");
}

#[test]
fn both_far_tier_forms_hold_and_release_what_one_model_says() {
    for seed in 1..=6 {
        run(seed, 400);
    }
}
