//! A durable delayed exchange the restore kept on disk (its vhost was not configured) is taken
//! back by a later declare of the same vhost and name, as a kept queue is: the messages it
//! held come back (one that fell due meanwhile is released at once, a later one on time), its
//! kept binding with it, and the health check no longer names it. A declare of another type
//! is refused: it would replace the stored definition and orphan the held messages. A declare
//! whose definition write fails leaves everything kept, for the next declare.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{connect_url, declare_delayed, eventually, table, Confirmed, DataDir, T0_MS};
use crate::http_client::{get, put, GUEST};
use dwellmq::{Broker, BrokerConfig, BrokerHandle, StoreFaults};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

fn config(dir: &DataDir, tenant: bool, now_ms: u64) -> BrokerConfig {
    let mut config = BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        http: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..BrokerConfig::ephemeral().with_manual_clock(now_ms)
    };
    if tenant {
        config.vhosts = vec!["tenant".into()];
    }
    config
}

async fn tenant_channel(broker: &BrokerHandle) -> (lapin::Connection, Channel) {
    let url = format!(
        "amqp://guest:guest@127.0.0.1:{}/tenant",
        broker.local_addr().port()
    );
    let connection = connect_url(&url).await.expect("tenant");
    let ch = connection.create_channel().await.expect("channel");
    (connection, ch)
}

async fn durable_queue(ch: &Channel, name: &str) {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("queue declared");
}

async fn held(ch: &Channel, body: &str, delay_ms: i32) {
    let properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_headers(table(&[("x-delay", AMQPValue::LongInt(delay_ms))]));
    let confirmed = ch
        .basic_publish(
            "later".into(),
            "k".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            properties,
        )
        .confirmed()
        .await
        .expect("confirm")
        .is_ack();
    assert!(confirmed, "{body} confirmed");
}

async fn bodies(ch: &Channel, queue: &str) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
    {
        out.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
    }
    out
}

fn due_count(broker: &BrokerHandle) -> usize {
    broker.queue_info("tenant", "due").map_or(0, |q| q.messages)
}

