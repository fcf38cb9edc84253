//! The broker shell on a disk that fails, as a seeded simulation through a real client.
//!
//! One seed drives persistent and transient publishes with confirms (some still in flight at a
//! crash, some with a per-message `expiration`), gets with ack, requeue or reject, bursts into
//! a retry queue (TTL and a dead-letter exchange, nobody consuming), holds at a durable
//! delayed exchange, cancels and moves of held messages, queue and delayed-exchange purges,
//! deletes and redeclares, clock advances, failed commits, failed fsyncs, clean restarts and
//! power cuts, against the embedded broker on the store's fault backend (writes not fsynced
//! are lost at a power cut).
//!
//! The model (`model.rs`, checked in `check.rs`) is strict, while the broker runs and after
//! every restart:
//! - presence: a confirmed message not taken away is there exactly once, in the place the
//!   model expects; one taken away is not there while the broker runs, and never again once
//!   the removal is known committed; nothing is there twice;
//! - order: each queue holds its messages in publish (or arrival) order, a requeued message
//!   back at its original place; every `basic.get` returns the queue's head (skipping only
//!   expired messages), and never an expired message;
//! - content: bodies byte for byte, the redelivered flag exactly (set if and only if the
//!   message was delivered before, a restart included; uncertain only for a delivery not
//!   known committed at a power cut), `expiration` and the deadline the broker keeps;
//! - expiry: on the manual clock, once `advance` has returned, every message past its
//!   deadline has left its queue: dead-lettered (exactly once, with one `x-death` entry of
//!   the right reason, queue, exchange, routing keys and original expiration, no
//!   `expiration`) or dropped; a held message past its due time is released. The bound:
//!   `advance` serves every deadline up to its target before it returns; what the broker
//!   does off the caller's thread (page reads) is given [`SETTLE_BOUND`] of wall time, then
//!   the look must be right;
//! - memory: the memory the broker counts stays under its watermark plus a stated overhead
//!   (`memory.rs`);
//! - closes: a client close (channel, then connection) that does not complete within its
//!   bound fails the run with what each side sent, unless the wire shows the broker got the
//!   close and answered close-ok; the client is then cut off and the stall counted
//!   (`closing.rs`).
//!
//! The classic queues page with a window of 4 messages, so paged-out messages are read back,
//! acked, purged, expired and crashed with; memory is always under pressure, so their
//! transient messages are spilled to disk and paged out among the persistent ones (and gone
//! after a restart).
//!
//! CI runs a few seeds. `DWELLMQ_SHELL_SIM_SECONDS=N` runs seed after seed for N seconds
//! (`cargo test --test durability shell_sim -- --nocapture`), and `DWELLMQ_SHELL_SIM_SEED=S`
//! replays one seed's operations (thread timing is not replayed).
//! `DWELLMQ_SHELL_SIM_KNOWN_DEFECTS=skip-paged-expiry` tolerates overdue messages left in a
//! paging queue (issue 35: paged messages expire only when read back), so that a run can look
//! past that defect for others.

mod at_least_once;
mod body;
mod check;
mod closing;
mod definitions;
mod faults;
mod look;
mod memory;
mod messages;
mod model;
mod moving;
mod queues;
mod report;
mod retry;
mod scenarios;
mod tap;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{DataDir, T0_MS};
use check::Violation;
use definitions::Definitions;
use dwellmq::{Broker, BrokerConfig, BrokerHandle, MemoryWatermark, StoreFaults};
use lapin::Channel;
use model::Model;
pub use report::Report;

