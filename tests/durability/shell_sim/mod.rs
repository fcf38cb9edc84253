//! The broker shell on a disk that fails, as a seeded simulation through a real client.
//!
//! One seed drives persistent and transient publishes with confirms (some still in flight at a
//! crash), acks, requeues, rejects into a dead-letter queue, holds at a durable delayed
//! exchange, cancels, queue and delayed-exchange purges, deletes and redeclares, clock advances,
//! failed commits, failed fsyncs, clean restarts and power cuts, against the embedded broker on
//! the store's fault backend (writes not fsynced are lost at a power cut). After every restart
//! it declares every definition passively, looks at every queue and every held message, and
//! checks them against a model (`model.rs`): a confirmed message not removed is there exactly
//! once, a removal known to be committed never comes back, nothing is there twice. The classic
//! queues page with a window of 4 messages, so paged-out messages are read back, acked,
//! purged and crashed with; memory is always under pressure, so their transient messages are
//! spilled to disk and paged out among the persistent ones (and gone after a restart).
//!
//! CI runs a few seeds. `DWELLMQ_SHELL_SIM_SECONDS=N` runs seed after seed for N seconds
//! (`cargo test --release --test durability shell_sim -- --nocapture`), and
//! `DWELLMQ_SHELL_SIM_SEED=S` replays one seed's operations (thread timing is not replayed).

mod at_least_once;
mod definitions;
mod faults;
mod messages;
mod model;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{connect, declare_delayed, long_str, table, DataDir, T0_MS};
use definitions::Definitions;
use dwellmq::{Broker, BrokerConfig, BrokerHandle, StoreFaults};
use lapin::options::{
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use model::{Model, Place, Seen};

/// Queues the simulation uses: `q0` (classic, bound to the delayed exchange), `q1` (quorum,
/// bound to it too; a message whose delivery failed more than 3 times, as at a crash with it
/// unacked, is dead-lettered into `dead`), `q2`
/// (classic, dead-letters rejected and expired messages into `dead`; messages expire 5 s after
/// they enter it; at 30 messages it refuses publishes), `dead`; `q3` (quorum, dead-letters
/// rejected and expired messages at least once through the exchange `dlx3` into `dead3`,
/// which is sometimes unbound and refuses publishes at 4 messages: what it does not take stays
/// kept in `q3`; messages expire 8 s after they enter `q3`, which refuses publishes at 25,
/// kept ones included), `dead3`.
const QUEUES: [&str; 6] = ["q0", "q1", "q2", "dead", "q3", "dead3"];
/// The queues a step may delete and declare again (not `q3`, whose deletion would take what
/// it keeps with it, nor its target).
const RENEWABLE: [&str; 4] = ["q0", "q1", "q2", "dead"];
/// `q3`'s dead-letter exchange (direct): `dead3` is bound to it with key `q3`, or not.
const DLX3: &str = "dlx3";
/// The durable delayed exchange (topic inside): `q0.<id>` goes to `q0`, `q1.<id>` to `q1`.
const LATER: &str = "later";
/// A durable queue whose confirmed publishes tell that everything before them is committed.
const SCRATCH: &str = "scratch";
/// Bound for anything a step waits for: past it, the broker is stuck (a finding).
const STUCK: Duration = Duration::from_secs(10);

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

/// What a run did, summed over seeds.
#[derive(Default, Debug)]
pub struct Report {
    pub seeds: u64,
    pub steps: u64,
    pub confirmed: u64,
    pub nacked: u64,
    pub power_cuts: u64,
    /// Expiries counted at clock advances (each since its broker's start: an upper bound).
    pub expired: u64,
    pub restarts: u64,
    /// Dead-lettered messages `q3` kept that reached `dead3` in a run's last phase.
    pub kept_delivered: u64,
    /// Client closes that did not complete before a clean restart (see `clean_restart`).
    pub unfinished_closes: u64,
    /// Of those, the ones whose client was still blocked (`connection.blocked`) by then.
    pub unfinished_closes_blocked: u64,
    pub checks: u64,
}

struct Sim {
    seed: u64,
    rng: Rng,
    model: Model,
    next_id: u64,
    dir: DataDir,
    faults: Arc<StoreFaults>,
    broker: Option<BrokerHandle>,
    connection: Option<Connection>,
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
    // Memory is always under pressure: the classic queues spill their transient messages
    // beyond the window too.
    config.limits.memory_paging_ratio = 1e-12;
    config
}

/// Ready messages a classic queue keeps in memory in the simulation.
const PAGING_WINDOW: usize = 4;

fn persistent() -> BasicProperties {
    BasicProperties::default().with_delivery_mode(2)
}

fn id_of(body: &[u8]) -> u64 {
    std::str::from_utf8(body)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX)
}

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STUCK, f)
        .await
        .unwrap_or_else(|_| panic!("{what} took over {STUCK:?}: the broker is stuck"))
}

