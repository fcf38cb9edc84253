//! Crash safety of the binary on a data directory: publishers send persistent messages with
//! confirms from several connections while a consumer acks, and another publishes to a
//! durable delayed exchange with confirms (some delays fall due during the round, others are
//! still held at the kill), another declares durable queues, and others change users,
//! permissions and policies over HTTP and bind and unbind a queue (`crash_definitions.rs`); the
//! broker is killed with SIGKILL at a random moment once all of that is under way, and after a
//! restart every message that was confirmed and not acked is there exactly once, every queue
//! whose declare-ok came is there, every acknowledged user, permission, policy and binding
//! change is there (nothing acknowledged as deleted comes back), and every confirmed delayed
//! message is delivered exactly once, in the round it falls due or a later one (the last ones
//! after the final start), though an operator moves held ones over HTTP all along
//! (`crash_delayed.rs`). After a restart everything is
//! declared passively: a lost definition fails instead of being made again. Kill points: `DWELLMQ_CRASH_POINTS` (default 5;
//! `.ci/run` asks for more), seeded by `DWELLMQ_CRASH_SEED` (printed, with each kill point,
//! so a failing run can be replayed).

#![cfg(unix)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use tokio::task::JoinHandle;

use crate::crash_definitions::{
    binder, check_definitions, declare_binding_ends, policy_changer, user_changer, DefinitionLedger,
};
use crate::crash_delayed::{count_delivered, delayed_publisher, mover, take_due};
use crate::crash_support::{connect, exists, Ledger, Rng};

/// The broker under test: `DWELLMQ_BIN` when set (`.ci/run` passes the debug build every step
/// shares; the kill points live in this harness, so no release build is needed), else the
/// binary cargo built alongside this test.
fn broker_bin() -> String {
    std::env::var("DWELLMQ_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_dwellmq").to_string())
}

const QUEUE: &str = "crash";

/// The broker process, killed if the test ends early.
struct Broker(Child);

impl Broker {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts the binary on `dir`; returns it, its AMQP URL and its HTTP address.
fn spawn(dir: &Path) -> (Broker, String, std::net::SocketAddr) {
    let mut child = Command::new(broker_bin())
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .env("DWELLMQ_HTTP", "127.0.0.1:0")
        .env("DWELLMQ_LOG", "warn")
        .env_remove("DWELLMQ_LISTEN")
        .env_remove("DWELLMQ_CONFIG")
        .env_remove("DWELLMQ_IN_MEMORY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // The first line is the AMQP URL, the second the HTTP one.
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send((lines.next(), lines.next()));
        for _ in lines {}
    });
    let lines = rx.recv_timeout(Duration::from_secs(30));
    let http = lines.as_ref().ok().and_then(|(_, http)| {
        let http = http.as_ref()?.as_ref().ok()?;
        http.strip_prefix("http://")?.parse().ok()
    });
    match (lines, http) {
        (Ok((Some(Ok(url)), _)), Some(http)) => (Broker(child), url, http),
        (other, _) => {
            let _ = child.kill();
            panic!("no URL lines on stdout: {other:?}")
        }
    }
}

