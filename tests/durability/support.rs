//! Helpers shared by the durability tests: a broker on a data directory and a confirmed publish.

use crate::common::*;
use dwellmq::{Broker, BrokerConfig, BrokerHandle};
use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

pub(crate) fn on_disk(dir: &DataDir) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral()
    }
}

pub(crate) async fn start_on(dir: &DataDir) -> BrokerHandle {
    bounded(
        "Broker::start on a data directory",
        Broker::start(on_disk(dir)),
    )
    .await
    .expect("broker starts")
}

pub(crate) async fn channel(broker: &BrokerHandle) -> (lapin::Connection, Channel) {
    let connection = connect(broker).await;
    let ch = bounded("channel.open", connection.create_channel())
        .await
        .expect("channel");
    (connection, ch)
}

pub(crate) async fn declare(ch: &Channel, name: &str, durable: bool, arguments: FieldTable) {
    let declare = ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable,
            ..Default::default()
        },
        arguments,
    );
    bounded("queue.declare", declare)
        .await
        .expect("queue declared");
}

/// Publishes with confirms and waits for the confirm; true for an ack.
pub(crate) async fn publish_confirmed(
    ch: &Channel,
    queue: &str,
    body: &str,
    persistent: bool,
) -> bool {
    let mode = if persistent { 2 } else { 1 };
    let publish = ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default().with_delivery_mode(mode),
    );
    publish.confirmed().await.expect("confirm").is_ack()
}

/// Publishes to a delayed exchange with confirms; true for an ack.
pub(crate) async fn publish_delayed(
    ch: &Channel,
    exchange: &str,
    body: &str,
    delay_ms: i64,
) -> bool {
    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), AMQPValue::LongLongInt(delay_ms));
    let publish = ch.basic_publish(
        exchange.into(),
        "k".into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        // Transient: a delayed exchange stores what it holds whatever the delivery mode.
        BasicProperties::default().with_headers(headers),
    );
    publish.confirmed().await.expect("confirm").is_ack()
}
