//! The test double's budgets (issue 14), measured end to end:
//!
//! - `Broker::start` until ready, in memory (target ≤ 5 ms);
//! - the binary's exec until its URL is on stdout (≤ 50 ms);
//! - a reset back to a fixture of 100 objects (≤ 1 ms);
//! - `POST /test/clock/advance` past 10,000 held messages until all are written to the
//!   consumer's socket (≤ 50 ms; the endpoint answers only then).
//!
//! `cargo bench --bench test_double` (prints medians and maxima; a quiet machine gives
//! figures worth comparing).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dwellmq::{Broker, BrokerConfig};
use futures_lite::StreamExt;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const T0_MS: u64 = 1_767_225_600_000;

fn report(what: &str, budget_ms: f64, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = ms(samples[samples.len() / 2]);
    let max = ms(samples[samples.len() - 1]);
    let verdict = if median <= budget_ms { "ok" } else { "OVER" };
    println!(
        "{what:<52} median {median:>8.3} ms   max {max:>8.3} ms   budget {budget_ms} ms  {verdict}   ({} runs)",
        samples.len()
    );
}

async fn broker_start() -> Vec<Duration> {
    let mut samples = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let broker = Broker::start(BrokerConfig::ephemeral().with_manual_clock(T0_MS))
            .await
            .expect("broker starts");
        samples.push(started.elapsed());
        broker.shutdown().await;
    }
    samples
}

fn binary_start() -> Vec<Duration> {
    let binary = env!("CARGO_BIN_EXE_dwellmq");
    let mut samples = Vec::new();
    for _ in 0..20 {
        let started = Instant::now();
        let mut child = Command::new(binary)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--http",
                "127.0.0.1:0",
                "--in-memory",
            ])
            .args(["--manual-clock", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("a URL line");
        samples.push(started.elapsed());
        assert!(line.starts_with("amqp://"), "{line}");
        let _ = child.kill();
        let _ = child.wait();
    }
    samples
}

/// A definitions file of 100 objects: 40 queues, 30 exchanges, 30 bindings.
fn fixture() -> tempfile_path::TempFile {
    let queues: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"name":"q{i}","vhost":"/","durable":true,"auto_delete":false,"arguments":{{}}}}"#))
        .collect();
    let exchanges: Vec<String> = (0..30)
        .map(|i| format!(r#"{{"name":"x{i}","vhost":"/","type":"topic","durable":true,"auto_delete":false,"internal":false,"arguments":{{}}}}"#))
        .collect();
    let bindings: Vec<String> = (0..30)
        .map(|i| format!(r#"{{"source":"x{i}","vhost":"/","destination":"q{i}","destination_type":"queue","routing_key":"k.#","arguments":{{}}}}"#))
        .collect();
    let text = format!(
        r#"{{"queues":[{}],"exchanges":[{}],"bindings":[{}]}}"#,
        queues.join(","),
        exchanges.join(","),
        bindings.join(",")
    );
    tempfile_path::TempFile::with(&text)
}

async fn reset_fixture() -> Vec<Duration> {
    let file = fixture();
    let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
    config.definitions = Some(file.path.clone());
    let broker = Broker::start(config).await.expect("broker starts");
    assert_eq!(broker.queue_names("/").len(), 40);
    let mut samples = Vec::new();
    for _ in 0..100 {
        let started = Instant::now();
        broker.reset().expect("reset");
        samples.push(started.elapsed());
    }
    assert_eq!(broker.queue_names("/").len(), 40);
    broker.shutdown().await;
    samples
}

/// One HTTP/1.1 request with guest's credentials; the status line's code.
async fn http_post(addr: SocketAddr, path: &str, body: &str) -> u16 {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("HTTP connects");
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request sent");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("answer read");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

async fn advance_past_held(messages: usize) -> Vec<Duration> {
    let mut samples = Vec::new();
    for _ in 0..5 {
        let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
        config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        let broker = Broker::start(config).await.expect("broker starts");
        let http = broker.http_addr().expect("HTTP on");
        let conn = Connection::connect(
            &format!("{}/%2f", broker.amqp_url()),
            ConnectionProperties::default(),
        )
        .await
        .expect("connects");
        let ch = conn.create_channel().await.unwrap();
        let mut args = FieldTable::default();
        args.insert(
            "x-delayed-type".into(),
            AMQPValue::LongString("fanout".into()),
        );
        ch.exchange_declare(
            "d".into(),
            ExchangeKind::Custom("x-delayed-message".into()),
            ExchangeDeclareOptions::default(),
            args,
        )
        .await
        .unwrap();
        ch.queue_declare(
            "q".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.queue_bind(
            "q".into(),
            "d".into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        for i in 0..messages {
            let mut headers = FieldTable::default();
            headers.insert(
                "x-delay".into(),
                AMQPValue::LongLongInt(1000 + (i % 1000) as i64),
            );
            ch.basic_publish(
                "d".into(),
                "".into(),
                BasicPublishOptions::default(),
                b"reminder",
                BasicProperties::default().with_headers(headers),
            )
            .await
            .unwrap();
        }
        ch.wait_for_confirms().await.unwrap();
        assert_eq!(broker.delayed_total(), messages);
        let consumer_ch = conn.create_channel().await.unwrap();
        let mut consumer = consumer_ch
            .basic_consume(
                "q".into(),
                "".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        let reader = tokio::spawn(async move {
            let mut seen = 0;
            while seen < messages {
                consumer.next().await.expect("open").expect("delivery");
                seen += 1;
            }
        });
        let started = Instant::now();
        assert_eq!(
            http_post(http, "/test/clock/advance", r#"{"ms":3000}"#).await,
            200
        );
        samples.push(started.elapsed());
        reader.await.unwrap();
        let _ = conn.close(200, "done".into()).await;
        broker.shutdown().await;
    }
    samples
}

/// A file removed when dropped (no tempfile crate among the dependencies).
mod tempfile_path {
    pub struct TempFile {
        pub path: std::path::PathBuf,
    }

    impl TempFile {
        pub fn with(text: &str) -> Self {
            let path = std::env::temp_dir()
                .join(format!("dwellmq-bench-fixture-{}.json", std::process::id()));
            let mut file = std::fs::File::create(&path).expect("fixture written");
            std::io::Write::write_all(&mut file, text.as_bytes()).expect("fixture written");
            TempFile { path }
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it as a quick check.
    let quick = !std::env::args().any(|a| a == "--bench");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _ = std::io::stdout().flush();
    report(
        "Broker::start until ready (in memory)",
        5.0,
        runtime.block_on(broker_start()),
    );
    report("binary exec until the URL is printed", 50.0, binary_start());
    report(
        "reset to a fixture of 100 objects",
        1.0,
        runtime.block_on(reset_fixture()),
    );
    let held = if quick { 1_000 } else { 10_000 };
    report(
        &format!("HTTP advance past {held} held until all are sent"),
        50.0,
        runtime.block_on(advance_past_held(held)),
    );
}