impl Sim {
    async fn new(seed: u64) -> Sim {
        let dir = DataDir::new("shell-sim");
        let faults = Arc::new(StoreFaults::default());
        let mut sim = Sim {
            seed,
            rng: Rng::new(seed),
            model: Model::default(),
            next_id: 0,
            dir,
            faults,
            broker: None,
            connection: None,
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
    /// comes here): the transient messages of the one before are gone.
    async fn attach(&mut self, broker: BrokerHandle) {
        let lost = std::mem::take(&mut self.transient);
        self.model.lost_with_restart(lost);
        let open = async {
            let connection = connect(&broker).await;
            let ch = connection.create_channel().await.expect("channel");
            ch.confirm_select(ConfirmSelectOptions::default())
                .await
                .expect("confirm mode");
            (connection, ch)
        };
        let Ok((connection, ch)) = tokio::time::timeout(STUCK, open).await else {
            self.fail(&format!(
                "connecting to the new broker takes over {STUCK:?}"
            ));
        };
        self.broker = Some(broker);
        self.connection = Some(connection);
        self.ch = Some(ch);
    }

    /// Declares every queue and the delayed exchange (passively after a restart: a definition
    /// that did not survive fails instead of being created again), and binds them when new.
    async fn declare_all(&mut self, passive: bool) {
        for queue in QUEUES.iter().chain([&SCRATCH]) {
            self.declare_queue(queue, passive).await;
        }
        self.declare_later(passive).await;
        self.declare_dlx3(passive).await;
        if !passive {
            self.bind("q0").await;
            self.bind("q1").await;
            self.bind_dead3(true).await;
        }
    }

    async fn declare_dlx3(&mut self, passive: bool) {
        let options = ExchangeDeclareOptions {
            passive,
            durable: true,
            ..Default::default()
        };
        if let Err(e) = self
            .ch()
            .exchange_declare(
                DLX3.into(),
                ExchangeKind::Direct,
                options,
                FieldTable::default(),
            )
            .await
        {
            self.fail(&format!(
                "declaring {DLX3} (passive: {passive}) failed: {e}"
            ));
        }
    }

    async fn declare_queue(&mut self, queue: &str, passive: bool) {
        let arguments = match queue {
            "q1" => table(&[
                ("x-queue-type", long_str("quorum")),
                ("x-delivery-limit", AMQPValue::LongInt(3)),
                ("x-dead-letter-exchange", long_str("")),
                ("x-dead-letter-routing-key", long_str("dead")),
            ]),
            "q3" => table(&[
                ("x-queue-type", long_str("quorum")),
                ("x-dead-letter-exchange", long_str(DLX3)),
                ("x-dead-letter-routing-key", long_str("q3")),
                ("x-dead-letter-strategy", long_str("at-least-once")),
                ("x-overflow", long_str("reject-publish")),
                ("x-message-ttl", AMQPValue::LongInt(8_000)),
                ("x-max-length", AMQPValue::LongInt(25)),
            ]),
            "dead3" => table(&[
                ("x-max-length", AMQPValue::LongInt(4)),
                ("x-overflow", long_str("reject-publish")),
            ]),
            "q2" => table(&[
                ("x-dead-letter-exchange", long_str("")),
                ("x-dead-letter-routing-key", long_str("dead")),
                ("x-message-ttl", AMQPValue::LongInt(5_000)),
                ("x-max-length", AMQPValue::LongInt(30)),
                ("x-overflow", long_str("reject-publish")),
            ]),
            _ => FieldTable::default(),
        };
        let options = QueueDeclareOptions {
            passive,
            durable: true,
            ..Default::default()
        };
        if let Err(e) = self
            .ch()
            .queue_declare(queue.into(), options, arguments)
            .await
        {
            self.fail(&format!(
                "declaring queue {queue} (passive: {passive}) failed: {e}"
            ));
        }
    }

    async fn declare_later(&mut self, passive: bool) {
        if passive {
            let options = ExchangeDeclareOptions {
                passive: true,
                durable: true,
                ..Default::default()
            };
            let kind = ExchangeKind::Custom("x-delayed-message".into());
            let args = table(&[("x-delayed-type", long_str("topic"))]);
            if let Err(e) = self
                .ch()
                .exchange_declare(LATER.into(), kind, options, args)
                .await
            {
                self.fail(&format!("the delayed exchange did not survive: {e}"));
            }
        } else {
            declare_delayed(self.ch(), LATER, "topic", true).await;
        }
    }

    async fn bind(&mut self, queue: &str) {
        let pattern = format!("{queue}.#");
        if let Err(e) = self
            .ch()
            .queue_bind(
                queue.into(),
                LATER.into(),
                pattern.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
        {
            self.fail(&format!("binding {queue} failed: {e}"));
        }
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Every message the broker holds, where it is.
    fn look(&self) -> Seen {
        let mut seen = Seen::new();
        for queue in QUEUES {
            for id in self.ready_in(queue) {
                seen.entry(id).or_default().push(Place::Queue(queue.into()));
            }
        }
        for info in self.broker().delayed_messages("/", LATER, usize::MAX) {
            let (id, queue) = held_id(&info.routing_key);
            seen.entry(id).or_default().push(Place::Held(queue));
        }
        for id in self.kept_in("q3") {
            seen.entry(id).or_default().push(Place::Kept("q3".into()));
        }
        seen
    }

    /// Checks the broker against the model. After a restart what may have been there is
    /// settled by what is (a running broker has removed from memory what its store may not
    /// have committed yet).
    fn check(&mut self, when: &str, restarted: bool) {
        let seen = self.look();
        if let Err(violations) = self.model.check(&seen) {
            self.fail(&format!("{when}:\n{violations}"));
        }
        if restarted {
            self.model.adopt(&seen);
        }
        self.report.checks += 1;
    }

    async fn step(&mut self) {
        let roll = self.rng.below(100);
        self.last_roll = roll;
        let done = match roll {
            0..=19 => self.publish_batch().await,
            20..=33 => self.publish_delayed().await,
            34..=42 => self.get_and_ack().await,
            43..=45 => self.reject_to_dead().await,
            46..=47 => self.reject_at_least_once().await,
            48..=49 => self.toggle_dead3().await,
            50..=53 => self.get_and_requeue().await,
            54..=62 => self.advance(),
            63..=65 => self.cancel_one(),
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
            self.check("after a restart", true);
            self.check_definitions("after a restart").await;
        } else if self.report.steps.is_multiple_of(8) {
            self.check("while running", false);
        }
    }

    async fn run(mut self, steps: u64) -> Report {
        for _ in 0..steps {
            if tokio::time::timeout(6 * STUCK, self.step()).await.is_err() {
                let roll = self.last_roll;
                self.fail(&format!(
                    "step {roll} took over {:?}: the broker is stuck",
                    6 * STUCK
                ));
            }
        }
        let done = self.power_cut().await;
        self.log.push(done);
        self.declare_all(true).await;
        self.check("after the last power cut", true);
        self.check_definitions("after the last power cut").await;
        let done = self.deliver_kept().await;
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

/// (message id, queue) from a held message's routing key `<queue>.<id>`.
fn held_id(routing_key: &str) -> (u64, String) {
    let (queue, id) = routing_key.split_once('.').unwrap_or((routing_key, ""));
    (id.parse().unwrap_or(u64::MAX), queue.to_string())
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// A few seeds in CI (60 steps each, well under a minute); longer runs by environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_was_confirmed_survives_every_failure_the_simulation_drives() {
    const STEPS: u64 = 60;
    let mut total = Report::default();
    let started = Instant::now();
    let mut add = |r: Report| {
        total.seeds += r.seeds;
        total.steps += r.steps;
        total.confirmed += r.confirmed;
        total.nacked += r.nacked;
        total.power_cuts += r.power_cuts;
        total.expired += r.expired;
        total.restarts += r.restarts;
        total.unfinished_closes += r.unfinished_closes;
        total.unfinished_closes_blocked += r.unfinished_closes_blocked;
        total.kept_delivered += r.kept_delivered;
        total.checks += r.checks;
    };
    if let Some(seed) = env_u64("DWELLMQ_SHELL_SIM_SEED") {
        add(Sim::new(seed).await.run(STEPS).await);
    } else if let Some(seconds) = env_u64("DWELLMQ_SHELL_SIM_SECONDS") {
        let first = env_u64("DWELLMQ_SHELL_SIM_FIRST_SEED").unwrap_or(1);
        for seed in first.. {
            if started.elapsed() >= Duration::from_secs(seconds) {
                break;
            }
            add(Sim::new(seed).await.run(STEPS).await);
        }
    } else {
        for seed in 1..=4 {
            add(Sim::new(seed).await.run(STEPS).await);
        }
    }
    println!(
        "shell simulation: {total:?} in {:.1} s, no violation",
        started.elapsed().as_secs_f64()
    );
    assert!(total.confirmed > 0 && total.power_cuts >= total.seeds);
}
