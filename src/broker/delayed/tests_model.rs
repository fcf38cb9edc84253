//! The far tier's two forms against one model: a transient exchange's messages (in-memory far
//! tier) and a durable one's (disk tier, with the store's commit lag: holds and removals
//! submitted and not committed while the writer is held back, windows read ahead, failed
//! commits) go through the same seeded runs of holds, cancels, purges, commits and clock
//! jumps, and moves of held messages to other due times, and must both hold and release
//! exactly what a plain ordered map says, in due order.

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
    delayed: Arc<DelayedMessages>,
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

/// Held messages by (due, order) → tag: orders grow with every hold and move, as the
/// scheduler's sequence does, so this is the release order; a moved message keeps its tag
/// (its body) and takes a new order.
type Model = BTreeMap<(u64, u64), u64>;

/// One seeded run: both forms and the model, through the same steps.
struct Run {
    seed: u64,
    temp: TempStore,
    forms: [Form; 2],
    rng: Rng,
    model: Model,
    now: u64,
    /// The last tag and order given.
    tag: u64,
    order: u64,
    held_back: Option<HeldBack>,
}

impl Run {
    fn new(seed: u64) -> Run {
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
        Run {
            seed,
            temp,
            forms: [in_memory, on_disk],
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
            model: Model::new(),
            now: 0,
            tag: 0,
            order: 0,
            held_back: None,
        }
    }

    fn next_order(&mut self) -> u64 {
        self.order += 1;
        self.order
    }

    /// A due time from now: within the horizon, beyond it, days away, or a busy millisecond.
    fn some_delay(&mut self) -> u64 {
        match self.rng.below(4) {
            0 => self.rng.below(1_000),
            1 => 1_000 + self.rng.below(60_000),
            2 => DAY_MS + self.rng.below(DAY_MS),
            _ => 5_000,
        }
    }

    /// Holds, many in one millisecond at times.
    fn hold(&mut self) {
        let due = self.now + self.some_delay();
        for _ in 0..=self.rng.below(3) {
            self.tag += 1;
            for form in &self.forms {
                form.hold(due, self.tag);
            }
            let order = self.next_order();
            self.model.insert((due, order), self.tag);
        }
    }

    /// The id of the k-th held message in `form`'s listing, checked against the model.
    fn kth_id(&self, form: &Form, k: usize, step: usize) -> super::DelayedId {
        let key = *self.model.keys().nth(k).expect("k-th");
        let listed = form.delayed.list("/", "d", k + 1);
        let id = listed.get(k).map(|info| info.id);
        let id = id.unwrap_or_else(|| panic!("{}: no {k}-th message", form.name));
        let seed = self.seed;
        assert_eq!(id.due_ms, key.0, "{}: seed {seed} step {step}", form.name);
        id
    }

    /// A cancel of the k-th held message, found through each form's listing.
    fn cancel(&mut self, step: usize) {
        let k = self.rng.below(self.model.len() as u64) as usize;
        for form in &self.forms {
            let id = self.kth_id(form, k, step);
            let seed = self.seed;
            assert!(
                form.delayed.cancel(id),
                "{}: seed {seed} step {step}",
                form.name
            );
        }
        let key = *self.model.keys().nth(k).expect("k-th");
        self.model.remove(&key);
    }

    /// A move of the k-th held message to another due time (now, sooner or later, into or out
    /// of the wheel, the far tier and the disk), found through each form's listing.
    fn relocate(&mut self, step: usize) {
        let k = self.rng.below(self.model.len() as u64) as usize;
        let due = match self.rng.below(3) {
            0 => self.now,
            _ => self.now + self.some_delay(),
        };
        for form in &self.forms {
            let id = self.kth_id(form, k, step);
            let moved = form.delayed.move_held(id, Some(("/", "d")), due);
            let context = format!("{}: seed {} step {step}", form.name, self.seed);
            let moved = moved.unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(moved.due_ms, due, "{context}");
            assert!(!form.delayed.cancel(id), "{context}: the old id is gone");
        }
        let key = *self.model.keys().nth(k).expect("k-th");
        let tag = self.model.remove(&key).expect("held");
        let order = self.next_order();
        self.model.insert((due, order), tag);
    }

