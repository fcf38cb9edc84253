//! Shared helpers for the integration tests: an in-memory broker on an ephemeral port and a
//! real AMQP client (lapin) connected to it.
#![allow(dead_code)]

mod data_dir;
mod ops;
pub mod raw;

#[allow(unused_imports)] // not every test file uses a data directory
pub use data_dir::DataDir;

#[allow(unused_imports)] // not every test file uses every helper
pub use ops::*;

use std::time::Duration;

use dwellmq::{Broker, BrokerConfig, BrokerHandle, Limits};
use futures_lite::StreamExt;
use lapin::options::{BasicConsumeOptions, ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties, Consumer, ExchangeKind};

/// 2026-01-01T00:00:00Z: where manual clocks start, so due times are easy to read.
pub const T0_MS: u64 = 1_767_225_600_000;

/// How long a test waits for any one answer of the broker (a reply, a confirm, a connection)
/// before it fails: a hang guard far above what any answer takes, not a timing assertion.
/// Every helper here that talks to the broker is bounded by it, and says what it waited for.
pub const ANSWER_WAIT: Duration = Duration::from_secs(20);

/// `future` (an exchange with the broker), or a failure naming `what` once [`ANSWER_WAIT`] has
/// passed without it: the test fails with the reason rather than hanging.
pub async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(ANSWER_WAIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("no answer from the broker within {ANSWER_WAIT:?}: {what}"),
    }
}

/// A broker plus one connection to it; dropping it shuts the broker down.
pub struct TestBroker {
    pub broker: BrokerHandle,
    pub connection: Connection,
}

/// Starts an in-memory broker on an ephemeral port (system clock), without a client.
pub async fn broker() -> BrokerHandle {
    broker_with(Limits::default()).await
}

/// [`broker`] with these limits.
pub async fn broker_with(limits: Limits) -> BrokerHandle {
    let mut config = BrokerConfig::ephemeral();
    config.limits = limits;
    bounded("Broker::start", Broker::start(config))
        .await
        .expect("broker starts")
}

/// Starts an in-memory broker on an ephemeral port (system clock) and connects to it.
pub async fn start() -> TestBroker {
    start_with(BrokerConfig::ephemeral()).await
}

/// Starts an in-memory broker with a manual clock at [`T0_MS`] and connects to it.
pub async fn start_manual() -> TestBroker {
    start_with(BrokerConfig::ephemeral().with_manual_clock(T0_MS)).await
}

pub async fn start_with(config: BrokerConfig) -> TestBroker {
    let broker = bounded("Broker::start", Broker::start(config))
        .await
        .expect("broker starts");
    let connection = connect(&broker).await;
    TestBroker { broker, connection }
}

/// A new client connection to `broker`.
pub async fn connect(broker: &BrokerHandle) -> Connection {
    bounded(
        "a client connection",
        Connection::connect(
            &format!("{}/%2f", broker.amqp_url()),
            ConnectionProperties::default(),
        ),
    )
    .await
    .expect("client connects")
}

/// The test is over: stop the broker, its connections and its timer thread, so that they do
/// not outlive the test's runtime (an OS thread would).
impl Drop for TestBroker {
    fn drop(&mut self) {
        self.broker.begin_shutdown();
    }
}

impl TestBroker {
    pub async fn channel(&self) -> Channel {
        bounded("channel.open", self.connection.create_channel())
            .await
            .expect("channel opens")
    }
}

/// Declares a non-durable queue with default options.
pub async fn declare_queue(channel: &Channel, name: &str) {
    let declare = channel.queue_declare(
        name.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    );
    bounded("queue.declare", declare)
        .await
        .expect("queue declared");
}

/// A synchronous round trip on `ch`: everything sent on it before has been handled.
pub async fn sync(ch: &Channel) {
    let round_trip = ch.exchange_declare(
        "amq.direct".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    );
    bounded("a round trip (passive exchange.declare)", round_trip)
        .await
        .expect("sync round trip");
}

/// `queue.declare` with `passive`: the queue's counts, or the broker's refusal.
pub async fn passive_declare(ch: &Channel, queue: &str) -> lapin::Result<lapin::Queue> {
    let declare = ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    );
    bounded("a passive queue.declare", declare).await
}

/// Starts an auto-ack consumer on `queue`.
pub async fn consume_no_ack(channel: &Channel, queue: &str) -> Consumer {
    let consume = channel.basic_consume(
        queue.into(),
        "".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    );
    bounded("basic.consume", consume)
        .await
        .expect("consume starts")
}

/// The next delivery, failing the test if none arrives within 5 s (a hang guard, not a
/// timing assertion).
pub async fn next_delivery(consumer: &mut Consumer) -> lapin::message::Delivery {
    tokio::time::timeout(Duration::from_secs(5), consumer.next())
        .await
        .expect("a delivery arrives")
        .expect("consumer still open")
        .expect("delivery ok")
}

