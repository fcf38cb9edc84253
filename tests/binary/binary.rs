//! The `dwellmq` binary: its stdout contract (the URL first), flags, exit codes, the TOML config
//! file, and that a real client can use what it starts.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::raw::RawClient;
use crate::common::*;

const BIN: &str = env!("CARGO_BIN_EXE_dwellmq");

/// A running broker process; killed (and reaped) when dropped, so a failing test leaks nothing.
struct Broker {
    child: Child,
    /// The first stdout line.
    url: String,
}

impl Broker {
    /// Starts the binary with `args` (and `env`), returning once it printed its URL.
    fn spawn(args: &[&str], env: &[(&str, &str)]) -> Broker {
        let mut command = Command::new(BIN);
        command
            .args(args)
            // Tests run brokers side by side: none may take the HTTP API's fixed port.
            .env("DWELLMQ_HTTP", "off")
            .env_remove("DWELLMQ_LISTEN")
            .env_remove("DWELLMQ_CONFIG")
            .env_remove("DWELLMQ_DATA_DIR")
            .env_remove("DWELLMQ_IN_MEMORY")
            .env_remove("DWELLMQ_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("the binary starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            // Keep draining so the broker never blocks on a full pipe.
            for _ in lines {}
        });
        let mut broker = Broker {
            child,
            url: String::new(),
        };
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Some(Ok(line))) => broker.url = line,
            other => panic!("no URL line on stdout: {other:?}"),
        }
        broker
    }

    fn port(&self) -> u16 {
        let port = self
            .url
            .strip_prefix("amqp://127.0.0.1:")
            .unwrap_or_else(|| panic!("unexpected URL line {:?}", self.url));
        port.parse().expect("a port number")
    }

    /// Waits (bounded) for the process to exit, without blocking the test's runtime (the
    /// client's tasks must keep running, e.g. to answer `connection.close`).
    async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the broker did not exit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Runs the binary to completion (for flags that make it exit at once).
fn run(args: &[&str]) -> Output {
    run_to_exit(
        Command::new(BIN).args(args).env("DWELLMQ_HTTP", "off"),
        args,
    )
}

/// `run` without its `DWELLMQ_HTTP=off`: for the tests about HTTP itself.
fn run_with_http(args: &[&str]) -> Output {
    run_to_exit(
        Command::new(BIN).args(args).env_remove("DWELLMQ_HTTP"),
        args,
    )
}