    /// A commit fails: holds on disk (the durable form's alone, as a failed one is nacked and
    /// gone), maybe one of them cancelled, and maybe a cancel and a move of held ones in both
    /// forms, all in one batch that fails; the cancel's removal and the move are retried.
    fn failed_commit(&mut self, step: usize) {
        let seed = self.seed;
        commit_all(&self.temp.store, &mut self.held_back);
        self.held_back = Some(HeldBack::new(&self.temp.store));
        let failing = 1 + self.rng.below(3) as usize;
        let on_disk = &self.forms[1];
        for k in 0..failing {
            // Due after everything the model holds (at most two days ahead).
            on_disk.hold(self.now + 3 * DAY_MS + k as u64, u64::MAX);
        }
        // (Not the only one: a hold and its release that meet in a batch are not written, and
        // a batch writing no hold is not one made to fail.)
        if failing > 1 && self.rng.below(2) == 0 {
            let all = on_disk.delayed.list("/", "d", self.model.len() + failing);
            let last = all.last().expect("the failing holds are listed").id;
            assert!(on_disk.delayed.cancel(last), "seed {seed} step {step}");
        }
        if !self.model.is_empty() && self.rng.below(2) == 0 {
            self.cancel(step);
        }
        // A move in the failing batch: its removal and its new hold are retried together.
        if !self.model.is_empty() && self.rng.below(2) == 0 {
            self.relocate(step);
        }
        self.temp.store.fail_next_commits(1);
        commit_all(&self.temp.store, &mut self.held_back);
        assert_eq!(
            self.temp.store.commits_to_fail(),
            0,
            "seed {seed} step {step}"
        );
    }

    /// Time passes: a little, past the horizon, or days at once. Returns the tags released.
    fn advance(&mut self) -> Vec<u64> {
        self.now += match self.rng.below(5) {
            0 => 2 * DAY_MS,
            1 => 1_000 + self.rng.below(5_000),
            _ => self.rng.below(1_200),
        };
        let due: Vec<(u64, u64)> = self
            .model
            .range(..(self.now + 1, 0))
            .map(|(k, _)| *k)
            .collect();
        let released = due
            .iter()
            .filter_map(|key| self.model.remove(key))
            .collect();
        for form in &self.forms {
            form.advance(self.now);
        }
        released
    }

    fn step(&mut self, step: usize) {
        let released = match self.rng.below(100) {
            0..=44 => {
                self.hold();
                Vec::new()
            }
            45..=52 if !self.model.is_empty() => {
                self.cancel(step);
                Vec::new()
            }
            53..=59 if !self.model.is_empty() => {
                self.relocate(step);
                Vec::new()
            }
            60..=62 => {
                for form in &self.forms {
                    form.delayed.purge_exchange(&"/".into(), &"d".into());
                }
                self.model.clear();
                Vec::new()
            }
            // The store commits what is submitted (otherwise it commits when it gets to it).
            63..=70 => {
                commit_all(&self.temp.store, &mut self.held_back);
                Vec::new()
            }
            // The writer is held back: what follows is submitted and not committed until a
            // commit step lets it go.
            71..=75 => {
                let store = &self.temp.store;
                self.held_back.get_or_insert_with(|| HeldBack::new(store));
                Vec::new()
            }
            76..=78 => {
                self.failed_commit(step);
                Vec::new()
            }
            _ => self.advance(),
        };
        self.check(step, released);
    }

    /// Each form released `released` in this step, and holds, counts and lists what the model
    /// holds; the store's index (lag included) holds as many.
    fn check(&self, step: usize, released: Vec<u64>) {
        let (seed, now) = (self.seed, self.now);
        for form in &self.forms {
            let context = format!("{}: seed {seed} step {step} at {now}", form.name);
            assert_eq!(form.released(), released, "released, {context}");
            assert_eq!(form.delayed.len(), self.model.len(), "held, {context}");
            let counted = form.delayed.stats("/", "d").0;
            assert_eq!(counted, self.model.len(), "counted, {context}");
            let first: Vec<u64> = self.model.keys().take(8).map(|k| k.0).collect();
            assert_eq!(form.listed(8), first, "listed, {context}");
        }
        let view = self.temp.store.held_view().expect("view");
        let held = view.delayed_count().expect("count");
        let model = self.model.len() as u64;
        assert_eq!(held, model, "stored: seed {seed} step {step} at {now}");
    }

    /// Everything left comes out in due order, and the store keeps nothing.
    fn finish(mut self) {
        let seed = self.seed;
        commit_all(&self.temp.store, &mut self.held_back);
        self.now += 3 * DAY_MS;
        let rest: Vec<u64> = self.model.values().copied().collect();
        for form in &self.forms {
            form.advance(self.now);
            let name = form.name;
            assert_eq!(form.released(), rest, "{name}: seed {seed} at the end");
            assert_eq!(form.delayed.len(), 0);
        }
        self.temp.store.write(Vec::new()).expect("commit");
        let snapshot = self.temp.store.snapshot().expect("snapshot");
        assert_eq!(snapshot.delayed_count().expect("count"), 0, "seed {seed}");
    }
}

fn run(seed: u64, steps: usize) {
    let mut run = Run::new(seed);
    for step in 0..steps {
        run.step(step);
    }
    run.finish();
}

#[test]
fn both_far_tier_forms_hold_and_release_what_one_model_says() {
    for seed in 1..=6 {
        run(seed, 400);
    }
}
