//! The HTTP API's authentication, user tags and request validation.

use std::net::{IpAddr, SocketAddr};

use crate::http_client::*;
use dwellmq::{Broker, BrokerConfig, UserConfig};
use serde_json::json;

fn user(name: &str, vhosts: &[&str], tags: &[&str]) -> UserConfig {
    UserConfig {
        name: name.into(),
        password: "pw".into(),
        password_hash: None,
        vhosts: vhosts.iter().map(|v| v.to_string()).collect(),
        loopback_only: false,
        tags: tags.iter().map(|t| t.to_string()).collect(),
    }
}

/// guest (administrator), `app` (no tags), `mgmt` (management, vhost `staging` only),
/// `mon` (monitoring, vhost `/` only).
fn config() -> BrokerConfig {
    let mut config = BrokerConfig::ephemeral();
    config.vhosts = vec!["staging".into()];
    config.users.push(user("app", &["*"], &[]));
    config
        .users
        .push(user("mgmt", &["staging"], &["management"]));
    config.users.push(user("mon", &["/"], &["monitoring"]));
    config
}

#[tokio::test]
async fn missing_or_wrong_credentials_get_401_with_a_challenge() {
    let (broker, addr) = start_http(config()).await;
    for who in [
        As::Nobody,
        As::User("guest", "wrong"),
        As::User("nobody", "guest"),
    ] {
        let reply = get(addr, "/api/overview", who).await;
        reply.error(401);
        assert_eq!(
            reply.header("www-authenticate"),
            Some("Basic realm=\"RabbitMQ Management\"")
        );
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn users_without_the_needed_tag_are_refused_as_rabbitmq_does() {
    let (broker, addr) = start_http(config()).await;
    // An AMQP-only user cannot use the API at all.
    let reply = get(addr, "/api/overview", As::User("app", "pw")).await;
    assert_eq!(reply.error(401), "Not management user");
    assert_eq!(reply.header("www-authenticate"), None);
    // A management user may look around, but not at users.
    let mgmt = As::User("mgmt", "pw");
    assert_eq!(get(addr, "/api/overview", mgmt).await.status, 200);
    let reply = get(addr, "/api/users", mgmt).await;
    assert_eq!(reply.error(401), "Not administrator user");
    let reply = get(addr, "/api/permissions", As::User("mon", "pw")).await;
    assert_eq!(reply.error(401), "Not administrator user");
    assert_eq!(get(addr, "/api/users", GUEST).await.status, 200);
    broker.shutdown().await;
}

#[tokio::test]
async fn management_users_see_only_their_vhosts_and_monitors_see_all() {
    let (broker, addr) = start_http(config()).await;
    let names = |reply: Reply| -> Vec<String> {
        assert_eq!(reply.status, 200, "{}", reply.text());
        reply
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_string())
            .collect()
    };
    let mgmt = As::User("mgmt", "pw");
    assert_eq!(names(get(addr, "/api/vhosts", mgmt).await), ["staging"]);
    assert_eq!(
        names(get(addr, "/api/vhosts", As::User("mon", "pw")).await),
        ["/", "staging"]
    );
    let reply = get(addr, "/api/queues/%2F", mgmt).await;
    assert_eq!(
        reply.error(401),
        "User not authorised to access virtual host"
    );
    let reply = put(addr, "/api/queues/%2F/q", mgmt, json!({})).await;
    reply.error(401);
    assert!(
        broker.queue_info("/", "q").is_none(),
        "nothing was declared"
    );
    assert_eq!(
        put(addr, "/api/queues/staging/q", mgmt, json!({}))
            .await
            .status,
        201
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn whoami_reports_name_and_tags() {
    let (broker, addr) = start_http(config()).await;
    let reply = get(addr, "/api/whoami", GUEST).await;
    assert_eq!(
        reply.json(),
        json!({"name": "guest", "tags": ["administrator"]})
    );
    let reply = get(addr, "/api/whoami", As::User("mon", "pw")).await;
    assert_eq!(reply.json(), json!({"name": "mon", "tags": ["monitoring"]}));
    broker.shutdown().await;
}

/// The address the kernel would use to reach other hosts, if this machine has one.
fn non_loopback_local_ip() -> Option<IpAddr> {
    for target in ["192.0.2.1:9", "10.255.255.254:9", "203.0.113.1:9"] {
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        if socket.connect(target).is_ok() {
            if let Ok(local) = socket.local_addr() {
                let ip = local.ip();
                if !ip.is_loopback() && !ip.is_unspecified() {
                    return Some(ip);
                }
            }
        }
    }
    None
}

#[tokio::test]
async fn guest_may_only_log_in_from_loopback() {
    // Not a silent skip: without such an address this test proves nothing, so it says so.
    let ip = non_loopback_local_ip()
        .expect("this test needs a non-loopback address to reach the broker from (none found)");
    let mut config = config();
    config.http = Some(SocketAddr::new(ip, 0));
    let broker = Broker::start(config).await.expect("broker starts");
    let addr = broker.http_addr().unwrap();
    let reply = get(addr, "/api/overview", GUEST).await;
    assert_eq!(reply.error(401), "User can only log in via localhost");
    assert_eq!(reply.json()["error"], "not_authorised");
    let reply = get(addr, "/api/overview", As::User("mon", "pw")).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    broker.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_rabbitmq_status_codes_and_readable_errors() {
    let (broker, addr) = start_http(config()).await;
    // Unknown path and unknown vhost: RabbitMQ's 404 body.
    let reply = get(addr, "/api/nothing-here", GUEST).await;
    assert_eq!(reply.error(404), "Not Found");
    assert_eq!(reply.json()["error"], "Object Not Found");
    get(addr, "/api/queues/nope", GUEST).await.error(404);
    get(addr, "/api/exchanges/nope/x", GUEST).await.error(404);
    // A path that exists, with a method it does not take.
    let reply = raw(addr, "PATCH", "/api/queues/%2F/q", GUEST, None).await;
    reply.error(405);
    // Bad JSON, wrong JSON types, a bad query value, a bad percent-encoding.
    let reply = raw(addr, "PUT", "/api/queues/%2F/q", GUEST, Some(b"{not json")).await;
    assert!(
        reply.error(400).contains("invalid JSON"),
        "{}",
        reply.text()
    );
    let reply = put(addr, "/api/queues/%2F/q", GUEST, json!({"durable": "yes"})).await;
    reply.error(400);
    let reply = put(
        addr,
        "/api/queues/%2F/q",
        GUEST,
        json!({"arguments": [1, 2]}),
    )
    .await;
    assert_eq!(reply.error(400), "arguments must be a JSON object");
    let reply = delete(addr, "/api/queues/%2F/q?if-empty=maybe", GUEST).await;
    reply.error(400);
    let reply = get(addr, "/api/queues/%FF/q", GUEST).await;
    reply.error(400);
    // Too long a name for AMQP.
    let long = "q".repeat(300);
    let reply = put(addr, &format!("/api/queues/%2F/{long}"), GUEST, json!({})).await;
    assert_eq!(reply.error(400), "queue name is longer than 255 bytes");
    broker.shutdown().await;
}

#[tokio::test]
async fn request_bodies_are_bounded() {
    let (broker, addr) = start_http(config()).await;
    let huge = vec![b' '; 21 << 20];
    let reply = raw(addr, "PUT", "/api/queues/%2F/q", GUEST, Some(&huge)).await;
    reply.error(413);
    assert!(broker.queue_info("/", "q").is_none());
    broker.shutdown().await;
}

#[tokio::test]
async fn http_is_off_unless_configured() {
    let broker = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    assert_eq!(broker.http_addr(), None);
    broker.shutdown().await;
}

#[tokio::test]
async fn a_taken_http_port_fails_the_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let mut config = BrokerConfig::ephemeral();
    config.http = Some(addr);
    match Broker::start(config).await {
        Err(dwellmq::StartError::Bind { addr: failed, .. }) => assert_eq!(failed, addr),
        Err(other) => panic!("expected a bind error, got {other:?}"),
        Ok(_) => panic!("a taken port cannot be bound"),
    }
}

#[tokio::test]
async fn the_page_logs_in_by_itself_and_is_served_without_credentials() {
    let (broker, addr) = start_http(config()).await;
    // The page holds no data: it is a login form, and never makes the browser ask.
    let reply = get(addr, "/", As::Nobody).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("www-authenticate"), None);
    assert_eq!(
        reply.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(reply.header("x-frame-options"), Some("DENY"));
    let page = reply.text();
    assert!(page.contains("<form id=\"login\""), "a login form");
    assert!(
        page.contains("sessionStorage") && page.contains("Authorization"),
        "credentials kept by the page and sent from script"
    );
    assert!(
        page.contains("/api/delayed"),
        "the page reads the delayed endpoints"
    );
    // What it reads still needs a management user.
    get(addr, "/api/whoami", As::User("app", "pw"))
        .await
        .error(401);
    let me = get(addr, "/api/whoami", As::User("mgmt", "pw")).await;
    assert_eq!(me.status, 200);
    broker.shutdown().await;
}

#[tokio::test]
async fn http_connections_are_capped_so_amqp_keeps_its_file_descriptors() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    let (broker, addr) = start_http(config()).await;
    // 256 idle connections take every slot.
    let mut idle = Vec::new();
    for _ in 0..256 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    // One more is closed unserved.
    let mut extra = TcpStream::connect(addr).await.unwrap();
    let _ = extra
        .write_all(b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), extra.read(&mut buf))
        .await
        .expect("the extra connection is closed, not left waiting");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "served beyond the cap: {read:?}"
    );
    // AMQP is unaffected: a client logs in and is served (a bare TCP connect would succeed on
    // the kernel's backlog alone).
    let amqp = crate::common::connect(&broker).await;
    let ch = amqp.create_channel().await.expect("an AMQP channel");
    crate::common::declare_queue(&ch, "served").await;
    amqp.close(200, "bye".into())
        .await
        .expect("connection.close-ok");
    // Once an idle connection goes, its slot serves again.
    idle.pop();
    let mut served = false;
    for _ in 0..500 {
        // Until the server has noticed the close, a new connection is still refused (closed
        // without an answer), so this probes with a raw request rather than the client helper.
        let mut probe = TcpStream::connect(addr).await.unwrap();
        let _ = probe
            .write_all(b"GET /api/whoami HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await;
        let mut answer = Vec::new();
        let _ = probe.read_to_end(&mut answer).await;
        if answer.starts_with(b"HTTP/1.1 401") {
            served = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(served, "a freed slot serves requests again");
    drop(idle);
    broker.shutdown().await;
}