/// `q3`'s dead-letter exchange (direct): `dead3` is bound to it with key `q3`, or not.
const DLX3: &str = "dlx3";
/// The durable delayed exchange (topic inside): `q0.<id>` goes to `q0`, `q1.<id>` to `q1`.
const LATER: &str = "later";
/// A durable queue whose confirmed publishes tell that everything before them is committed.
const SCRATCH: &str = "scratch";
/// Bound for anything a step waits for: past it, the broker is stuck (a finding).
const STUCK: Duration = Duration::from_secs(10);
/// How long, in wall time, a look may take to agree with the model once the clock stopped:
/// the broker reads paged messages back on its page reader thread, and dead-letters what
/// expired among them there; 5 s is hundreds of times what a page read takes here.
const SETTLE_BOUND: Duration = Duration::from_secs(5);
/// Ready messages a classic queue keeps in memory in the simulation.
const PAGING_WINDOW: usize = 4;
/// The memory watermark of the simulation's broker: above what must stay in memory (the
/// quorum queues' messages, the classic queues' windows of at most 4 messages and
/// [`WINDOW_BYTES`], held messages due within a second), below what the classic queues are
/// given over a run (retry bursts): a broker that kept what it should page or spill would
/// go over it.
pub const WATERMARK: u64 = 256 << 10;
/// The classic queues' window in body octets (besides [`PAGING_WINDOW`] messages).
const WINDOW_BYTES: u64 = 8 << 10;

/// xorshift64*: the seed is all there is to replay.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len() as u64) as usize]
    }
}

struct Sim {
    seed: u64,
    rng: Rng,
    model: Model,
    next_id: u64,
    dir: DataDir,
    faults: Arc<StoreFaults>,
    broker: Option<BrokerHandle>,
    client: Option<closing::Client>,
    ch: Option<Channel>,
    definitions: Definitions,
    log: Vec<String>,
    /// Transient messages published to classic queues since the last start: a restart loses
    /// them.
    transient: Vec<u64>,
    /// What the step under way rolled (for a report of a stuck one).
    last_roll: u64,
    report: Report,
}

fn config(dir: &DataDir, faults: &Arc<StoreFaults>, now_ms: u64) -> BrokerConfig {
    let mut config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        store_faults: Some(Arc::clone(faults)),
        http: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..BrokerConfig::ephemeral().with_manual_clock(now_ms)
    };
    // A window of 4: the classic queues leave most of what they hold in the store only, and
    // read it back (and restart without reading it) while every failure happens.
    config.limits.queue_window_messages = PAGING_WINDOW;
    config.limits.queue_window_bytes = WINDOW_BYTES;
    // Memory is always under pressure: the classic queues spill their transient messages
    // beyond the window too.
    config.limits.memory_paging_ratio = 1e-12;
    config.limits.memory_high_watermark = MemoryWatermark::Absolute(WATERMARK);
    config
}

/// (message id, queue) from a held message's routing key `<queue>.<id>`.
fn held_id(routing_key: &str) -> (u64, String) {
    let (queue, id) = routing_key.split_once('.').unwrap_or((routing_key, ""));
    (id.parse().unwrap_or(u64::MAX), queue.to_string())
}

impl Sim {
    async fn new(seed: u64) -> Sim {
        let mut model = Model::default();
        model.skip_paged_expiry = known_defect_skipped("skip-paged-expiry");
        let mut sim = Sim {
            seed,
            rng: Rng::new(seed),
            model,
            next_id: 0,
            dir: DataDir::new("shell-sim"),
            faults: Arc::new(StoreFaults::default()),
            broker: None,
            client: None,
            ch: None,
            definitions: Definitions::default(),
            log: Vec::new(),
            transient: Vec::new(),
            last_roll: 0,
            report: Report::default(),
        };
        sim.start(T0_MS).await;
        sim.declare_all(false).await;
        sim
    }

    /// Waits for `f` for up to [`STUCK`]; past it, the broker is stuck: fails with the seed.
    async fn bounded<T>(&self, what: &str, f: impl std::future::Future<Output = T>) -> T {
        match tokio::time::timeout(STUCK, f).await {
            Ok(done) => done,
            Err(_) => self.fail(&format!(
                "{what} took over {STUCK:?}: the broker is stuck{}",
                self.broker_state()
            )),
        }
    }

