//! What keeps an operator's browser from being used against the API: state-changing requests
//! must be JSON (what no cross-site form can send), the `Host` must be one the listener
//! answers to (DNS rebinding), browsers are never asked for basic credentials (so they cache
//! none), the page logs in by itself, and the test double's endpoints exist only when asked
//! for.

use std::net::SocketAddr;

use crate::http_client::*;
use dwellmq::{BrokerConfig, BrokerHandle};
use serde_json::json;

const PUBLISH: &str = "/api/exchanges/%2F/amq.default/publish";
const BROWSER: &str =
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36";

/// One request with exactly these headers (plus Host, Connection and Content-Length).
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    send_exact(addr, &head, body).await
}

/// A GET as guest with this `Host` value.
async fn get_as_host(addr: SocketAddr, path: &str, host: &str) -> Reply {
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
        basic("guest", "guest")
    );
    send_exact(addr, &head, b"").await
}

async fn started(config: BrokerConfig) -> (BrokerHandle, SocketAddr) {
    let (broker, addr) = start_http(config).await;
    let reply = put(addr, "/api/queues/%2F/jobs", GUEST, json!({})).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    (broker, addr)
}

#[tokio::test]
async fn state_changes_a_cross_site_form_could_send_are_refused_with_415() {
    let (broker, addr) = started(BrokerConfig::ephemeral()).await;
    let guest = basic("guest", "guest");
    let auth = ("Authorization", guest.as_str());
    let publish = json!({"routing_key": "jobs", "payload": "x", "payload_encoding": "string",
        "properties": {}})
    .to_string();
    // What an HTML form (or a no-cors fetch) can send, each with the browser's credentials.
    for content_type in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let headers = [auth, ("Content-Type", content_type)];
        let reply = request(addr, "POST", PUBLISH, &headers, publish.as_bytes()).await;
        assert!(
            reply.error(415).contains("application/json"),
            "{content_type}"
        );
        assert_eq!(reply.json()["error"], "unsupported_media_type");
        let reply = request(addr, "PUT", "/api/queues/%2F/made", &headers, b"{}").await;
        reply.error(415);
        let reply = request(addr, "DELETE", "/api/queues/%2F/jobs", &headers, b"{}").await;
        reply.error(415);
        let reply = request(addr, "POST", "/test/reset", &headers, b"").await;
        reply.error(415);
    }
    // A POST without any content type, empty or not, is refused too.
    request(addr, "POST", "/test/reset", &[auth], b"")
        .await
        .error(415);
    request(addr, "POST", PUBLISH, &[auth], publish.as_bytes())
        .await
        .error(415);
    let info = broker.queue_info("/", "jobs").expect("jobs is still there");
    assert_eq!(info.messages, 0, "nothing was published");
    assert!(
        broker.queue_info("/", "made").is_none(),
        "nothing was declared"
    );

    // The same requests as JSON go through; `charset` is fine.
    let json = [auth, ("Content-Type", "application/json; charset=utf-8")];
    let reply = request(addr, "POST", PUBLISH, &json, publish.as_bytes()).await;
    assert_eq!(reply.json()["routed"], true, "{}", reply.text());
    assert_eq!(broker.queue_info("/", "jobs").unwrap().messages, 1);
    // No browser can send a PUT or DELETE cross-site without a preflight: bodiless ones need
    // no content type (curl -X DELETE; RabbitMQ's bodiless queue declaration).
    let reply = request(addr, "PUT", "/api/queues/%2F/bare", &[auth], b"").await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let reply = request(addr, "DELETE", "/api/queues/%2F/bare", &[auth], b"").await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    broker.shutdown().await;
}

