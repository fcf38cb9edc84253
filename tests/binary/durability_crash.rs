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
//! after the final start). After a restart everything is
//! declared passively: a lost definition fails instead of being made again. Kill points: `DWELLMQ_CRASH_POINTS` (default 5;
//! `.ci/run` asks for more), seeded by `DWELLMQ_CRASH_SEED` (printed, with each kill point,
//! so a failing run can be replayed).

#![cfg(unix)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

use crate::crash_definitions::{
    binder, check_definitions, declare_binding_ends, policy_changer, user_changer, DefinitionLedger,
};

/// The broker under test: `DWELLMQ_BIN` when set (`.ci/run` passes the debug build every step
/// shares; the kill points live in this harness, so no release build is needed), else the
/// binary cargo built alongside this test.
fn broker_bin() -> String {
    std::env::var("DWELLMQ_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_dwellmq").to_string())
}

const QUEUE: &str = "crash";
/// A durable `x-delayed-message` exchange, bound to `DUE` with key `d`.
const DELAYED: &str = "crash-delayed";
/// Where the delayed messages go when due; taken only at the start of a round.
const DUE: &str = "crash-due";
/// A persistent publish with a confirm here, after taking from `DUE`: its commit carries (or
/// follows) the removals of what was taken, so those cannot come back after the next kill.
const BARRIER: &str = "crash-barrier";

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

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

async fn connect(url: &str) -> Connection {
    Connection::connect(&format!("{url}/%2f"), ConnectionProperties::default())
        .await
        .expect("connect")
}