    /// What tells why a broker is stuck: its memory against its watermark, its disk alarm,
    /// each queue's length and how much of it is paged out.
    fn broker_state(&self) -> String {
        let Some(b) = self.broker.as_ref() else {
            return String::new();
        };
        let queues: Vec<String> = queues::QUEUES
            .iter()
            .chain([&SCRATCH])
            .filter_map(|q| b.queue_info("/", q))
            .map(|i| format!("{} {} ({} paged out)", i.name, i.messages, i.paged_out))
            .collect();
        format!(
            " (memory counted {} of a watermark of {}, disk alarm {}; queues: {})",
            b.memory_used(),
            b.memory_high_watermark(),
            b.disk_alarm(),
            queues.join(", ")
        )
    }

    fn broker(&self) -> &BrokerHandle {
        self.broker.as_ref().expect("a broker runs")
    }

    fn ch(&self) -> &Channel {
        self.ch.as_ref().expect("a channel is open")
    }

    fn fail(&self, what: &str) -> ! {
        let start = self.log.len().saturating_sub(40);
        panic!(
            "shell simulation, seed {}: {what}\nlast steps:\n  {}\nreplay: DWELLMQ_SHELL_SIM_SEED={} cargo test --test durability shell_sim",
            self.seed,
            self.log[start..].join("\n  "),
            self.seed
        );
    }

    /// Fails with violations, and the history of every message they concern.
    fn fail_with(&self, when: &str, violations: &[Violation]) -> ! {
        let mut ids: Vec<u64> = violations.iter().flat_map(|v| v.ids.clone()).collect();
        ids.sort_unstable();
        ids.dedup();
        let texts: Vec<&str> = violations.iter().map(|v| v.text.as_str()).collect();
        let histories: Vec<String> = ids
            .iter()
            .take(8)
            .map(|&id| self.model.history(id))
            .collect();
        self.fail(&format!(
            "{when}:\n{}\nhistories:\n  {}",
            texts.join("\n"),
            histories.join("\n  ")
        ))
    }

    async fn start(&mut self, now_ms: u64) {
        let start = Broker::start(config(&self.dir, &self.faults, now_ms));
        let broker = match tokio::time::timeout(STUCK, start).await {
            Ok(Ok(broker)) => broker,
            Ok(Err(e)) => self.fail(&format!("the broker does not start: {e}")),
            Err(_) => self.fail(&format!("starting the broker takes over {STUCK:?}")),
        };
        self.attach(broker).await;
    }

    /// Takes over a broker just started on the data directory (every start and restart
    /// comes here): the transient messages of the one before are gone, and what was not
    /// known committed may be either way.
    async fn attach(&mut self, broker: BrokerHandle) {
        self.model.restarted(broker.now_ms());
        let lost = std::mem::take(&mut self.transient);
        self.model.lost_with_restart(lost);
        let (client, ch) = match closing::connect(&broker).await {
            Ok(connected) => connected,
            Err(e) => self.fail(&format!("the client cannot use the new broker: {e}")),
        };
        self.broker = Some(broker);
        self.client = Some(client);
        self.ch = Some(ch);
    }