#[tokio::test]
async fn a_host_the_listener_does_not_answer_to_gets_403() {
    let mut config = BrokerConfig::ephemeral();
    config.http_allowed_hosts = vec!["Broker.Internal".into()];
    let (broker, addr) = started(config).await;
    let port = addr.port();
    // A rebinding page's name: refused before anything else, the page and the API alike.
    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_string(),
        format!("localhost.evil.example:{port}"),
    ] {
        let reply = get_as_host(addr, "/api/overview", &host).await;
        assert!(reply.error(403).contains("evil.example"), "{host}");
        assert_eq!(reply.json()["error"], "forbidden");
        get_as_host(addr, "/", &host).await.error(403);
        get_as_host(addr, "/api/nothing", &host).await.error(403);
    }
    let head = format!(
        "DELETE /api/queues/%2F/jobs HTTP/1.1\r\nHost: evil.example:{port}\r\n\
         Authorization: {}\r\nConnection: close\r\n\r\n",
        basic("guest", "guest")
    );
    send_exact(addr, &head, b"").await.error(403);
    assert!(
        broker.queue_info("/", "jobs").is_some(),
        "the queue is still there"
    );

    // localhost, IP literals (any port: mapped ports are fine) and the configured name pass.
    for host in [
        format!("{addr}"),
        format!("localhost:{port}"),
        "localhost".to_string(),
        "127.0.0.1:8080".to_string(),
        "[::1]:15672".to_string(),
        format!("broker.internal:{port}"),
        "BROKER.INTERNAL".to_string(),
    ] {
        let reply = get_as_host(addr, "/api/overview", &host).await;
        assert_eq!(reply.status, 200, "{host}: {}", reply.text());
    }
    // Without a Host (HTTP/1.0) there is no browser page behind the request.
    let head = format!(
        "GET /api/overview HTTP/1.0\r\nAuthorization: {}\r\n\r\n",
        basic("guest", "guest")
    );
    assert_eq!(send_exact(addr, &head, b"").await.status, 200);
    broker.shutdown().await;
}

#[tokio::test]
async fn browsers_are_never_asked_for_credentials_and_the_page_needs_no_login() {
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    // A tool that waits to be asked is asked; a browser, by any sign of one, never is.
    let reply = request(
        addr,
        "GET",
        "/api/overview",
        &[("User-Agent", "Wget/1.21")],
        b"",
    )
    .await;
    reply.error(401);
    assert_eq!(
        reply.header("www-authenticate"),
        Some("Basic realm=\"RabbitMQ Management\"")
    );
    let wrong = basic("guest", "wrong");
    for headers in [
        vec![("User-Agent", BROWSER)],
        vec![("User-Agent", BROWSER), ("Authorization", wrong.as_str())],
        vec![("Sec-Fetch-Mode", "cors")],
        vec![("Origin", "http://evil.example")],
    ] {
        let reply = request(addr, "GET", "/api/overview", &headers, b"").await;
        reply.error(401);
        assert_eq!(reply.header("www-authenticate"), None, "{headers:?}");
    }
    // The page is a login form, served to anyone, never framed.
    let page = request(addr, "GET", "/", &[("User-Agent", BROWSER)], b"").await;
    assert_eq!(page.status, 200);
    assert!(
        page.text().contains("<form id=\"login\""),
        "{}",
        page.text()
    );
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("www-authenticate"), None);
    broker.shutdown().await;
}

#[tokio::test]
async fn test_endpoints_exist_only_when_the_test_double_is_asked_for() {
    let production = BrokerConfig {
        test_api: false,
        ..BrokerConfig::ephemeral()
    };
    let (broker, addr) = start_http(production).await;
    for (method, path) in [
        ("GET", "/test/clock"),
        ("POST", "/test/reset"),
        ("POST", "/test/clock/advance"),
        ("GET", "/test/counters"),
        ("POST", "/test/faults/nack-confirms"),
    ] {
        let body = (method == "POST").then_some(&b"{}"[..]);
        let reply = raw(addr, method, path, GUEST, body).await;
        assert_eq!(reply.error(404), "Not Found", "{method} {path}");
    }
    broker.shutdown().await;
    // A manual clock implies the test double; so does `test_api` (on in `ephemeral`).
    for config in [
        BrokerConfig {
            test_api: false,
            ..BrokerConfig::ephemeral().with_manual_clock(0)
        },
        BrokerConfig::ephemeral(),
    ] {
        let (broker, addr) = start_http(config).await;
        let reply = get(addr, "/test/clock", GUEST).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let reply = post(addr, "/test/reset", GUEST, json!({})).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        broker.shutdown().await;
    }
}
