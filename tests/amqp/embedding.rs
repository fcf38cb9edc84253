//! Embedding the broker as a library: `Broker::start` inside the caller's runtime, ephemeral
//! ports, the handle's inspection API, shutdown, IPv6 and several listeners, users and vhosts.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener as StdTcpListener};
use std::time::Duration;

use crate::common::raw::{RawClient, Tune, AMQP_0_9_1};
use crate::common::*;
use dwellmq::{Broker, BrokerConfig, BrokerHandle, UserConfig};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use tokio::io::AsyncReadExt;

const PREDECLARED: [&str; 7] = [
    "",
    "amq.direct",
    "amq.fanout",
    "amq.headers",
    "amq.match",
    "amq.rabbitmq.trace",
    "amq.topic",
];

/// Connects to `[::1]:port`, vhost `/`. lapin's URL parser (amq-protocol-uri) drops bracketed
/// IPv6 hosts (it reads `Url::domain()`, which is `None` for IP literals, and falls back to
/// `localhost`), so the address is set on the parsed URI instead of written in the URL.
async fn connect_ipv6(port: u16) -> lapin::Result<Connection> {
    let mut uri: lapin::uri::AMQPUri = format!("amqp://localhost:{port}/%2f").parse().unwrap();
    uri.authority.host = "::1".into();
    Connection::connect_uri(uri, ConnectionProperties::default()).await
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_inside_a_multi_thread_test_runtime() {
    let broker = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    let connection = connect(&broker).await;
    let _ch = round_trip(&connection, "mt").await;
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test(flavor = "current_thread")]
async fn starts_inside_a_current_thread_test_runtime() {
    let broker = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    let connection = connect(&broker).await;
    let _ch = round_trip(&connection, "ct").await;
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn port_zero_binds_a_real_port_and_the_handle_reports_it() {
    let broker = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    let addr = broker.local_addr();
    assert_eq!(addr.ip(), Ipv4Addr::LOCALHOST);
    assert_ne!(addr.port(), 0);
    assert_eq!(broker.local_addrs(), &[addr]);
    assert_eq!(
        broker.amqp_url(),
        format!("amqp://127.0.0.1:{}", addr.port())
    );
    // Something really listens there.
    std::net::TcpStream::connect(addr).expect("the port accepts connections");
    // The URL works as is (vhost defaults to "/") and with the vhost spelled out.
    let a = connect_url(&broker.amqp_url()).await.unwrap();
    let b = connect_url(&format!("{}/%2f", broker.amqp_url()))
        .await
        .unwrap();
    round_trip(&a, "via-url").await;
    round_trip(&b, "via-url-vhost").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn an_empty_listen_list_is_refused() {
    let config = BrokerConfig {
        listen: Vec::new(),
        ..BrokerConfig::ephemeral()
    };
    let err = Broker::start(config).await.err().expect("start fails");
    assert!(
        matches!(err, dwellmq::StartError::NoListenAddress),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_port_in_use_is_reported() {
    let taken = StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = taken.local_addr().unwrap();
    let config = BrokerConfig {
        listen: vec![addr],
        ..BrokerConfig::ephemeral()
    };
    match Broker::start(config).await {
        Err(dwellmq::StartError::Bind { addr: failed, .. }) => assert_eq!(failed, addr),
        Err(other) => panic!("expected a bind error, got {other:?}"),
        Ok(_) => panic!("a taken port cannot be bound"),
    }
}

#[tokio::test]
async fn two_brokers_side_by_side_are_independent() {
    let a = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    let b = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    assert_ne!(a.local_addr(), b.local_addr());
    let ca = connect(&a).await;
    let cb = connect(&b).await;
    let cha = ca.create_channel().await.unwrap();
    let chb = cb.create_channel().await.unwrap();
    declare_queue(&cha, "only-in-a").await;
    declare_queue(&chb, "only-in-b").await;
    declare_queue(&chb, "in-both").await;
    declare_queue(&cha, "in-both").await;
    cha.basic_publish(
        "".into(),
        "in-both".into(),
        BasicPublishOptions::default(),
        b"for a",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    // A round trip on a's channel: the publish has been routed.
    declare_queue(&cha, "in-both").await;
    assert_eq!(a.queue_names("/"), ["in-both", "only-in-a"]);
    assert_eq!(b.queue_names("/"), ["in-both", "only-in-b"]);
    assert_eq!(a.queue_info("/", "in-both").unwrap().messages, 1);
    assert_eq!(b.queue_info("/", "in-both").unwrap().messages, 0);
    assert_eq!((a.connection_count(), b.connection_count()), (1, 1));
    // Stopping one leaves the other serving.
    a.shutdown().await;
    round_trip(&cb, "still-up").await;
    b.shutdown().await;
}

#[tokio::test]
async fn shutdown_returns_closes_clients_with_320_and_frees_the_port() {
    let broker = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    let addr = broker.local_addr();
    let connection = connect(&broker).await;
    let ch = connection.create_channel().await.unwrap();
    declare_queue(&ch, "q").await;
    let _consumer = consume_no_ack(&ch, "q").await;
    // A raw client sees the exact connection.close (lapin does not reliably surface it).
    let mut raw = RawClient::open(addr).await;
    let stopping = tokio::spawn(broker.shutdown());
    assert_eq!(
        raw.expect_close_and_ack().await,
        (
            320,
            "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'".into(),
            0,
            0
        )
    );
    tokio::time::timeout(Duration::from_secs(15), stopping)
        .await
        .expect("shutdown returns")
        .expect("shutdown task");
    // The lapin client was closed too.
    eventually("lapin sees its connection closed", || {
        !connection.status().connected()
    })
    .await;
    // Nothing listens any more.
    let err = tokio::net::TcpStream::connect(addr)
        .await
        .expect_err("the port refuses connections");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused);
}

#[tokio::test]
async fn shutdown_without_connections_returns() {
    let broker = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    let addr = broker.local_addr();
    tokio::time::timeout(Duration::from_secs(5), broker.shutdown())
        .await
        .expect("shutdown returns promptly");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn connection_count_follows_clients() {
    let broker = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    assert_eq!(broker.connection_count(), 0);
    let a = connect(&broker).await;
    let b = connect(&broker).await;
    assert_eq!(broker.connection_count(), 2);
    a.close(200, "bye".into()).await.unwrap();
    eventually("one connection left", || broker.connection_count() == 1).await;
    b.close(200, "bye".into()).await.unwrap();
    eventually("no connection left", || broker.connection_count() == 0).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn an_in_memory_connection_is_served_like_a_socket_until_shutdown() {
    let broker = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    let mut memory = RawClient::open_in_memory(&broker, Tune::default()).await;
    let tcp = connect(&broker).await;
    assert_eq!(broker.connection_count(), 2);
    // One broker behind both: what the in-memory client declares, the TCP client sees.
    memory.open_channel(1).await;
    memory.declare_queue(1, "shared", false).await;
    memory.publish(1, "", "shared", b"from memory").await;
    let ch = tcp.create_channel().await.unwrap();
    let mut consumer = consume_no_ack(&ch, "shared").await;
    assert_eq!(next_body(&mut consumer).await, "from memory");

    let stopping = tokio::spawn(broker.shutdown());
    assert_eq!(
        memory.expect_close_and_ack().await,
        (
            320,
            "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'".into(),
            0,
            0
        )
    );
    stopping.await.unwrap();
}

#[tokio::test]
async fn in_memory_connections_count_toward_max_connections_and_end_with_the_broker() {
    let mut config = BrokerConfig::ephemeral();
    config.limits.max_connections = 1;
    let broker = Broker::start(config).await.unwrap();
    let mut first = RawClient::open_in_memory(&broker, Tune::default()).await;
    // Over the limit: closed unserved, as a socket would be.
    let mut refused = RawClient::over(broker.connect_in_memory());
    // The broker may already have dropped its end: a failed write is fine too.
    let _ = refused.try_send_raw(AMQP_0_9_1).await;
    assert!(refused.expect_eof().await.is_empty());
    first.close().await;
    eventually("the slot is free", || broker.connection_count() == 0).await;
    let stream = broker.connect_in_memory();
    broker.shutdown().await;
    // Handed over too late or not: after shutdown the stream ends.
    assert!(RawClient::over(stream).expect_eof().await.is_empty());
}

#[tokio::test]
async fn dropping_a_test_broker_shuts_the_broker_down() {
    let t = start().await;
    let mut raw = RawClient::open(t.broker.local_addr()).await;
    drop(t);
    assert_eq!(
        raw.expect_close_and_ack().await,
        (
            320,
            "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'".into(),
            0,
            0
        )
    );
}

#[tokio::test]
async fn queue_and_exchange_names_list_the_vhosts_contents() {
    let t = start().await;
    let exchanges = t.broker.exchange_names("/");
    for name in PREDECLARED {
        assert!(
            exchanges.contains(&name.to_string()),
            "{name} in {exchanges:?}"
        );
    }
    assert!(t.broker.queue_names("/").is_empty());
    let ch = t.channel().await;
    declare_queue(&ch, "zeta").await;
    declare_queue(&ch, "alpha").await;
    ch.exchange_declare(
        "mine".into(),
        lapin::ExchangeKind::Topic,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!(t.broker.queue_names("/"), ["alpha", "zeta"]);
    let exchanges = t.broker.exchange_names("/");
    let mut sorted = exchanges.clone();
    sorted.sort();
    assert_eq!(exchanges, sorted, "sorted");
    assert!(exchanges.contains(&"mine".to_string()));
    assert_eq!(exchanges.len(), PREDECLARED.len() + 1);
    // An unknown vhost has nothing.
    assert!(t.broker.queue_names("nowhere").is_empty());
    assert!(t.broker.exchange_names("nowhere").is_empty());
    assert!(t.broker.queue_info("nowhere", "alpha").is_none());
}

// ---------------------------------------------------------------------------------------------
// IPv6 and several listeners

#[tokio::test]
async fn ipv6_loopback_listener_accepts_a_client() {
    if skip_without("ipv6", ipv6_loopback_available()) {
        return;
    }
    let config = BrokerConfig {
        listen: vec![SocketAddr::from((Ipv6Addr::LOCALHOST, 0))],
        ..BrokerConfig::ephemeral()
    };
    let broker = Broker::start(config).await.unwrap();
    let port = broker.local_addr().port();
    assert!(broker.local_addr().is_ipv6());
    assert_eq!(broker.amqp_url(), format!("amqp://[::1]:{port}"));
    let connection = connect_ipv6(port).await.expect("lapin connects over IPv6");
    round_trip(&connection, "v6").await;
    broker.shutdown().await;
}

#[tokio::test]
async fn two_listen_addresses_both_accept() {
    if skip_without("ipv6", ipv6_loopback_available()) {
        return;
    }
    let config = BrokerConfig {
        listen: vec![
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, 0)),
        ],
        ..BrokerConfig::ephemeral()
    };
    let broker = Broker::start(config).await.unwrap();
    let addrs = broker.local_addrs().to_vec();
    assert_eq!(addrs.len(), 2);
    assert!(addrs[0].is_ipv4() && addrs[1].is_ipv6(), "{addrs:?}");
    assert!(addrs.iter().all(|a| a.port() != 0));
    assert_eq!(broker.local_addr(), addrs[0]);
    let v4 = connect_url(&format!("amqp://127.0.0.1:{}/%2f", addrs[0].port()))
        .await
        .unwrap();
    let v6 = connect_ipv6(addrs[1].port()).await.unwrap();
    assert_eq!(broker.connection_count(), 2);
    // One broker behind both: what one client declares, the other sees.
    round_trip(&v4, "shared").await;
    let ch = v6.create_channel().await.unwrap();
    let q = passive_declare(&ch, "shared").await.unwrap();
    assert_eq!(q.name().as_str(), "shared");
    broker.shutdown().await;
}

#[tokio::test]
async fn an_unbindable_second_address_is_skipped() {
    let taken = StdTcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let config = BrokerConfig {
        listen: vec![
            taken.local_addr().unwrap(),
            SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        ],
        ..BrokerConfig::ephemeral()
    };
    let broker = Broker::start(config).await.expect("one address is enough");
    assert_eq!(broker.local_addrs().len(), 1);
    assert_ne!(broker.local_addr(), taken.local_addr().unwrap());
    round_trip(&connect(&broker).await, "one-of-two").await;
    broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Users and vhosts

fn user(name: &str, password: &str, vhosts: &[&str]) -> UserConfig {
    UserConfig {
        name: name.into(),
        password: password.into(),
        password_hash: None,
        vhosts: vhosts.iter().map(|v| v.to_string()).collect(),
        loopback_only: false,
        tags: Vec::new(),
    }
}

async fn staging_broker() -> BrokerHandle {
    let config = BrokerConfig {
        users: vec![
            UserConfig::guest(),
            user("app", "secret", &["*"]),
            user("rooted", "pw", &["/"]),
        ],
        vhosts: vec!["staging".into()],
        ..BrokerConfig::ephemeral()
    };
    Broker::start(config).await.unwrap()
}

fn url_for(broker: &BrokerHandle, user: &str, password: &str, vhost: &str) -> String {
    let port = broker.local_addr().port();
    format!("amqp://{user}:{password}@127.0.0.1:{port}/{vhost}")
}

#[tokio::test]
async fn a_configured_user_reaches_a_configured_vhost() {
    let broker = staging_broker().await;
    let staging = connect_url(&url_for(&broker, "app", "secret", "staging"))
        .await
        .expect("app may open staging");
    round_trip(&staging, "in-staging").await;
    assert_eq!(broker.queue_names("staging"), ["in-staging"]);
    assert!(broker.queue_names("/").is_empty(), "vhosts are separate");
    for name in PREDECLARED {
        assert!(broker.exchange_names("staging").contains(&name.to_string()));
    }
    // "/" is always there, and the same user may open it.
    let root = connect_url(&url_for(&broker, "app", "secret", "%2f"))
        .await
        .expect("app may open /");
    let ch = root.create_channel().await.unwrap();
    let err = passive_declare(&ch, "in-staging").await.unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (404, "NOT_FOUND - no queue 'in-staging' in vhost '/'".into())
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_user_limited_to_root_is_refused_staging_with_530() {
    let broker = staging_broker().await;
    connect_url(&url_for(&broker, "rooted", "pw", "%2f"))
        .await
        .expect("rooted may open /");
    let err = connect_url(&url_for(&broker, "rooted", "pw", "staging"))
        .await
        .expect_err("rooted may not open staging");
    assert_eq!(
        amqp_error(&err),
        (
            530,
            "NOT_ALLOWED - access to vhost 'staging' refused for user 'rooted'".into()
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn guest_logs_in_from_loopback_and_a_wrong_password_is_refused() {
    let broker = staging_broker().await;
    let guest = connect_url(&url_for(&broker, "guest", "guest", "%2f"))
        .await
        .expect("guest from loopback");
    round_trip(&guest, "from-guest").await;
    let err = connect_url(&url_for(&broker, "app", "wrong", "%2f"))
        .await
        .expect_err("a wrong password is refused");
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
             For details see the broker logfile."
                .into()
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn guest_is_loopback_only_while_other_users_may_connect_remotely() {
    let Some(ip) = non_loopback_ipv4() else {
        assert!(skip_without("non-loopback-ip", false));
        return;
    };
    let config = BrokerConfig {
        listen: vec![SocketAddr::from((ip, 0))],
        users: vec![UserConfig::guest(), user("app", "secret", &["*"])],
        ..BrokerConfig::ephemeral()
    };
    let broker = Broker::start(config)
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {ip}: {e}"));
    let port = broker.local_addr().port();
    let app = connect_url(&format!("amqp://app:secret@{ip}:{port}/%2f"))
        .await
        .expect("app may connect from a non-loopback address");
    round_trip(&app, "remote").await;
    let err = connect_url(&format!("amqp://guest:guest@{ip}:{port}/%2f"))
        .await
        .expect_err("guest is refused from a non-loopback address");
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
             User 'guest' can only connect via localhost"
                .into()
        )
    );
    broker.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// settle
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn settle_returns_once_everything_is_written() {
    // In memory, on this test's single-threaded runtime: the broker writes only while this
    // task waits, and the pipe holds 256 KiB, so what settle promises can be read off the pipe.
    let broker = broker().await;
    let mut client = RawClient::open_in_memory(&broker, Tune::default()).await;
    client.open_channel(1).await;
    client.declare_queue(1, "settled", false).await;
    // 2 MiB of deliveries: far more than the pipe holds, below the 4 MiB at which a connection
    // counts as congested, so every delivery is queued at once and most must wait.
    const MESSAGES: usize = 32;
    const SIZE: usize = 64 * 1024;
    let body = vec![b's'; SIZE];
    for _ in 0..MESSAGES {
        client.publish(1, "", "settled", &body).await;
    }
    assert_eq!(client.queue_depth(1, "settled").await, MESSAGES as u32);
    // From here the test reads the stream itself: consume-ok, then every delivery.
    client
        .send_method(
            1,
            &dwellmq::codec::Method::BasicConsume(dwellmq::codec::methods::BasicConsume {
                queue: "settled".into(),
                consumer_tag: "reader".into(),
                no_ack: true,
                ..Default::default()
            }),
        )
        .await;
    eventually("every message handed to the connection", || {
        broker.queue_info("/", "settled").unwrap().messages == 0
    })
    .await;
    let pending = broker
        .settle_within(Duration::ZERO)
        .await
        .expect_err("deliveries wait for the client to read");
    let [waiting] = pending.unwritten.as_slice() else {
        panic!("one connection expected: {pending:?}");
    };
    assert!(waiting.queued_bytes > 0 || waiting.writing, "{pending}");

    // The client reads while settle waits; settle returns once nothing is left to write.
    let mut received = bytes::BytesMut::with_capacity(4 << 20);
    let settled = {
        let settle = broker.settle();
        tokio::pin!(settle);
        loop {
            tokio::select! {
                biased;
                settled = &mut settle => break settled,
                read = client.stream.read_buf(&mut received) => {
                    assert!(read.expect("the pipe reads") > 0, "the broker closed the pipe");
                }
            }
        }
    };
    settled.expect("settles once the client has read");
    // Everything queued must now be in the pipe. It is read without yielding to the runtime,
    // so the broker cannot write one more byte meanwhile: a settle that returned with output
    // still queued leaves deliveries missing here.
    loop {
        let read = tokio::task::unconstrained(futures_lite::future::poll_once(
            client.stream.read_buf(&mut received),
        ))
        .await;
        match read {
            Some(Ok(0)) => panic!("the broker closed the pipe"),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("reading the pipe: {e}"),
            None => break,
        }
    }
    let (mut deliveries, mut body_bytes) = (0, 0);
    while let Some(frame) =
        dwellmq::codec::decode_frame(&mut received, u32::MAX).expect("frames decode")
    {
        match frame.payload {
            dwellmq::codec::FramePayload::Method(dwellmq::codec::Method::BasicDeliver(_)) => {
                deliveries += 1
            }
            dwellmq::codec::FramePayload::Body(chunk) => body_bytes += chunk.len(),
            _ => {}
        }
    }
    assert_eq!(
        (deliveries, body_bytes, received.len()),
        (MESSAGES, MESSAGES * SIZE, 0),
        "everything written when settle returned, nothing cut in half"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn settle_names_the_connection_whose_output_cannot_be_written() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "flood").await;
    // Far more than the socket buffers of both ends take: what is left waits in the broker.
    let body = vec![b'x'; 1 << 20];
    for _ in 0..64 {
        ch.basic_publish(
            "".into(),
            "flood".into(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    sync(&ch).await;
    // A consumer that never reads its socket.
    let mut stuck = RawClient::open(t.broker.local_addr()).await;
    stuck.open_channel(1).await;
    stuck
        .send_method(
            1,
            &dwellmq::codec::Method::BasicConsume(dwellmq::codec::methods::BasicConsume {
                queue: "flood".into(),
                consumer_tag: "stuck".into(),
                no_ack: true,
                ..Default::default()
            }),
        )
        .await;
    eventually("deliveries start", || {
        t.broker.queue_info("/", "flood").unwrap().messages < 64
    })
    .await;

    let timeout = t
        .broker
        .settle_within(Duration::from_millis(300))
        .await
        .expect_err("the stuck consumer's deliveries cannot all be written");
    assert!(timeout.waited >= Duration::from_millis(300));
    let [unwritten] = timeout.unwritten.as_slice() else {
        panic!("one connection expected: {timeout:?}");
    };
    assert!(unwritten.queued_bytes > 0 || unwritten.writing, "{timeout}");
    assert!(
        timeout.to_string().contains("on 1 connection(s)"),
        "{timeout}"
    );

    // Once the consumer is gone, nothing waits any more.
    drop(stuck);
    t.broker
        .settle()
        .await
        .expect("the stuck connection is closed");
}
