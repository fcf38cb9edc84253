//! The binary's output streams: the URL lines it prints (the metrics URL with `--metrics`), and
//! that a reader going away stops nothing. A harness that reads the first line and closes the
//! pipe, a supervisor that closes stdout, a log pipe that breaks: the broker serves on.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::common::*;

const BIN: &str = env!("CARGO_BIN_EXE_dwellmq");

/// The binary with `args`, nothing from the environment, and stdin closed.
fn broker(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command.args(args).stdin(Stdio::null());
    for name in [
        "DWELLMQ_HTTP",
        "DWELLMQ_LISTEN",
        "DWELLMQ_CONFIG",
        "DWELLMQ_DATA_DIR",
        "DWELLMQ_IN_MEMORY",
        "DWELLMQ_LOG",
        "DWELLMQ_METRICS",
    ] {
        command.env_remove(name);
    }
    command
}

/// Kills and reaps the child when dropped, so a failing test leaks no broker.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first `count` lines of `stdout`, read on a thread (bounded by a timeout) that then
/// drains the rest, so the broker never blocks on a full pipe.
fn first_lines(stdout: impl Read + Send + 'static, count: usize) -> Vec<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        for _ in 0..count {
            match lines.next() {
                Some(Ok(line)) => {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
                _ => return,
            }
        }
        for _ in lines {}
    });
    (0..count)
        .map(|n| {
            rx.recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|e| panic!("stdout line {}: {e}", n + 1))
        })
        .collect()
}

/// One line of `stdout`, read a byte at a time: nothing after its newline is consumed, so
/// what the broker writes next meets whatever the test does with the pipe.
fn read_one_line(stdout: &mut ChildStdout) -> String {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match stdout.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => break,
            Ok(1) => line.push(byte[0]),
            other => panic!("stdout ended before a line: {other:?} after {line:?}"),
        }
    }
    String::from_utf8(line).expect("a UTF-8 line")
}

/// Publishes and consumes through the broker at `url`: it serves.
async fn serves(url: &str, queue: &str) {
    let connection = connect_url(&format!("{url}/%2f"))
        .await
        .expect("lapin connects");
    round_trip(&connection, queue).await;
    let _ = connection.close(200, "bye".into()).await;
}

/// Runs `command` to its exit, within 20 s.
fn run_to_exit(command: &mut Command) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// The broker's log, read line by line on a thread of its own.
struct Log(mpsc::Receiver<String>);

impl Log {
    fn of(child: &mut Child) -> Log {
        let stderr = child.stderr.take().expect("stderr is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Log(rx)
    }

    /// The first line (from here on) that contains `text`, within 20 s.
    fn wait_for(&self, text: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.0.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(_) => {}
                Err(e) => panic!("no log line with {text:?}: {e}"),
            }
        }
    }
}

/// What the broker logs once it has printed its URLs, or failed to.
const ANNOUNCED: &str = "the URLs are on stdout";
const NOT_ANNOUNCED: &str = "stdout is closed or broken";

fn still_running(child: &mut Child) {
    let status = child.try_wait().expect("try_wait");
    assert!(status.is_none(), "the broker exited: {status:?}");
}

#[tokio::test]
async fn the_metrics_url_is_the_line_after_the_http_url() {
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--in-memory",
        "--metrics",
        "127.0.0.1:0",
    ];
    let mut child = Reaped(
        broker(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the binary starts"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let lines = first_lines(stdout, 3);
    assert!(lines[0].starts_with("amqp://127.0.0.1:"), "{lines:?}");
    assert!(lines[1].starts_with("http://127.0.0.1:"), "{lines:?}");
    let metrics: SocketAddr = lines[2]
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("http://ADDR/metrics: {lines:?}"))
        .parse()
        .expect("an address");
    assert_ne!(metrics.port(), 0, "port 0 is replaced by the bound port");
    assert_ne!(
        format!("http://{metrics}"),
        lines[1],
        "a listener of its own"
    );
    let reply = crate::http_client::get(metrics, "/metrics", crate::http_client::GUEST).await;
    assert_eq!(reply.status, 200);
    assert!(
        reply.text().contains("rabbitmq_connections"),
        "{}",
        reply.text()
    );
}

#[tokio::test]
async fn closing_stdout_after_the_first_line_stops_nothing() {
    // The harness of issue 38.3: read the AMQP URL, close the pipe, use the broker. The other
    // URL lines (HTTP, metrics) meet the closed pipe when the close comes first: a few runs.
    for run in 0..5 {
        let args = [
            "--listen",
            "127.0.0.1:0",
            "--in-memory",
            "--metrics",
            "127.0.0.1:0",
            "--log-level",
            "debug",
        ];
        let mut child = Reaped(
            broker(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the binary starts"),
        );
        let log = Log::of(&mut child.0);
        let mut stdout = child.0.stdout.take().expect("stdout");
        let url = read_one_line(&mut stdout);
        drop(stdout);
        // Printing is over, whichever way it went.
        let outcome = log.wait_for("the URLs are");
        assert!(
            outcome.contains(ANNOUNCED) || outcome.contains(NOT_ANNOUNCED),
            "{outcome}"
        );
        serves(&url, &format!("after-close-{run}")).await;
        still_running(&mut child.0);
    }
}

#[tokio::test]
async fn a_stdout_closed_from_the_start_stops_nothing() {
    // Every URL line meets a pipe nobody reads (a supervisor that closed stdout): the log says
    // so and has the address.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--in-memory",
        "--log-level",
        "info",
    ];
    let mut child = Reaped(
        broker(&args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts"),
    );
    let log = Log::of(&mut child.0);
    let listening = log.wait_for(": listening addr=");
    let (_, addr) = listening
        .split_once(": listening addr=")
        .expect("an address");
    let addr = addr.trim().to_string();
    let warning = log.wait_for(NOT_ANNOUNCED);
    assert!(warning.contains("WARN"), "{warning}");
    serves(&format!("amqp://{addr}"), "stdout-closed").await;
    still_running(&mut child.0);
}

#[tokio::test]
async fn a_broken_log_pipe_stops_nothing() {
    // stderr is a pipe nobody reads: every log line (listening, connection open, ...) fails.
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--in-memory",
        "--log-level",
        "debug",
    ];
    let mut child = Reaped(
        broker(&args)
            .env("DWELLMQ_HTTP", "off")
            .stdout(Stdio::piped())
            .stderr(writer)
            .spawn()
            .expect("the binary starts"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let url = first_lines(stdout, 1).remove(0);
    serves(&url, "log-broken").await;
    serves(&url, "log-broken-again").await;
    still_running(&mut child.0);
}

#[test]
fn every_binary_answers_help() {
    for (binary, says) in [
        (BIN, "Usage: dwellmq [OPTIONS]"),
        (
            env!("CARGO_BIN_EXE_dwellmq-load"),
            "Usage: dwellmq-load MODE",
        ),
    ] {
        for flag in ["--help", "-h"] {
            let out = run_to_exit(Command::new(binary).arg(flag));
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), Some(0), "{binary} {flag}: {stdout}");
            assert!(stdout.contains(says), "{binary} {flag}: {stdout}");
        }
    }
}