/// The body of the next delivery as text.
pub async fn next_body(consumer: &mut Consumer) -> String {
    String::from_utf8(next_delivery(consumer).await.data).expect("utf-8 body")
}

/// The AMQP reply code and text of a channel or connection error.
pub fn amqp_error(error: &lapin::Error) -> (u16, String) {
    match error.kind() {
        lapin::ErrorKind::ProtocolError(e) => (e.get_id(), e.get_message().to_string()),
        other => panic!("expected an AMQP protocol error, got {other:?}"),
    }
}

/// Runs `op` (a method the broker answers only on error: publish, ack, reject) together with a
/// synchronous method, queued in the same poll so that the broker's `channel.close` cannot
/// overtake it; returns the channel error that the synchronous method ends with.
///
/// Sending the synchronous method afterwards instead would race: if the close arrived first,
/// the client would refuse to send it ("channel closing") without saying why.
pub async fn error_after<T>(
    ch: &Channel,
    op: impl std::future::Future<Output = lapin::Result<T>>,
) -> (u16, String) {
    let both = futures_lite::future::zip(
        op,
        ch.queue_declare(
            "after-error".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        ),
    );
    let (_, declare) = bounded("the channel error after an operation", both).await;
    amqp_error(&declare.expect_err("the broker closes the channel"))
}

/// Publishes on a channel in confirm mode and returns the channel error the broker answers
/// with: the pending confirm carries it, so no other method has to race the `channel.close`.
pub async fn publish_error(
    ch: &Channel,
    exchange: &str,
    routing_key: &str,
    properties: lapin::BasicProperties,
) -> (u16, String) {
    let select = ch.confirm_select(lapin::options::ConfirmSelectOptions::default());
    bounded("confirm.select", select)
        .await
        .expect("confirm mode");
    let publish = ch.basic_publish(
        exchange.into(),
        routing_key.into(),
        lapin::options::BasicPublishOptions::default(),
        b"x",
        properties,
    );
    let confirm = bounded("basic.publish", publish)
        .await
        .expect("publish sent");
    let answer = bounded("the confirm of a refused publish", confirm).await;
    amqp_error(&answer.expect_err("the broker closes the channel"))
}

/// Whether a test that needs a machine feature it does not have may end early. Only when the
/// environment says so, with `DWELLMQ_TEST_SKIP=<feature>[,<feature>...]`: otherwise the test
/// fails, so that a run on a machine without IPv6 (say) reports it instead of passing. Never
/// under CI (`CI=true`, as .ci/run sets): there a missing feature fails whatever the variable
/// says, since what CI reports as passed must have run.
/// Features: `ipv6` (an IPv6 loopback), `non-loopback-ip` (a non-loopback IPv4 address).
pub fn skip_without(feature: &str, available: bool) -> bool {
    if available {
        return false;
    }
    let skip = std::env::var("DWELLMQ_TEST_SKIP").unwrap_or_default();
    let named = skip.split(',').any(|f| f.trim() == feature);
    assert!(
        !under_ci(),
        "this machine lacks `{feature}`, and CI runs every test (DWELLMQ_TEST_SKIP is not \
         honoured when CI is set)"
    );
    assert!(
        named,
        "this machine lacks `{feature}`: set DWELLMQ_TEST_SKIP={feature} to skip the tests \
         that need it"
    );
    eprintln!("skipped: DWELLMQ_TEST_SKIP names `{feature}`, which this machine lacks");
    true
}

/// Whether this run is CI's (`CI` set to `true` or `1`, as .ci/run and most CI services do).
pub fn under_ci() -> bool {
    matches!(
        std::env::var("CI")
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Ok("true" | "1" | "yes")
    )
}

/// Whether this machine has an IPv6 loopback we can listen on.
pub fn ipv6_loopback_available() -> bool {
    std::net::TcpListener::bind((std::net::Ipv6Addr::LOCALHOST, 0)).is_ok()
}

/// A non-loopback IPv4 address of this machine that can be listened on (the one it would route
/// outside through), if any. No packet is sent: connecting a UDP socket only picks the route.
pub fn non_loopback_ipv4() -> Option<std::net::Ipv4Addr> {
    use std::net::{IpAddr, Ipv4Addr, UdpSocket};
    for target in ["192.0.2.1:9", "10.255.255.254:9", "203.0.113.1:9"] {
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).ok()?;
        if socket.connect(target).is_err() {
            continue;
        }
        if let Ok(local) = socket.local_addr() {
            if let IpAddr::V4(ip) = local.ip() {
                let listenable = std::net::TcpListener::bind((ip, 0)).is_ok();
                if !ip.is_loopback() && !ip.is_unspecified() && listenable {
                    return Some(ip);
                }
            }
        }
    }
    None
}

/// Waits (bounded, 5 s) until `condition` holds: for effects the client gets no reply for.
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..500 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}
