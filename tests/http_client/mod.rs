//! A tiny HTTP/1.1 client for the management API tests: one request per connection
//! (`Connection: close`), basic auth, JSON in and out. Hand-written so that the tests need no
//! HTTP client crate.

#![allow(dead_code)]

use std::net::SocketAddr;

use base64::Engine;
use dwellmq::{Broker, BrokerConfig, BrokerHandle};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts the status and RabbitMQ's error body shape; returns the reason.
    pub fn error(&self, status: u16) -> String {
        assert_eq!(self.status, status, "{}", self.text());
        let body = self.json();
        assert!(body["error"].is_string(), "{body}");
        body["reason"].as_str().expect("reason").to_string()
    }
}

/// Who the request is sent as.
#[derive(Clone, Copy)]
pub enum As<'a> {
    Nobody,
    User(&'a str, &'a str),
}

pub const GUEST: As<'static> = As::User("guest", "guest");

/// Sends one request with raw bytes as the body.
pub async fn raw(
    addr: SocketAddr,
    method: &str,
    path: &str,
    who: As<'_>,
    body: Option<&[u8]>,
) -> Reply {
    raw_with_headers(addr, method, path, who, &[], body).await
}

/// How long one request may take, from connecting to the server's close: a hang guard far
/// above any answer (the longest, `POST /test/wait`, waits as long as the test asks), not a
/// timing assertion.
pub const EXCHANGE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The same, with extra request headers.
pub async fn raw_with_headers(
    addr: SocketAddr,
    method: &str,
    path: &str,
    who: As<'_>,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Reply {
    let exchange = exchange(addr, method, path, who, headers, body);
    match tokio::time::timeout(EXCHANGE_WAIT, exchange).await {
        Ok(reply) => reply,
        Err(_) => panic!("no complete answer to {method} {path} within {EXCHANGE_WAIT:?}"),
    }
}

async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    who: As<'_>,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Reply {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if let As::User(name, password) = who {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"));
        request.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    exchange_bytes(addr, request.as_bytes(), body).await
}

/// Sends a request head written by the caller (exactly: no header is added) and a body.
pub async fn send_exact(addr: SocketAddr, head: &str, body: &[u8]) -> Reply {
    exchange_bytes(addr, head.as_bytes(), (!body.is_empty()).then_some(body)).await
}

/// Basic credentials as a header value.
pub fn basic(name: &str, password: &str) -> String {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{name}:{password}"));
    format!("Basic {token}")
}

/// One request and its answer, within 30 s (a test fails, it never hangs).
async fn exchange_bytes(addr: SocketAddr, head: &[u8], body: Option<&[u8]>) -> Reply {
    tokio::time::timeout(
        std::time::Duration::from_secs(30),
        exchange_unbounded(addr, head, body),
    )
    .await
    .expect("the HTTP answer within 30 s")
}

async fn exchange_unbounded(addr: SocketAddr, head: &[u8], body: Option<&[u8]>) -> Reply {
    let mut stream = TcpStream::connect(addr).await.expect("HTTP connect");
    stream.write_all(head).await.expect("send");
    // A server may answer before it has read the whole body (a 413 from the length alone)
    // and close: the rest of the body then meets a closed socket, and the read may end in a
    // reset after the answer. Neither is the test's concern; the answer is.
    let sent = match body {
        Some(body) => stream.write_all(body).await,
        None => Ok(()),
    };
    let mut response = Vec::new();
    let read = stream.read_to_end(&mut response).await;
    if response.is_empty() {
        sent.expect("send body");
        read.expect("read");
    }
    parse(&response)
}

fn parse(response: &[u8]) -> Reply {
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end: {}", String::from_utf8_lossy(response)));
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = response[split + 4..].to_vec();
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size_text = String::from_utf8_lossy(&data[..eol]).into_owned();
        let size = usize::from_str_radix(size_text.trim(), 16).expect("chunk size");
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
}

pub async fn get(addr: SocketAddr, path: &str, who: As<'_>) -> Reply {
    raw(addr, "GET", path, who, None).await
}

pub async fn delete(addr: SocketAddr, path: &str, who: As<'_>) -> Reply {
    raw(addr, "DELETE", path, who, None).await
}

pub async fn put(addr: SocketAddr, path: &str, who: As<'_>, body: Value) -> Reply {
    raw(addr, "PUT", path, who, Some(body.to_string().as_bytes())).await
}

pub async fn post(addr: SocketAddr, path: &str, who: As<'_>, body: Value) -> Reply {
    raw(addr, "POST", path, who, Some(body.to_string().as_bytes())).await
}

/// An in-memory broker with HTTP on a free loopback port.
pub async fn start_http(mut config: BrokerConfig) -> (BrokerHandle, SocketAddr) {
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let start = Broker::start(config);
    let broker = tokio::time::timeout(EXCHANGE_WAIT, start)
        .await
        .expect("Broker::start within the hang guard")
        .expect("broker starts");
    let addr = broker.http_addr().expect("HTTP is on");
    (broker, addr)
}
