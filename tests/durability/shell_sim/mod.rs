//! The broker shell on a disk that fails, as a seeded simulation through a real client.
//!
//! One seed drives persistent and transient publishes with confirms (some still in flight at a
//! crash), acks, requeues, rejects into a dead-letter queue, holds at a durable delayed
//! exchange, cancels, queue and delayed-exchange purges, deletes and redeclares, clock advances,
//! failed commits, failed fsyncs, clean restarts and power cuts, against the embedded broker on
//! the store's fault backend (writes not fsynced are lost at a power cut). After every restart
//! it declares every definition passively, looks at every queue and every held message, and
//! checks them against a model (`model.rs`): a confirmed message not removed is there exactly
//! once, a removal known to be committed never comes back, nothing is there twice.
//!
//! CI runs a few seeds. `DWELLMQ_SHELL_SIM_SECONDS=N` runs seed after seed for N seconds
//! (`cargo test --release --test durability shell_sim -- --nocapture`), and
//! `DWELLMQ_SHELL_SIM_SEED=S` replays one seed's operations (thread timing is not replayed).

mod model;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{connect, declare_delayed, long_str, table, DataDir, T0_MS};
use dwellmq::{Broker, BrokerConfig, BrokerHandle, StoreFaults};
use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind, PublisherConfirm};
use model::{Model, Place, Seen};

/// Queues the simulation uses: `q0` (classic, bound to the delayed exchange), `q1` (quorum,
/// bound to it too), `q2` (classic, dead-letters into `dead`), `dead`.
const QUEUES: [&str; 4] = ["q0", "q1", "q2", "dead"];
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
    pub restarts: u64,
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
    log: Vec<String>,
    /// What the step under way rolled (for a report of a stuck one).
    last_roll: u64,
    report: Report,
}