    /// Checks the broker against the model, looking again for up to [`SETTLE_BOUND`] while
    /// it does not agree (work the broker does off the caller's thread); then fails with the
    /// seed. A look that passed teaches the model what only a look can tell.
    async fn check(&mut self, when: &str, restarted: bool) {
        let started = Instant::now();
        let mut looks = 0;
        let look = loop {
            let look = self.look();
            looks += 1;
            let violations = self.model.check(&look, !restarted);
            if violations.is_empty() {
                break look;
            }
            if started.elapsed() > SETTLE_BOUND {
                self.fail_with(
                    &format!("{when} (still after {looks} looks in {SETTLE_BOUND:?})"),
                    &violations,
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if looks > 1 {
            self.report.late_looks += 1;
            self.report.longest_settle_ms = self
                .report
                .longest_settle_ms
                .max(started.elapsed().as_millis() as u64);
        }
        self.model.adopt(&look, restarted);
        self.report.note_look(&look);
        self.note_paging(&look);
        self.check_memory(when);
        self.report.checks += 1;
    }

    async fn step(&mut self) {
        let roll = self.rng.below(100);
        self.last_roll = roll;
        let done = match roll {
            0..=13 => self.publish_batch().await,
            14..=19 => self.retry_burst().await,
            20..=27 => self.publish_delayed().await,
            28..=39 => self.get_and_ack().await,
            40..=42 => self.reject_to_dead().await,
            43..=44 => self.reject_at_least_once().await,
            45..=46 => self.toggle_dead3().await,
            47..=50 => self.get_and_requeue().await,
            51..=53 => self.get_many_and_requeue().await,
            54..=62 => self.advance().await,
            63..=64 => self.cancel_one(),
            65 => self.move_one(),
            66..=67 => self.purge_queue().await,
            68..=69 => self.delete_and_redeclare_queue().await,
            70 => self.purge_later(),
            71 => self.delete_and_redeclare_later().await,
            72..=77 => self.sync().await,
            78..=81 => self.failing_commits().await,
            82..=83 => self.failing_fsync().await,
            84..=90 => self.change_definition().await,
            91..=92 => self.clean_restart().await,
            _ => self.power_cut().await,
        };
        self.log.push(done);
        self.report.steps += 1;
        if roll >= 91 {
            self.declare_all(true).await;
            self.check("after a restart", true).await;
            self.check_definitions("after a restart").await;
        } else if self.report.steps.is_multiple_of(8) {
            self.check("while running", false).await;
        }
    }

    async fn run(mut self, steps: u64) -> Report {
        for _ in 0..steps {
            if tokio::time::timeout(6 * STUCK, self.step()).await.is_err() {
                let roll = self.last_roll;
                self.fail(&format!(
                    "step {roll} took over {:?}: the broker is stuck{}",
                    6 * STUCK,
                    self.broker_state()
                ));
            }
        }
        let done = self.power_cut().await;
        self.log.push(done);
        self.report.final_power_cuts += 1;
        self.declare_all(true).await;
        self.check("after the last power cut", true).await;
        self.check_definitions("after the last power cut").await;
        let done = self.deliver_kept().await;
        self.log.push(done);
        let done = self.drain_retry().await;
        self.log.push(done);
        self.log.push(format!(
            "end: {} confirmed messages held",
            self.model.confirmed_count()
        ));
        self.stop().await;
        self.report.seeds = 1;
        self.report
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Whether `DWELLMQ_SHELL_SIM_KNOWN_DEFECTS` (comma-separated) names `defect`.
fn known_defect_skipped(defect: &str) -> bool {
    std::env::var("DWELLMQ_SHELL_SIM_KNOWN_DEFECTS")
        .is_ok_and(|v| v.split(',').any(|d| d.trim() == defect))
}

/// A few seeds in CI (60 steps each, well under a minute); longer runs by environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_confirmed_survives_every_failure_the_simulation_drives() {
    const STEPS: u64 = 60;
    let mut total = Report::default();
    let started = Instant::now();
    let ci = env_u64("DWELLMQ_SHELL_SIM_SEED").is_none()
        && env_u64("DWELLMQ_SHELL_SIM_SECONDS").is_none();
    if let Some(seed) = env_u64("DWELLMQ_SHELL_SIM_SEED") {
        total.add(Sim::new(seed).await.run(STEPS).await);
    } else if let Some(seconds) = env_u64("DWELLMQ_SHELL_SIM_SECONDS") {
        let first = env_u64("DWELLMQ_SHELL_SIM_FIRST_SEED").unwrap_or(1);
        for seed in first.. {
            if started.elapsed() >= Duration::from_secs(seconds) {
                break;
            }
            total.add(Sim::new(seed).await.run(STEPS).await);
        }
    } else {
        for seed in 1..=4 {
            total.add(Sim::new(seed).await.run(STEPS).await);
        }
    }
    println!(
        "shell simulation: {total:#?} in {:.1} s, no violation",
        started.elapsed().as_secs_f64()
    );
    total.assert_exercised(ci, STEPS);
}