fn run_to_exit(command: &mut Command, args: &[&str]) -> Output {
    let mut child = command
        .env_remove("DWELLMQ_LISTEN")
        .env_remove("DWELLMQ_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("dwellmq {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A file in the temp dir, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("dwellmq-binary-test-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).expect("temp file written");
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn prints_its_url_first_and_serves_a_real_client() {
    let mut broker = Broker::spawn(&["--listen", "127.0.0.1:0", "--in-memory"], &[]);
    let port = broker.port();
    assert_ne!(port, 0, "port 0 is replaced by the bound port");
    assert_eq!(broker.url, format!("amqp://127.0.0.1:{port}"));
    let connection = connect_url(&format!("{}/%2f", broker.url))
        .await
        .expect("lapin connects to the printed URL");
    round_trip(&connection, "proc").await;
    broker.child.kill().expect("kill");
    let status = broker.child.wait().expect("wait");
    assert!(!status.success(), "killed: {status:?}");
}

/// Sends SIGTERM to `child` (what `kill <pid>` or a service manager does), with kill(2) itself:
/// no dependency on a `kill` executable that a minimal machine may lack.
fn send_sigterm(child: &Child) {
    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits in pid_t");
    // SAFETY: kill(2) takes plain integers. The child is not reaped yet (we hold its `Child`
    // and have not waited), so `pid` still names it and cannot have been reused.
    let result = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(result, 0, "kill(2): {}", std::io::Error::last_os_error());
}

#[tokio::test]
async fn sigterm_closes_clients_with_320_and_exits_0() {
    let mut broker = Broker::spawn(&["--listen", "127.0.0.1:0", "--in-memory"], &[]);
    let connection = connect_url(&format!("{}/%2f", broker.url)).await.unwrap();
    round_trip(&connection, "before-term").await;
    // A raw client sees the exact connection.close (lapin does not reliably surface it).
    let addr = format!("127.0.0.1:{}", broker.port()).parse().unwrap();
    let mut raw = RawClient::open(addr).await;
    send_sigterm(&broker.child);
    assert_eq!(
        raw.expect_close_and_ack().await,
        (
            320,
            "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'".into(),
            0,
            0
        )
    );
    let status = broker.wait_exit(Duration::from_secs(15)).await;
    assert!(status.success(), "graceful exit: {status:?}");
    // The lapin client was closed too.
    for _ in 0..500 {
        if !connection.status().connected() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("lapin still thinks it is connected");
}

#[tokio::test]
async fn logs_written_to_a_pipe_or_file_carry_no_colour_codes() {
    let log = TempFile::new("stderr.log", "");
    let file = std::fs::File::create(log.path()).expect("log file");
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--in-memory",
            "--log-level",
            "info",
        ])
        .env_remove("NO_COLOR")
        .env_remove("DWELLMQ_LOG")
        .env_remove("DWELLMQ_HTTP")
        .env_remove("DWELLMQ_LISTEN")
        .env_remove("DWELLMQ_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(file))
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let url = lines.next().expect("a URL line").expect("readable");
    let connection = connect_url(&format!("{url}/%2f")).await.unwrap();
    connection.close(200, "bye".into()).await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let logged = std::fs::read_to_string(log.path()).expect("log readable");
    assert!(logged.contains("connection open"), "{logged}");
    assert!(!logged.contains('\x1b'), "colour codes in {logged:?}");
}

#[test]
fn help_exits_0_with_every_option_grouped_on_stdout() {
    let out = run(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let headings = ["Listen:", "Storage:", "Limits:", "Test double:", "Other:"];
    let at: Vec<usize> = headings
        .iter()
        .map(|h| {
            stdout
                .find(&format!("\n{h}\n"))
                .unwrap_or_else(|| panic!("{h} in {stdout}"))
        })
        .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "headings in order: {stdout}"
    );
    for option in [
        "Usage: dwellmq [OPTIONS]",
        "--listen <ADDR>",
        "--http <ADDR|off>",
        "takes\n          a free port too",
        "--in-memory",
        "--config <FILE>",
        "--data-dir <DIR>",
        "[env: DWELLMQ_LOG]\n          [default: info]",
        "[config: limits.max_message_size]\n          [env: DWELLMQ_MAX_MESSAGE_SIZE]\n          [default: 134217728]",
        "[config: limits.handshake_timeout_ms]",
        "--manual-clock [<START>]",
        "[[users]]",
        "SIGTERM or Ctrl-C shuts down gracefully",
    ] {
        assert!(stdout.contains(option), "{option} in {stdout}");
    }
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    // -h: the same options, one line of help each.
    let out = run(&["-h"]);
    assert_eq!(out.status.code(), Some(0));
    let summary = text(&out.stdout);
    assert!(
        summary.contains("--memory-high-watermark <FRACTION|SIZE>"),
        "{summary}"
    );
    assert!(!summary.contains("[env:"), "{summary}");
    assert!(summary.len() < stdout.len() / 2, "{summary}");
}

#[test]
fn version_exits_0() {
    for flag in ["--version", "-V"] {
        let out = run(&[flag]);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(
            text(&out.stdout).trim_end(),
            format!("dwellmq {}", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn an_unknown_flag_exits_2_with_an_error_on_stderr() {
    let out = run(&["--frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout: {}",
        text(&out.stdout)
    );
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("error: unexpected argument '--frobnicate' found"),
        "{stderr}"
    );
    assert!(
        stderr.contains("For more information, try '--help'."),
        "{stderr}"
    );
    // A misspelt flag gets the one meant.
    let stderr = text(&run(&["--in-memroy"]).stderr);
    assert!(
        stderr.contains("a similar argument exists: '--in-memory'"),
        "{stderr}"
    );
}

#[test]
fn bad_flag_values_exit_2() {
    let out = run(&["--listen", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr)
            .contains("invalid value 'nope' for '--listen <ADDR>': invalid address 'nope'"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["--listen"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("a value is required for '--listen <ADDR>'"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["--config", "/nonexistent/dwellmq.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("dwellmq: cannot read config file /nonexistent/dwellmq.toml"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_port_in_use_exits_1_and_says_which_flag_moves_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run(&["--listen", &addr, "--in-memory"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "no URL: {}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("dwellmq: cannot listen on {addr} (AMQP)")),
        "{stderr}"
    );
    assert!(stderr.contains("move AMQP with --listen ADDR"), "{stderr}");
}

/// Holds 127.0.0.1:15672, RabbitMQ's management port, as a RabbitMQ on the machine would.
/// `None` when something holds it already (a RabbitMQ): the port is taken all the same.
fn hold_rabbitmqs_management_port() -> Option<std::net::TcpListener> {
    match std::net::TcpListener::bind("127.0.0.1:15672") {
        Ok(listener) => Some(listener),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => None,
        Err(e) => panic!("cannot bind 127.0.0.1:15672 to hold it: {e}"),
    }
}

/// Starts the binary with `args` and no HTTP setting from the environment; returns the child
/// and its first two stdout lines (the AMQP URL, then the HTTP URL).
fn spawn_with_http(args: &[&str]) -> (Child, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("DWELLMQ_HTTP")
        .env_remove("DWELLMQ_LISTEN")
        .env_remove("DWELLMQ_CONFIG")
        .env("DWELLMQ_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut line = |what: &str| match lines.next() {
        Some(Ok(line)) => line,
        other => panic!("no {what} line on stdout: {other:?}"),
    };
    let amqp = line("AMQP URL");
    let http = line("HTTP URL");
    (child, amqp, http)
}

#[tokio::test]
async fn with_free_amqp_ports_and_no_http_flag_http_takes_a_free_port_too() {
    let _held = hold_rabbitmqs_management_port();
    let (mut child, amqp, http) = spawn_with_http(&["--listen", "127.0.0.1:0", "--in-memory"]);
    let http_addr: std::net::SocketAddr = http
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("an HTTP URL: {http:?}"))
        .parse()
        .expect("http://ADDR");
    assert_ne!(http_addr.port(), 15672, "15672 is taken");
    assert_ne!(http_addr.port(), 0, "port 0 is replaced by the bound port");
    // The printed URL is dwellmq's API (not whatever holds 15672), and it knows the broker.
    let overview =
        crate::http_client::get(http_addr, "/api/overview", crate::http_client::GUEST).await;
    assert_eq!(overview.status, 200, "{}", overview.text());
    let connection = connect_url(&format!("{amqp}/%2f")).await.unwrap();
    round_trip(&connection, "http-followed").await;
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn an_http_address_that_is_taken_fails_loudly_and_names_the_flag() {
    // A port this test holds, so the failure does not depend on what runs on the machine.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = run_with_http(&["--listen", "127.0.0.1:0", "--in-memory", "--http", &addr]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "no URL: {}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "dwellmq: cannot listen on {addr} (the HTTP management API)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("move the HTTP management API with --http ADDR"),
        "{stderr}"
    );
    assert!(
        stderr.contains("15672 is RabbitMQ's management port"),
        "{stderr}"
    );
    assert!(stderr.contains("--http off"), "{stderr}");
}

#[tokio::test]
async fn a_toml_config_file_is_honoured() {
    let config = TempFile::new(
        "config.toml",
        r#"
listen = ["127.0.0.1:0"]
in_memory = true
log_level = "warn"
vhosts = ["/", "staging"]

[[users]]
name = "app"
password = "s3cret"
vhosts = ["staging"]

[limits]
channel_max = 16
"#,
    );
    let broker = Broker::spawn(&["--config", config.path()], &[]);
    let port = broker.port();
    let app = connect_url(&format!("amqp://app:s3cret@127.0.0.1:{port}/staging"))
        .await
        .expect("the configured user logs in to the configured vhost");
    round_trip(&app, "configured").await;
    assert_eq!(app.configuration().channel_max(), 16);
    // The file's users replace the default guest.
    let err = connect_url(&format!("amqp://guest:guest@127.0.0.1:{port}/%2f"))
        .await
        .expect_err("guest is not configured");
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
             For details see the broker logfile."
                .into()
        )
    );
    // The user's vhost list is enforced.
    let err = connect_url(&format!("amqp://app:s3cret@127.0.0.1:{port}/%2f"))
        .await
        .expect_err("app may only open staging");
    assert_eq!(
        amqp_error(&err),
        (
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'app'".into()
        )
    );
}

#[tokio::test]
async fn flags_override_the_config_file_and_the_environment_is_read() {
    let config = TempFile::new(
        "override.toml",
        "listen = [\"127.0.0.1:1\"]\nin_memory = true\n",
    );
    // --listen beats the file's unusable port 1.
    let broker = Broker::spawn(&["--config", config.path(), "--listen", "127.0.0.1:0"], &[]);
    let c = connect_url(&format!("{}/%2f", broker.url)).await.unwrap();
    round_trip(&c, "flag-wins").await;
    drop(broker);
    // DWELLMQ_LISTEN and DWELLMQ_IN_MEMORY are read when no flag is given.
    let broker = Broker::spawn(
        &[],
        &[
            ("DWELLMQ_LISTEN", "127.0.0.1:0"),
            ("DWELLMQ_IN_MEMORY", "1"),
        ],
    );
    assert_ne!(broker.port(), 0);
    let c = connect_url(&format!("{}/%2f", broker.url)).await.unwrap();
    round_trip(&c, "env").await;
}

/// `--check` reports on a data directory without starting a broker, and writes nothing: on a
/// copy of the format-3 fixture (an older format, which a start would upgrade) it names the
/// format, counts the records and exits 0; without a data directory it is a usage error.
#[test]
fn check_reports_on_a_data_directory_without_starting_or_writing() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/dwellmq-store/tests/fixtures/format-3/dwellmq.redb");
    let dir = std::env::temp_dir().join(format!("dwellmq-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("dwellmq.redb");
    std::fs::copy(&fixture, &file).expect("copy the fixture");
    let before = std::fs::read(&file).expect("read");
    let out = run(&["--data-dir", dir.to_str().expect("utf-8"), "--check"]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report} {}", text(&out.stderr));
    assert!(report.contains("format 3"), "{report}");
    assert_eq!(
        std::fs::read(&file).expect("read"),
        before,
        "the file is untouched"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let out = run(&["--in-memory", "--check"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--check needs a data directory"));
}