fn config(dir: &DataDir, faults: &Arc<StoreFaults>, now_ms: u64) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        store_faults: Some(Arc::clone(faults)),
        ..BrokerConfig::ephemeral().with_manual_clock(now_ms)
    }
}

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
            log: Vec::new(),
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
        let broker = Broker::start(config(&self.dir, &self.faults, now_ms))
            .await
            .unwrap_or_else(|e| self.fail(&format!("the broker does not start: {e}")));
        self.attach(broker).await;
    }

    async fn attach(&mut self, broker: BrokerHandle) {
        let connection = connect(&broker).await;
        let ch = connection.create_channel().await.expect("channel");
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
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
        if !passive {
            self.bind("q0").await;
            self.bind("q1").await;
        }
    }

    async fn declare_queue(&mut self, queue: &str, passive: bool) {
        let arguments = match queue {
            "q1" => table(&[("x-queue-type", long_str("quorum"))]),
            "q2" => table(&[
                ("x-dead-letter-exchange", long_str("")),
                ("x-dead-letter-routing-key", long_str("dead")),
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

    /// Sends one publish; the model hears of it as unconfirmed until its confirm comes.
    async fn send(
        &mut self,
        exchange: &str,
        key: &str,
        id: u64,
        properties: BasicProperties,
    ) -> PublisherConfirm {
        self.model.unconfirmed(id);
        let body = id.to_string();
        match self
            .ch()
            .basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                properties,
            )
            .await
        {
            Ok(confirm) => confirm,
            Err(e) => self.fail(&format!("publishing {id} failed: {e}")),
        }
    }

    /// Waits for confirms; acked ones are confirmed in `places`. Returns (acked, nacked).
    async fn settle_confirms(
        &mut self,
        confirms: Vec<(u64, Vec<Place>, PublisherConfirm)>,
    ) -> (usize, usize) {
        let (mut acked, mut nacked) = (0, 0);
        for (id, places, confirm) in confirms {
            match bounded("a confirm", confirm).await {
                Ok(c) if c.is_ack() => {
                    self.model.confirmed(id, places);
                    acked += 1;
                }
                Ok(_) => nacked += 1,
                Err(e) => self.fail(&format!("the confirm of {id} failed: {e}")),
            }
        }
        self.report.confirmed += acked as u64;
        self.report.nacked += nacked as u64;
        (acked, nacked)
    }

    /// Publishes 1-8 messages straight to a queue (transient ones to the quorum queue, which
    /// keeps them all the same).
    async fn publish_batch(&mut self) -> String {
        let queue = self.rng.pick(&QUEUES);
        let n = 1 + self.rng.below(8);
        let mut confirms = Vec::new();
        for _ in 0..n {
            let id = self.next_id();
            let transient = queue == "q1" && self.rng.below(2) == 0;
            if transient {
                self.log.push(format!("  ({id} transient)"));
            }
            let properties = if transient {
                BasicProperties::default()
            } else {
                persistent()
            };
            let confirm = self.send("", queue, id, properties).await;
            confirms.push((id, vec![Place::Queue(queue.into())], confirm));
        }
        let first = self.next_id + 1 - n;
        let (acked, nacked) = self.settle_confirms(confirms).await;
        format!(
            "publish {first}..={} to {queue}: {acked} acked, {nacked} nacked",
            self.next_id
        )
    }

    /// Publishes 1-4 messages held 1 ms to 4 s (some beyond the scheduler's horizon).
    async fn publish_delayed(&mut self) -> String {
        let n = 1 + self.rng.below(4);
        let mut confirms = Vec::new();
        for _ in 0..n {
            let id = self.next_id();
            let queue = self.rng.pick(&["q0", "q1"]);
            let delay = 1 + self.rng.below(4_000) as i32;
            let properties =
                persistent().with_headers(table(&[("x-delay", AMQPValue::LongInt(delay))]));
            let key = format!("{queue}.{id}");
            let confirm = self.send(LATER, &key, id, properties).await;
            let places = vec![Place::Held(queue.into()), Place::Queue(queue.into())];
            confirms.push((id, places, confirm));
        }
        let (acked, nacked) = self.settle_confirms(confirms).await;
        format!("hold {n} until up to 4 s later: {acked} acked, {nacked} nacked")
    }

    /// Gets one message (manual ack) from `queue`.
    async fn get(&mut self, queue: &str) -> Option<(u64, u64)> {
        let got = bounded(
            "basic.get",
            self.ch()
                .basic_get(queue.into(), BasicGetOptions { no_ack: false }),
        )
        .await;
        match got {
            Ok(m) => m.map(|m| (id_of(&m.delivery.data), m.delivery.delivery_tag)),
            Err(e) => self.fail(&format!("basic.get on {queue} failed: {e}")),
        }
    }

    /// A round trip on the channel: what was sent before it (an ack, nack or reject, which
    /// have no reply) has been handled.
    async fn round_trip(&mut self, queue: &str) {
        self.declare_queue(queue, true).await;
    }

    async fn get_and_ack(&mut self) -> String {
        let queue = self.rng.pick(&QUEUES);
        let Some((id, tag)) = self.get(queue).await else {
            return format!("get {queue}: empty");
        };
        if let Err(e) = self.ch().basic_ack(tag, BasicAckOptions::default()).await {
            self.fail(&format!("ack failed: {e}"));
        }
        self.round_trip(queue).await;
        self.model.removed(id);
        format!("get {id} from {queue} and ack")
    }

    /// Requeues one (not on the quorum queue, whose delivery limit would drop it in the end).
    async fn get_and_requeue(&mut self) -> String {
        let queue = self.rng.pick(&["q0", "q2", "dead"]);
        let Some((id, tag)) = self.get(queue).await else {
            return format!("get {queue}: empty");
        };
        let options = BasicNackOptions {
            requeue: true,
            multiple: false,
        };
        if let Err(e) = self.ch().basic_nack(tag, options).await {
            self.fail(&format!("nack failed: {e}"));
        }
        self.round_trip(queue).await;
        format!("get {id} from {queue} and requeue")
    }

    async fn reject_to_dead(&mut self) -> String {
        let Some((id, tag)) = self.get("q2").await else {
            return "get q2: empty".into();
        };
        self.model.may_move(id, Place::Queue("dead".into()));
        if let Err(e) = self
            .ch()
            .basic_reject(tag, BasicRejectOptions { requeue: false })
            .await
        {
            self.fail(&format!("reject failed: {e}"));
        }
        self.round_trip("dead").await;
        format!("get {id} from q2 and reject it into dead")
    }

    fn advance(&mut self) -> String {
        let by = self.rng.below(3_000);
        let released = self.broker().advance(Duration::from_millis(by));
        format!("advance {by} ms: {released} released")
    }

    fn cancel_one(&mut self) -> String {
        let held = self.broker().delayed_messages("/", LATER, 10_000);
        if held.is_empty() {
            return "cancel: nothing held".into();
        }
        let info = &held[self.rng.below(held.len() as u64) as usize];
        let id = held_id(&info.routing_key).0;
        if self.broker().cancel_delayed(info.id) {
            self.model.removed(id);
            format!("cancel held {id}")
        } else {
            format!("cancel held {id}: already gone")
        }
    }

    /// Ids ready in `queue` now.
    fn ready_in(&self, queue: &str) -> Vec<u64> {
        self.broker()
            .peek_messages("/", queue, usize::MAX)
            .iter()
            .map(|m| id_of(&m.body))
            .collect()
    }

    async fn purge_queue(&mut self) -> String {
        let queue = self.rng.pick(&QUEUES);
        let ids = self.ready_in(queue);
        let purged = match self
            .ch()
            .queue_purge(queue.into(), QueuePurgeOptions::default())
            .await
        {
            Ok(n) => n,
            Err(e) => self.fail(&format!("purging {queue} failed: {e}")),
        };
        if purged as usize != ids.len() {
            self.fail(&format!(
                "purge of {queue} said {purged}, {} were ready",
                ids.len()
            ));
        }
        for id in &ids {
            self.model.removed(*id);
        }
        format!("purge {queue}: {purged}")
    }

    async fn delete_and_redeclare_queue(&mut self) -> String {
        let queue = self.rng.pick(&QUEUES);
        let ids = self.ready_in(queue);
        let deleted = match self
            .ch()
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await
        {
            Ok(n) => n,
            Err(e) => self.fail(&format!("deleting {queue} failed: {e}")),
        };
        if deleted as usize != ids.len() {
            self.fail(&format!(
                "delete of {queue} said {deleted}, {} were ready",
                ids.len()
            ));
        }
        for id in &ids {
            self.model.removed(*id);
        }
        self.declare_queue(queue, false).await;
        if queue == "q0" || queue == "q1" {
            self.bind(queue).await;
        }
        format!("delete {queue} ({deleted}) and declare it again")
    }

    fn held_ids(&self) -> Vec<u64> {
        self.broker()
            .delayed_messages("/", LATER, usize::MAX)
            .iter()
            .map(|info| held_id(&info.routing_key).0)
            .collect()
    }

    fn purge_later(&mut self) -> String {
        let ids = self.held_ids();
        let purged = self.broker().purge_delayed("/", LATER);
        if purged != ids.len() {
            self.fail(&format!(
                "the delayed purge said {purged}, {} were held",
                ids.len()
            ));
        }
        for id in ids {
            self.model.removed(id);
        }
        format!("purge the delayed exchange: {purged}")
    }

    async fn delete_and_redeclare_later(&mut self) -> String {
        let ids = self.held_ids();
        if let Err(e) = self
            .ch()
            .exchange_delete(LATER.into(), ExchangeDeleteOptions::default())
            .await
        {
            self.fail(&format!("deleting the delayed exchange failed: {e}"));
        }
        for &id in &ids {
            self.model.removed(id);
        }
        self.declare_later(false).await;
        self.bind("q0").await;
        self.bind("q1").await;
        format!(
            "delete the delayed exchange ({} held) and declare it again",
            ids.len()
        )
    }

    /// A confirmed publish to the scratch queue: everything submitted before it is committed
    /// (commits end in order; a failed one is retried whole before a later one ends). Failures
    /// still to come are used up by the nacks.
    async fn sync(&mut self) -> String {
        for attempt in 0..100 {
            let id = self.next_id();
            let confirm = self.send("", SCRATCH, id, persistent()).await;
            match bounded("a scratch confirm", confirm).await {
                Ok(c) if c.is_ack() => {
                    self.model.removed(id);
                    self.model.removals_committed();
                    return format!("sync ({attempt} nacked first)");
                }
                Ok(_) => self.model.removed(id),
                Err(e) => self.fail(&format!("the scratch confirm failed: {e}")),
            }
        }
        self.fail("the store never committed again")
    }

    /// The next 1-3 message commits fail; a batch runs into them, then a sync uses up the rest.
    async fn failing_commits(&mut self) -> String {
        let n = 1 + self.rng.below(3);
        self.broker().fail_next_writes(n);
        let batch = if self.rng.below(2) == 0 {
            self.publish_batch().await
        } else {
            self.publish_delayed().await
        };
        let sync = self.sync().await;
        format!("fail the next {n} commits; {batch}; {sync}")
    }

    /// Every fsync fails for 20-300 ms while a batch is published (a publisher blocked by the
    /// disk alarm waits for the disk to work again); then the rest of the batch goes through.
    async fn failing_fsync(&mut self) -> String {
        self.faults.fail_sync.store(true, Ordering::SeqCst);
        let failing_for = Duration::from_millis(20 + self.rng.below(280));
        let faults = Arc::clone(&self.faults);
        tokio::spawn(async move {
            tokio::time::sleep(failing_for).await;
            faults.fail_sync.store(false, Ordering::SeqCst);
        });
        let queue = self.rng.pick(&["q0", "q2"]);
        let n = 2 + self.rng.below(4);
        let mut confirms = Vec::new();
        for _ in 0..n {
            let id = self.next_id();
            let confirm = self.send("", queue, id, persistent()).await;
            confirms.push((id, vec![Place::Queue(queue.into())], confirm));
        }
        let (acked, nacked) = self.settle_confirms(confirms).await;
        // The store reopens and checks its file after a failed fsync; until it has, reads fail
        // and the disk alarm is up.
        let since = Instant::now();
        while self.broker().disk_alarm() {
            if since.elapsed() > STUCK {
                self.fail("the disk alarm never cleared after the fsync failure");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        format!(
            "fsync fails for {failing_for:?} under a batch to {queue}: {acked} acked, {nacked} nacked"
        )
    }

    /// Power off: the disk keeps what was fsynced, at a moment chosen while publishes may be
    /// in flight; a new broker starts on that image.
    async fn power_cut(&mut self) -> String {
        let in_flight = self.rng.below(2) * (1 + self.rng.below(10));
        let landed = Arc::new(parking_lot::Mutex::new(Vec::new()));
        for _ in 0..in_flight {
            let id = self.next_id();
            let queue = self.rng.pick(&["q0", "q1", "q2"]);
            let confirm = self.send("", queue, id, persistent()).await;
            let landed = Arc::clone(&landed);
            tokio::spawn(async move {
                if let Ok(c) = confirm.await {
                    if c.is_ack() {
                        landed.lock().push((id, queue));
                    }
                }
            });
        }
        let wait = self.rng.below(3_000);
        tokio::time::sleep(Duration::from_micros(wait)).await;
        // Every confirm that arrived before the image was taken was fsynced before it.
        let confirmed = landed.lock().clone();
        let image = DataDir::new("shell-sim");
        std::fs::create_dir_all(image.path()).expect("image directory");
        let file = dwellmq_store::DB_FILE;
        if let Err(e) = self
            .faults
            .disk_image(&self.dir.path().join(file), &image.path().join(file))
        {
            self.fail(&format!("taking the disk image failed: {e}"));
        }
        for (id, queue) in &confirmed {
            self.model
                .confirmed(*id, vec![Place::Queue((*queue).into())]);
        }
        let now_ms = self.broker().now_ms();
        self.stop().await;
        self.dir = image;
        self.faults = Arc::new(StoreFaults::default());
        self.start(now_ms).await;
        self.report.power_cuts += 1;
        format!(
            "power cut with {in_flight} in flight ({} confirmed before it)",
            confirmed.len()
        )
    }

    async fn stop(&mut self) {
        self.ch = None;
        if let Some(connection) = self.connection.take() {
            let _ = connection.close(200, "bye".into()).await;
        }
        if let Some(broker) = self.broker.take() {
            broker.shutdown().await;
        }
    }

    async fn clean_restart(&mut self) -> String {
        self.ch = None;
        if let Some(connection) = self.connection.take() {
            let _ = connection.close(200, "bye".into()).await;
        }
        let broker = self.broker.take().expect("a broker runs");
        match bounded("a restart", broker.restart()).await {
            Ok(broker) => self.attach(broker).await,
            Err(e) => self.fail(&format!("the restart failed: {e}")),
        }
        self.report.restarts += 1;
        "clean restart".into()
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
            0..=21 => self.publish_batch().await,
            22..=37 => self.publish_delayed().await,
            38..=49 => self.get_and_ack().await,
            50..=54 => self.reject_to_dead().await,
            55..=58 => self.get_and_requeue().await,
            59..=68 => self.advance(),
            69..=71 => self.cancel_one(),
            72..=73 => self.purge_queue().await,
            74..=75 => self.delete_and_redeclare_queue().await,
            76 => self.purge_later(),
            77 => self.delete_and_redeclare_later().await,
            78..=83 => self.sync().await,
            84..=88 => self.failing_commits().await,
            89..=90 => self.failing_fsync().await,
            91..=92 => self.clean_restart().await,
            _ => self.power_cut().await,
        };
        self.log.push(done);
        self.report.steps += 1;
        if roll >= 91 {
            self.declare_all(true).await;
            self.check("after a restart", true);
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
        total.restarts += r.restarts;
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
