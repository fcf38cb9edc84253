//! `message_stats` over HTTP: counters as RabbitMQ names them, each with `_details.rate`.

use std::net::SocketAddr;

use crate::common::*;
use crate::http_client::*;
use dwellmq::BrokerConfig;
use lapin::options::{BasicAckOptions, BasicGetOptions, ExchangeDeclareOptions, QueueBindOptions};
use lapin::types::FieldTable;
use lapin::ExchangeKind;
use serde_json::Value;

fn assert_stat(stats: &Value, name: &str, count: u64) {
    assert_eq!(stats[name], count, "{name} in {stats}");
    let rate = &stats[format!("{name}_details")]["rate"];
    assert!(
        rate.as_f64().is_some_and(|r| r >= 0.0),
        "{name}_details in {stats}"
    );
}

#[tokio::test]
async fn queues_exchanges_channels_and_the_overview_count_messages() {
    let mut config = BrokerConfig::ephemeral();
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let t = start_with(config).await;
    let addr = t.broker.http_addr().unwrap();
    let ch = t.channel().await;
    declare_queue(&ch, "counted").await;
    ch.exchange_declare(
        "in".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        "counted".into(),
        "in".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    for body in ["a", "b", "c"] {
        publish(&ch, "in", "", body).await;
    }
    publish(&ch, "", "nowhere", "lost").await;
    sync(&ch).await;
    for _ in 0..2 {
        let got = ch
            .basic_get("counted".into(), BasicGetOptions::default())
            .await
            .unwrap()
            .expect("a message");
        got.delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    sync(&ch).await;

    let queue = get(addr, "/api/queues/%2F/counted", GUEST).await.json();
    let stats = &queue["message_stats"];
    assert_stat(stats, "publish", 3);
    assert_stat(stats, "get", 2);
    assert_stat(stats, "deliver_get", 2);
    assert_stat(stats, "ack", 2);
    assert_stat(stats, "redeliver", 0);

    let exchange = get(addr, "/api/exchanges/%2F/in", GUEST).await.json();
    assert_stat(&exchange["message_stats"], "publish_in", 3);
    assert_stat(&exchange["message_stats"], "publish_out", 3);
    let channels = get(addr, "/api/channels", GUEST).await.json();
    let channel = channels
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["message_stats"]["publish"] == 4)
        .unwrap_or_else(|| panic!("the publishing channel: {channels}"));
    assert_stat(&channel["message_stats"], "deliver_get", 2);
    assert_stat(&channel["message_stats"], "ack", 2);

    let overview = get(addr, "/api/overview", GUEST).await.json();
    assert_eq!(overview["rates_mode"], "basic");
    let stats = &overview["message_stats"];
    assert_stat(stats, "publish", 4);
    assert_stat(stats, "deliver_get", 2);
    assert_stat(stats, "ack", 2);
    assert_stat(stats, "drop_unroutable", 1);
}