/// Holds "early" (due in a minute) and "late" (in ten) at the durable delayed exchange `later`
/// bound to `due` in vhost `tenant`, then starts two minutes later without that vhost and adds
/// it back at runtime: `later` and `due` are kept on disk. The second broker's store runs on
/// the fault backend returned.
async fn kept_later(dir: &DataDir) -> (BrokerHandle, Arc<StoreFaults>) {
    let broker = Broker::start(config(dir, true, T0_MS))
        .await
        .expect("starts");
    let (connection, ch) = tenant_channel(&broker).await;
    declare_delayed(&ch, "later", "direct", true).await;
    durable_queue(&ch, "due").await;
    ch.queue_bind(
        "due".into(),
        "later".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bound");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    held(&ch, "early", 60_000).await;
    held(&ch, "late", 600_000).await;
    drop(connection);
    broker.shutdown().await;

    // Two minutes later, without the vhost: kept on disk; "early" falls due meanwhile and is
    // left there. The vhost is then added at runtime and both declared again.
    let faults = Arc::new(StoreFaults::default());
    let broker = Broker::start(BrokerConfig {
        store_faults: Some(Arc::clone(&faults)),
        ..config(dir, false, T0_MS + 120_000)
    })
    .await
    .expect("starts");
    broker.advance(Duration::from_secs(5));
    let http = broker.http_addr().expect("HTTP");
    let check = get(http, "/api/health/checks/definitions", GUEST).await;
    assert_eq!(check.status, 503, "{}", check.text());
    assert!(check.text().contains("'later'"), "{}", check.text());
    let added = put(http, "/api/vhosts/tenant", GUEST, serde_json::json!({})).await;
    assert_eq!(added.status, 201, "{}", added.text());
    let everything = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
    let granted = put(http, "/api/permissions/tenant/guest", GUEST, everything).await;
    assert!(granted.status < 300, "{}", granted.text());
    let (_connection, ch) = tenant_channel(&broker).await;
    durable_queue(&ch, "due").await;
    (broker, faults)
}

#[tokio::test]
async fn a_declare_takes_back_a_delayed_exchange_the_restore_kept_with_its_held_messages() {
    let dir = DataDir::new("kept-delayed-exchange");
    let (broker, _faults) = kept_later(&dir).await;
    let http = broker.http_addr().expect("HTTP");
    let (_connection, ch) = tenant_channel(&broker).await;

    let refused = ch
        .exchange_declare(
            "later".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect_err("another type is refused");
    assert!(
        refused.to_string().contains("inequivalent arg 'type'"),
        "{refused}"
    );
    let (_connection, ch) = tenant_channel(&broker).await;
    declare_delayed(&ch, "later", "direct", true).await;
    eventually("the held messages are back", || {
        broker.delayed_count("tenant", "later") == 2
    })
    .await;
    let check = get(http, "/api/health/checks/definitions", GUEST).await;
    assert_eq!(check.status, 200, "{}", check.text());

    // The overdue one is released at once, through its kept binding; the other on time.
    broker.advance(Duration::from_secs(1));
    eventually("the overdue message is released", || {
        due_count(&broker) == 1
    })
    .await;
    assert_eq!(bodies(&ch, "due").await, ["early"]);
    broker.advance(Duration::from_secs(480));
    eventually("the later message is released", || due_count(&broker) == 1).await;
    assert_eq!(bodies(&ch, "due").await, ["late"]);
    assert_eq!(broker.delayed_count("tenant", "later"), 0);
    broker.shutdown().await;

    // Its definition is stored again: a restart restores it, with nothing held twice.
    let broker = Broker::start(config(&dir, false, T0_MS + 700_000))
        .await
        .expect("starts");
    let http = broker.http_addr().expect("HTTP");
    let check = get(http, "/api/health/checks/definitions", GUEST).await;
    assert_eq!(check.status, 200, "{}", check.text());
    assert_eq!(broker.delayed_count("tenant", "later"), 0);
    let (_connection, ch) = tenant_channel(&broker).await;
    assert_eq!(bodies(&ch, "due").await, Vec::<String>::new());
    broker.shutdown().await;
}

#[tokio::test]
async fn a_declare_of_a_kept_exchange_whose_write_fails_leaves_it_kept() {
    let dir = DataDir::new("kept-delayed-exchange-failed-write");
    let (broker, faults) = kept_later(&dir).await;
    let http = broker.http_addr().expect("HTTP");
    faults.fail_writes.store(true, Ordering::SeqCst);
    let (_connection, ch) = tenant_channel(&broker).await;
    let mut args = FieldTable::default();
    args.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("direct".into()),
    );
    let refused = ch
        .exchange_declare(
            "later".into(),
            ExchangeKind::Custom("x-delayed-message".into()),
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            args,
        )
        .await
        .expect_err("the definition could not be written");
    assert_eq!(crate::common::amqp_error(&refused).0, 506);
    faults.fail_writes.store(false, Ordering::SeqCst);
    eventually("the disk alarm clears", || !broker.disk_alarm()).await;
    assert_eq!(broker.delayed_count("tenant", "later"), 0, "not taken back");
    let check = get(http, "/api/health/checks/definitions", GUEST).await;
    assert_eq!(check.status, 503, "still kept: {}", check.text());

    let (_connection, ch) = tenant_channel(&broker).await;
    declare_delayed(&ch, "later", "direct", true).await;
    eventually("the held messages are back", || {
        broker.delayed_count("tenant", "later") == 2
    })
    .await;
    broker.advance(Duration::from_secs(1));
    eventually("the overdue message is released", || {
        due_count(&broker) == 1
    })
    .await;
    assert_eq!(bodies(&ch, "due").await, ["early"]);
    broker.shutdown().await;
}