/// What the clients know for sure when the broker dies.
#[derive(Default)]
struct Ledger {
    confirmed: HashSet<String>,
    acked: HashSet<String>,
    /// Delayed messages confirmed (held durably by the exchange).
    delayed: HashSet<String>,
    /// Durable queues whose declare-ok came (written by then).
    declared: HashSet<String>,
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

/// Declares `queue` passively on a fresh channel: Err if it is not there.
async fn exists(connection: &Connection, queue: &str) -> bool {
    let Ok(ch) = connection.create_channel().await else {
        return false;
    };
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .is_ok()
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

/// Publishes `d-round-i` messages to the delayed exchange with confirms until the connection
/// dies: every other one due within the round (10-300 ms), the others held past the kill
/// (1-3 s), so that they fall due in a later round or after the final start.
async fn delayed_publisher(url: String, round: u64, seed: u64, ledger: Arc<Mutex<Ledger>>) {
    let mut rng = Rng(seed ^ (round + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
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
        let body = format!("d-{round}-{i}");
        let delay = if i % 2 == 0 {
            10 + rng.below(290)
        } else {
            1_000 + rng.below(2_000)
        };
        let mut headers = FieldTable::default();
        headers.insert("x-delay".into(), AMQPValue::LongLongInt(delay as i64));
        let Ok(confirm) = ch
            .basic_publish(
                DELAYED.into(),
                "d".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                // Persistent, so that the queue it reaches keeps it too (the exchange keeps
                // what it holds whatever the mode).
                BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_headers(headers),
            )
            .await
        else {
            return;
        };
        match confirm.await {
            Ok(c) if c.is_ack() => {
                ledger.lock().unwrap().delayed.insert(body);
            }
            _ => return,
        }
    }
}

/// Declares the delayed exchange, its queue and the barrier queue (all durable; idempotent).
async fn declare_delayed(ch: &Channel) {
    let mut args = FieldTable::default();
    args.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("direct".into()),
    );
    ch.exchange_declare(
        DELAYED.into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        args,
    )
    .await
    .unwrap();
    for queue in [DUE, BARRIER] {
        ch.queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    ch.queue_bind(
        DUE.into(),
        DELAYED.into(),
        "d".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

/// Takes everything in `DUE` (without ack), then makes that taking durable with a confirmed
/// publish to `BARRIER`. Only the first round declares: after a restart every definition must
/// be there already (declared passively: a lost one fails instead of being made again).
async fn take_due(url: &str, first: bool) -> Vec<String> {
    let connection = connect(url).await;
    let ch = connection.create_channel().await.unwrap();
    if first {
        declare_delayed(&ch).await;
    } else {
        for queue in [DUE, BARRIER] {
            assert!(exists(&connection, queue).await, "queue {queue} lost");
        }
        ch.exchange_declare(
            DELAYED.into(),
            ExchangeKind::Custom("x-delayed-message".into()),
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("the delayed exchange survived");
    }
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(DUE.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        out.push(String::from_utf8_lossy(&m.delivery.data).to_string());
    }
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "".into(),
            BARRIER.into(),
            BasicPublishOptions::default(),
            b"barrier",
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack(), "the barrier is confirmed");
    let _ = connection.close(200, "bye".into()).await;
    out
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

/// Counts delayed messages taken from `DUE`: each at most once over the whole run.
fn count_delivered(delivered: &mut HashMap<String, u32>, taken: Vec<String>, seed: u64) {
    for body in taken {
        let n = delivered.entry(body.clone()).or_default();
        *n += 1;
        assert_eq!(
            *n, 1,
            "delayed message {body} delivered twice (seed {seed})"
        );
    }
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_messages_survive_sigkill_at_random_moments() {
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
    println!("crash test: {points} kill points, DWELLMQ_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = std::env::temp_dir().join(format!("dwellmq-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    let mut previous: Option<Ledger> = None;
    let mut total_confirmed = 0;
    let mut delayed_confirmed: HashSet<String> = HashSet::new();
    let mut delivered: HashMap<String, u32> = HashMap::new();
    let mut kill_points = Vec::new();
    let definitions = Arc::new(Mutex::new(DefinitionLedger::default()));
    for round in 0..points {
        let (mut broker, url, http) = spawn(&dir);
        let recovered = drain(&url, round == 0).await;
        if round == 0 {
            let connection = connect(&url).await;
            let ch = connection.create_channel().await.unwrap();
            declare_binding_ends(&ch, true).await;
            let _ = connection.close(200, "bye".into()).await;
        } else {
            check_definitions(http, &url, &definitions, round, seed).await;
        }
        definitions.lock().unwrap().next_round();
        if let Some(ledger) = previous.take() {
            check_declared(&url, &ledger, round, seed).await;
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
            total_confirmed += ledger.confirmed.len();
        }
        count_delivered(&mut delivered, take_due(&url, round == 0).await, seed);
        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let mut tasks = Vec::new();
        for p in 0..3 {
            tasks.push(tokio::spawn(publisher(
                url.clone(),
                round,
                p,
                Arc::clone(&ledger),
            )));
        }
        tasks.push(tokio::spawn(consumer(url.clone(), Arc::clone(&ledger))));
        tasks.push(tokio::spawn(delayed_publisher(
            url.clone(),
            round,
            seed,
            Arc::clone(&ledger),
        )));
        tasks.push(tokio::spawn(declarer(
            url.clone(),
            round,
            Arc::clone(&ledger),
        )));
        let ledger_of_definitions = || Arc::clone(&definitions);
        tasks.push(tokio::spawn(user_changer(
            http,
            round,
            ledger_of_definitions(),
        )));
        tasks.push(tokio::spawn(policy_changer(
            http,
            round,
            ledger_of_definitions(),
        )));
        tasks.push(tokio::spawn(binder(
            url.clone(),
            round,
            ledger_of_definitions(),
        )));
        // The kill comes at a random moment once every kind of write is under way (on a slow
        // or loaded machine connecting alone can take longer than the window).
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            let under_way = {
                let ledger = ledger.lock().unwrap();
                !ledger.confirmed.is_empty()
                    && !ledger.delayed.is_empty()
                    && !ledger.declared.is_empty()
            } && definitions
                .lock()
                .unwrap()
                .acked_this_round
                .iter()
                .all(|&n| n > 0);
            if under_way {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let kill_after = rng.below(450);
        kill_points.push(kill_after);
        println!("crash test: round {round}: SIGKILL {kill_after} ms into the writes");
        tokio::time::sleep(Duration::from_millis(kill_after)).await;
        // SIGKILL: no shutdown, no last commit.
        broker.kill();
        for task in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        let mut ledger = std::mem::take(&mut *ledger.lock().unwrap());
        delayed_confirmed.extend(ledger.delayed.drain());
        previous = Some(ledger);
    }
    println!("crash test: kill points (ms into each round's writes): {kill_points:?}");
    // The last round's messages, checked once more after a clean start.
    let (mut broker, url, http) = spawn(&dir);
    let recovered = drain(&url, false).await;
    check_definitions(http, &url, &definitions, points, seed).await;
    if let Some(ledger) = previous {
        check_declared(&url, &ledger, points, seed).await;
        let unique: HashSet<&String> = recovered.iter().collect();
        assert_eq!(unique.len(), recovered.len(), "duplicates (seed {seed})");
        for body in ledger.confirmed.difference(&ledger.acked) {
            assert!(unique.contains(body), "confirmed {body} lost (seed {seed})");
        }
        total_confirmed += ledger.confirmed.len();
    }
    // Every confirmed delayed message falls due within 3 s of its publish: all of them are
    // delivered within a few seconds of this start (overdue ones at once), none twice.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        count_delivered(&mut delivered, take_due(&url, false).await, seed);
        let missing: Vec<&String> = delayed_confirmed
            .iter()
            .filter(|body| !delivered.contains_key(*body))
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
    let _ = std::fs::remove_dir_all(&dir);
    let [users, policies, bindings] = definitions.lock().unwrap().known();
    println!("crash test: {users} users, {policies} policies and {bindings} binding keys checked");
    assert!(
        users > 0 && policies > 0 && bindings > 0,
        "no definition change was acknowledged before the kills"
    );
    println!(
        "crash test: {total_confirmed} confirmed messages and {} confirmed delayed messages checked",
        delayed_confirmed.len()
    );
    assert!(
        total_confirmed > 0,
        "nothing was confirmed before the kills"
    );
    assert!(
        !delayed_confirmed.is_empty(),
        "no delayed message was confirmed before the kills"
    );
}
