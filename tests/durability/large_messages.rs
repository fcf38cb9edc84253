//! Messages of several MiB over a frame-max of 4096 (hundreds of body frames each): persistent
//! across a restart, held by a durable delayed exchange across a restart, and dead-lettered,
//! each arriving byte for byte.

use std::time::Duration;

use crate::common::*;
use crate::support::*;
use dwellmq::{Broker, BrokerConfig, BrokerHandle, Limits};
use lapin::options::{BasicGetOptions, BasicPublishOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

const MIB: usize = 1 << 20;

/// A body whose every octet depends on its position, so a lost or repeated frame shows.
fn body(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ (i >> 12) as u8 ^ seed)
        .collect()
}

fn small_frames(dir: &DataDir) -> BrokerConfig {
    BrokerConfig {
        limits: Limits {
            frame_max: 4096,
            ..Limits::default()
        },
        ..on_disk(dir)
    }
    .with_manual_clock(T0_MS)
}

/// A client that keeps to 4096-octet frames (lapin's own minimum is larger than the server's
/// tune unless the URL asks).
async fn small_frame_channel(broker: &BrokerHandle) -> (lapin::Connection, Channel) {
    let connection = lapin::Connection::connect(
        &format!("{}/%2f?frame_max=4096", broker.amqp_url()),
        lapin::ConnectionProperties::default(),
    )
    .await
    .expect("client connects");
    let ch = connection.create_channel().await.expect("channel");
    (connection, ch)
}

async fn publish_big(ch: &Channel, exchange: &str, key: &str, body: &[u8], headers: FieldTable) {
    let confirm = ch
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default()
                .with_delivery_mode(2)
                .with_headers(headers),
        )
        .confirmed()
        .await
        .expect("confirm");
    assert!(confirm.is_ack());
}

async fn get_body(ch: &Channel, queue: &str) -> Option<Vec<u8>> {
    ch.basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
        .map(|m| m.delivery.data)
}

#[tokio::test]
async fn multi_mib_messages_survive_restarts_delays_and_dead_lettering_over_4k_frames() {
    let dir = DataDir::new("large");
    let persistent = body(3 * MIB + 17, 1);
    let delayed = body(2 * MIB + 5, 2);
    let dead = body(2 * MIB + 9, 3);

    let broker = Broker::start(small_frames(&dir)).await.expect("starts");
    let (connection, ch) = small_frame_channel(&broker).await;
    ch.confirm_select(Default::default()).await.unwrap();
    declare(&ch, "big", true, FieldTable::default()).await;
    declare_delayed(&ch, "later", "direct", true).await;
    declare(&ch, "due", true, FieldTable::default()).await;
    ch.queue_bind(
        "due".into(),
        "later".into(),
        "k".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut dlx = FieldTable::default();
    dlx.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    dlx.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString("dead".into()),
    );
    declare(&ch, "doomed", true, dlx).await;
    declare(&ch, "dead", true, FieldTable::default()).await;

    publish_big(&ch, "", "big", &persistent, FieldTable::default()).await;
    let mut delay = FieldTable::default();
    delay.insert("x-delay".into(), AMQPValue::LongLongInt(60_000));
    publish_big(&ch, "later", "k", &delayed, delay).await;
    publish_big(&ch, "", "doomed", &dead, FieldTable::default()).await;
    let rejected = ch
        .basic_get("doomed".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("the doomed message");
    assert!(
        rejected.delivery.data == dead,
        "delivered whole before its rejection"
    );
    rejected
        .delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .unwrap();
    sync(&ch).await;
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let broker = Broker::start(small_frames(&dir)).await.expect("restarts");
    let (_connection, ch) = small_frame_channel(&broker).await;
    assert!(
        get_body(&ch, "big").await == Some(persistent),
        "the persistent one, whole"
    );
    assert!(
        get_body(&ch, "dead").await == Some(dead),
        "the dead-lettered one, whole"
    );
    assert!(get_body(&ch, "due").await.is_none(), "not due yet");
    broker.advance(Duration::from_millis(60_000));
    assert!(
        get_body(&ch, "due").await == Some(delayed),
        "the delayed one, whole"
    );
    broker.shutdown().await;
}
