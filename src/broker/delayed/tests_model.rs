//! The far tier's two forms against one model: a transient exchange's messages (in-memory far
//! tier) and a durable one's (disk tier, with its commit lag: pending holds, removals not yet
//! committed, windows read ahead) go through the same seeded runs of holds, cancels, purges,
//! commits and clock jumps, and must both hold and release exactly what a plain ordered map
//! says, in due order.

use std::collections::BTreeMap;
use std::sync::Arc;

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
        while let Some((entry, _)) = self.queue.get(true) {
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
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut model = Model::new();
    let mut now = 0u64;
    let mut tag = 0u64;
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
            63..=74 => {
                temp.store.write(Vec::new()).expect("commit");
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
    }
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
