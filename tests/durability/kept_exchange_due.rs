//! A durable delayed exchange the restore kept (its vhost was not configured) leaves its
//! messages on disk as they fall due: none is moved into memory while it is kept. A declare
//! that takes it back then releases those that fell due meanwhile as a restart releases what
//! fell due while it was down: oldest first, at the catch-up rate, every count right.
//! Before, each one that fell due was taken out of the index into RAM (its id kept until the
//! take-back, its body read) and the take-back released them all at once.

use std::time::Duration;

use crate::common::*;
use crate::http_client::{put, GUEST};
use dwellmq::{Broker, BrokerConfig, BrokerHandle};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

const MESSAGES: usize = 20_000;
/// What a restart releases per second of what fell due while it was down.
const CATCH_UP_PER_SECOND: usize = 10_000;
const DELAY_MS: i32 = 600_000;

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

/// Holds `m0`.. at `later`, each due [`DELAY_MS`] after the publish, pipelined, and waits for
/// every confirm.
async fn hold_all(ch: &Channel) {
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let mut confirms = Vec::with_capacity(MESSAGES);
    for i in 0..MESSAGES {
        let properties = BasicProperties::default()
            .with_headers(table(&[("x-delay", AMQPValue::LongInt(DELAY_MS))]));
        let confirm = ch
            .basic_publish(
                "later".into(),
                "k".into(),
                BasicPublishOptions::default(),
                format!("m{i}").as_bytes(),
                properties,
            )
            .await
            .expect("publish sent");
        confirms.push(confirm);
    }
    for confirm in confirms {
        let confirm = tokio::time::timeout(Duration::from_secs(60), confirm)
            .await
            .expect("confirmed in time")
            .expect("confirm");
        assert!(confirm.is_ack());
    }
}

fn due_count(broker: &BrokerHandle) -> usize {
    broker.queue_info("tenant", "due").map_or(0, |q| q.messages)
}

#[tokio::test]
async fn a_kept_exchanges_due_messages_stay_on_disk_and_are_caught_up_with_once_taken_back() {
    let dir = DataDir::new("kept-exchange-due");
    let broker = Broker::start(config(&dir, true, T0_MS))
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
    hold_all(&ch).await;
    drop(connection);
    broker.shutdown().await;

    // A minute later, without the vhost: `later` and `due` are kept on disk. Twenty minutes
    // pass: every held message falls due, and stays on disk.
    let broker = Broker::start(config(&dir, false, T0_MS + 60_000))
        .await
        .expect("starts");
    broker.settle().await.expect("settled");
    let before = broker.memory_used();
    broker.advance(Duration::from_secs(1_200));
    broker.settle().await.expect("settled");
    let kept = broker.memory_used() - before;
    eprintln!("memory counted while kept, all due: {kept} octets");
    assert!(kept.abs() < 64 * 1024, "nothing moved in: {kept}");

    // Taken back: nothing is released before the clock moves, then at the catch-up rate.
    let http = broker.http_addr().expect("HTTP");
    let added = put(http, "/api/vhosts/tenant", GUEST, serde_json::json!({})).await;
    assert_eq!(added.status, 201, "{}", added.text());
    let everything = serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"});
    let granted = put(http, "/api/permissions/tenant/guest", GUEST, everything).await;
    assert!(granted.status < 300, "{}", granted.text());
    let (_connection, ch) = tenant_channel(&broker).await;
    durable_queue(&ch, "due").await;
    declare_delayed(&ch, "later", "direct", true).await;
    eventually("the held messages are back", || {
        broker.delayed_count("tenant", "later") == MESSAGES
    })
    .await;
    broker.advance(Duration::from_secs(1));
    broker.settle().await.expect("settled");
    let first_second = due_count(&broker);
    eprintln!("released in the first second after the take-back: {first_second}");
    // A second's worth, the millisecond at either end included.
    let one_second = CATCH_UP_PER_SECOND * 1_001 / 1_000;
    assert!(
        first_second > 0 && first_second <= one_second,
        "caught up with at the catch-up rate: {first_second} of {MESSAGES}"
    );
    assert_eq!(
        broker.delayed_count("tenant", "later") + first_second,
        MESSAGES,
        "every message counted once"
    );

    // The rest in the next seconds, oldest first, each once.
    broker.advance(Duration::from_secs(3));
    broker.settle().await.expect("settled");
    assert_eq!(due_count(&broker), MESSAGES);
    assert_eq!(broker.delayed_count("tenant", "later"), 0);
    let mut consumer = ch
        .basic_consume(
            "due".into(),
            "all".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("consume");
    for i in 0..MESSAGES {
        let delivery = next_delivery(&mut consumer).await;
        assert_eq!(body(&delivery), format!("m{i}"));
    }
    broker.shutdown().await;
}
