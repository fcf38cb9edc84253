//! The binary as a test double: its second stdout line is the HTTP URL, and `--manual-clock
//! START` sets the clock the `/test` endpoints move.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

/// One HTTP/1.1 request with guest's credentials; the answer's text.
fn http(base: &str, method: &str, path: &str, body: &str) -> String {
    try_http(base, method, path, body).expect("an HTTP answer")
}

/// The same; `None` when nothing answers (while a broker restarts).
fn try_http(base: &str, method: &str, path: &str, body: &str) -> Option<String> {
    let addr = base.strip_prefix("http://").expect("an http:// URL");
    let mut stream = TcpStream::connect(addr).ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

#[test]
fn the_second_stdout_line_is_the_http_url_and_the_clock_starts_where_asked() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dwellmq"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--in-memory",
        ])
        .args(["--manual-clock", "2026-01-01T09:00:00Z", "--name-seed", "7"])
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let amqp = lines.next().expect("a first line").expect("readable");
    let http_url = lines.next().expect("a second line").expect("readable");
    assert!(amqp.starts_with("amqp://127.0.0.1:"), "{amqp}");
    assert!(http_url.starts_with("http://127.0.0.1:"), "{http_url}");

    let clock = http(&http_url, "GET", "/test/clock", "");
    assert!(clock.starts_with("HTTP/1.1 200"), "{clock}");
    assert!(clock.contains("\"now_ms\":1767258000000"), "{clock}");
    assert!(clock.contains("\"manual\":true"), "{clock}");
    let moved = http(
        &http_url,
        "POST",
        "/test/clock/advance",
        r#"{"ms":86400000}"#,
    );
    assert!(
        moved.contains("\"now\":\"2026-01-02T09:00:00.000Z\""),
        "{moved}"
    );

    let _ = child.kill();
    let _ = child.wait();
}

/// `POST /test/restart` restarts the binary's broker on the same data directory and
/// addresses: a persistent message on a durable queue and the manual clock's time survive.
#[test]
fn a_restart_over_http_keeps_the_data_the_address_and_the_clock() {
    let dir = std::env::temp_dir().join(format!("dwellmq-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_dwellmq"))
        .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(&dir)
        .args(["--manual-clock", "2026-01-01T09:00:00Z"])
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let _amqp = lines.next().expect("a first line").expect("readable");
    let http_url = lines.next().expect("a second line").expect("readable");

    let declared = http(
        &http_url,
        "PUT",
        "/api/queues/%2F/jobs",
        r#"{"durable":true}"#,
    );
    assert!(declared.starts_with("HTTP/1.1 201"), "{declared}");
    let published = http(
        &http_url,
        "POST",
        "/api/exchanges/%2F/amq.default/publish",
        r#"{"routing_key":"jobs","payload":"kept","payload_encoding":"string","properties":{"delivery_mode":2}}"#,
    );
    assert!(published.contains("\"routed\":true"), "{published}");
    http(
        &http_url,
        "POST",
        "/test/clock/advance",
        r#"{"ms":3600000}"#,
    );

    let asked = http(&http_url, "POST", "/test/restart", "");
    assert!(asked.starts_with("HTTP/1.1 202"), "{asked}");
    assert!(asked.contains("\"restarts_after\":1"), "{asked}");
    // The listener goes down and comes back on the same address: poll until the new broker
    // answers (a bounded number of attempts, no timing assumption beyond that).
    let mut restarted = false;
    for _ in 0..500 {
        let answer = try_http(&http_url, "GET", "/test/restart", "");
        if answer.is_some_and(|a| a.contains("\"restarts\":1")) {
            restarted = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(restarted, "the broker came back");
    let queue = http(&http_url, "GET", "/api/queues/%2F/jobs", "");
    assert!(queue.contains("\"messages\":1"), "{queue}");
    let clock = http(&http_url, "GET", "/test/clock", "");
    assert!(clock.contains("\"now_ms\":1767261600000"), "{clock}");

    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