/// Declares durable queues `def-round-i` until the connection dies: each declare-ok comes
/// after its definition's commit, so each one answered must be there after the restart.
async fn declarer(url: String, round: u64, ledger: Arc<Mutex<Ledger>>) {
    let connection = connect(&url).await;
    let Ok(ch) = connection.create_channel().await else {
        return;
    };
    for i in 0.. {
        let name = format!("def-{round}-{i}");
        let declared = ch
            .queue_declare(
                name.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await;
        if declared.is_err() {
            return;
        }
        ledger.lock().unwrap().declared.insert(name);
    }
}

/// Publishes `round-p-i` messages with confirms until the connection dies.
async fn publisher(url: String, round: u64, p: u64, ledger: Arc<Mutex<Ledger>>) {
    let connection = connect(&url).await;
    let Ok(ch) = connection.create_channel().await else {
        return;
    };
    if ch
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .is_err()
    {
        return;
    }
    for i in 0.. {
        let body = format!("{round}-{p}-{i}");
        let Ok(confirm) = ch
            .basic_publish(
                "".into(),
                QUEUE.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
        else {
            return;
        };
        match confirm.await {
            Ok(c) if c.is_ack() => {
                ledger.lock().unwrap().confirmed.insert(body);
            }
            _ => return,
        }
    }
}

/// Every queue whose declare-ok came before the kill is there after the restart (declared
/// passively).
async fn check_declared(url: &str, ledger: &Ledger, round: u64, seed: u64) {
    let connection = connect(url).await;
    for name in &ledger.declared {
        assert!(
            exists(&connection, name).await,
            "round {round}: declared queue {name} lost (seed {seed})"
        );
    }
    let _ = connection.close(200, "bye".into()).await;
}

/// Consumes and acks until the connection dies.
async fn consumer(url: String, ledger: Arc<Mutex<Ledger>>) {
    let connection = connect(&url).await;
    let Ok(ch) = connection.create_channel().await else {
        return;
    };
    let Ok(mut deliveries) = ch
        .basic_consume(
            QUEUE.into(),
            "crash-consumer".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
    else {
        return;
    };
    while let Some(Ok(delivery)) = deliveries.next().await {
        let body = String::from_utf8_lossy(&delivery.data).to_string();
        if delivery.ack(BasicAckOptions::default()).await.is_err() {
            return;
        }
        ledger.lock().unwrap().acked.insert(body);
    }
}

/// Everything in the queue, taken with `basic.get` without ack. Declared in the first round
/// only; after a restart passively (it must have survived).
async fn drain(url: &str, first: bool) -> Vec<String> {
    let connection = connect(url).await;
    let ch = connection.create_channel().await.unwrap();
    ch.queue_declare(
        QUEUE.into(),
        QueueDeclareOptions {
            durable: true,
            passive: !first,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("the queue survived the restart");
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(QUEUE.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        out.push(String::from_utf8_lossy(&m.delivery.data).to_string());
    }
    let _ = connection.close(200, "bye".into()).await;
    out
}

/// Settings from the environment: kill points and the seed.
fn settings() -> (u64, u64) {
    let points: u64 = std::env::var("DWELLMQ_CRASH_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let seed: u64 = std::env::var("DWELLMQ_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
        .max(1);
    (points, seed)
}

/// What the whole run knows, round after round.
struct Run {
    seed: u64,
    dir: std::path::PathBuf,
    /// The last round's ledger, checked after the next start.
    previous: Option<Ledger>,
    total_confirmed: usize,
    delayed_confirmed: HashSet<String>,
    delivered: HashMap<String, u32>,
    moved: usize,
    definitions: Arc<Mutex<DefinitionLedger>>,
}

impl Run {
    /// After a start: every message confirmed and not acked in the last round is there once,
    /// and every queue declared then.
    async fn check_previous(&mut self, url: &str, recovered: &[String], round: u64) {
        let Some(ledger) = self.previous.take() else {
            return;
        };
        let seed = self.seed;
        check_declared(url, &ledger, round, seed).await;
        let unique: HashSet<&String> = recovered.iter().collect();
        assert_eq!(
            unique.len(),
            recovered.len(),
            "round {round}: a message came back twice (seed {seed})"
        );
        for body in ledger.confirmed.difference(&ledger.acked) {
            assert!(
                unique.contains(body),
                "round {round}: confirmed message {body} lost (seed {seed})"
            );
        }
        self.total_confirmed += ledger.confirmed.len();
    }

    /// Starts every kind of write against the broker at `url` and `http`.
    fn start_writers(
        &self,
        url: &str,
        http: SocketAddr,
        round: u64,
        ledger: &Arc<Mutex<Ledger>>,
    ) -> Vec<JoinHandle<()>> {
        let seed = self.seed;
        let mut tasks = Vec::new();
        for p in 0..3 {
            tasks.push(tokio::spawn(publisher(
                url.to_string(),
                round,
                p,
                Arc::clone(ledger),
            )));
        }
        tasks.push(tokio::spawn(consumer(url.to_string(), Arc::clone(ledger))));
        let delayed = delayed_publisher(url.to_string(), round, seed, Arc::clone(ledger));
        tasks.push(tokio::spawn(delayed));
        tasks.push(tokio::spawn(mover(http, round, seed, Arc::clone(ledger))));
        tasks.push(tokio::spawn(declarer(
            url.to_string(),
            round,
            Arc::clone(ledger),
        )));
        let definitions = || Arc::clone(&self.definitions);
        tasks.push(tokio::spawn(user_changer(http, round, definitions())));
        tasks.push(tokio::spawn(policy_changer(http, round, definitions())));
        tasks.push(tokio::spawn(binder(url.to_string(), round, definitions())));
        tasks
    }

    /// Waits (at most 20 s: on a slow or loaded machine connecting alone can take longer than
    /// the kill window) until every kind of write is under way.
    async fn wait_until_under_way(&self, ledger: &Mutex<Ledger>) {
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            let under_way = {
                let ledger = ledger.lock().unwrap();
                !ledger.confirmed.is_empty()
                    && !ledger.delayed.is_empty()
                    && !ledger.declared.is_empty()
                    && ledger.moved > 0
            } && self
                .definitions
                .lock()
                .unwrap()
                .acked_this_round
                .iter()
                .all(|&n| n > 0);
            if under_way {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// One round: a start, the checks of the last round, writes, and a SIGKILL `kill_after`
    /// ms once they are under way.
    async fn round(&mut self, round: u64, kill_after: u64) {
        let seed = self.seed;
        let (mut broker, url, http) = spawn(&self.dir);
        let recovered = drain(&url, round == 0).await;
        if round == 0 {
            let connection = connect(&url).await;
            let ch = connection.create_channel().await.unwrap();
            declare_binding_ends(&ch, true).await;
            let _ = connection.close(200, "bye".into()).await;
        } else {
            check_definitions(http, &url, &self.definitions, round, seed).await;
        }
        self.definitions.lock().unwrap().next_round();
        self.check_previous(&url, &recovered, round).await;
        count_delivered(&mut self.delivered, take_due(&url, round == 0).await, seed);
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let tasks = self.start_writers(&url, http, round, &ledger);
        self.wait_until_under_way(&ledger).await;
        println!("crash test: round {round}: SIGKILL {kill_after} ms into the writes");
        tokio::time::sleep(Duration::from_millis(kill_after)).await;
        // SIGKILL: no shutdown, no last commit.
        broker.kill();
        for task in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        let mut ledger = std::mem::take(&mut *ledger.lock().unwrap());
        self.delayed_confirmed.extend(ledger.delayed.drain());
        self.moved += ledger.moved;
        self.previous = Some(ledger);
    }

    /// After a clean start: the last round's messages and definitions, then every confirmed
    /// delayed message delivered (each falls due within 3 s of its publish or its last move:
    /// all within a few seconds of this start, overdue ones at once), none twice.
    async fn finish(mut self, points: u64) {
        let seed = self.seed;
        let (mut broker, url, http) = spawn(&self.dir);
        let recovered = drain(&url, false).await;
        check_definitions(http, &url, &self.definitions, points, seed).await;
        self.check_previous(&url, &recovered, points).await;
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            count_delivered(&mut self.delivered, take_due(&url, false).await, seed);
            let missing: Vec<&String> = self
                .delayed_confirmed
                .iter()
                .filter(|body| !self.delivered.contains_key(*body))
                .collect();
            if missing.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "confirmed delayed messages never delivered (seed {seed}): {missing:?}"
            );
            // Polling the queue: the held ones fall due in real time (at most 3 s from now).
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        broker.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        let [users, policies, bindings] = self.definitions.lock().unwrap().known();
        println!(
            "crash test: {users} users, {policies} policies and {bindings} binding keys checked"
        );
        assert!(
            users > 0 && policies > 0 && bindings > 0,
            "no definition change was acknowledged before the kills"
        );
        println!(
            "crash test: {} confirmed messages and {} confirmed delayed messages checked; {} moves \
             of held messages answered",
            self.total_confirmed,
            self.delayed_confirmed.len(),
            self.moved
        );
        assert!(
            self.total_confirmed > 0,
            "nothing was confirmed before the kills"
        );
        assert!(
            !self.delayed_confirmed.is_empty(),
            "no delayed message was confirmed before the kills"
        );
        assert!(
            self.moved > 0,
            "no move of a held message was answered before the kills"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_messages_survive_sigkill_at_random_moments() {
    let (points, seed) = settings();
    println!("crash test: {points} kill points, DWELLMQ_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = std::env::temp_dir().join(format!("dwellmq-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut run = Run {
        seed,
        dir,
        previous: None,
        total_confirmed: 0,
        delayed_confirmed: HashSet::new(),
        delivered: HashMap::new(),
        moved: 0,
        definitions: Arc::new(Mutex::new(DefinitionLedger::default())),
    };
    let mut kill_points = Vec::new();
    for round in 0..points {
        let kill_after = rng.below(450);
        kill_points.push(kill_after);
        run.round(round, kill_after).await;
    }
    println!("crash test: kill points (ms into each round's writes): {kill_points:?}");
    run.finish(points).await;
}
