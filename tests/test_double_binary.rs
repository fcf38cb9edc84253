//! The binary as a test double: its second stdout line is the HTTP URL, and `--manual-clock
//! START` sets the clock the `/test` endpoints move.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

/// One HTTP/1.1 request with guest's credentials; the answer's text.
fn http(base: &str, method: &str, path: &str, body: &str) -> String {
    let addr = base.strip_prefix("http://").expect("an http:// URL");
    let mut stream = TcpStream::connect(addr).expect("HTTP connects");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("request sent");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer read");
    answer
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
