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

/// `message_stats[name]` and its `_details.rate` in `stats`.
fn stat(stats: &Value, name: &str) -> (u64, f64) {
    let count = stats[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} in {stats}"));
    let rate = stats[format!("{name}_details")]["rate"]
        .as_f64()
        .unwrap_or_else(|| panic!("{name}_details.rate in {stats}"));
    (count, rate)
}

/// The sampler's interval (RabbitMQ's `collect_statistics_interval`).
const INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

#[tokio::test]
async fn rates_are_the_increase_per_second_between_two_samples() {
    // On a manual clock the sampler samples at the clock's time: the test takes the samples
    // itself, one interval of broker time apart, and the rates are exact.
    let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let t = start_with(config).await;
    let addr = t.broker.http_addr().unwrap();
    let ch = t.channel().await;
    declare_queue(&ch, "rated").await;
    let declare = ch.exchange_declare(
        "rated-in".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    );
    bounded("exchange.declare", declare).await.unwrap();
    let bind = ch.queue_bind(
        "rated".into(),
        "rated-in".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    );
    bounded("queue.bind", bind).await.unwrap();
    t.broker.sample_rates().await;

    // One interval: 3 published, 2 got and acked, one unroutable.
    for body in ["a", "b", "c"] {
        publish(&ch, "rated-in", "", body).await;
    }
    publish(&ch, "", "nowhere", "lost").await;
    sync(&ch).await;
    for _ in 0..2 {
        let get = ch.basic_get("rated".into(), BasicGetOptions::default());
        let got = bounded("basic.get", get).await.unwrap().expect("a message");
        got.delivery.ack(BasicAckOptions::default()).await.unwrap();
    }
    sync(&ch).await;
    t.broker.advance(INTERVAL);
    t.broker.sample_rates().await;

    let queue = get(addr, "/api/queues/%2F/rated", GUEST).await.json();
    let stats = &queue["message_stats"];
    // Per second over the 5 s between the two samples, rounded to one decimal as RabbitMQ
    // shows them.
    assert_eq!(stat(stats, "publish"), (3, 0.6), "{stats}");
    assert_eq!(stat(stats, "get"), (2, 0.4), "{stats}");
    assert_eq!(stat(stats, "deliver_get"), (2, 0.4), "{stats}");
    assert_eq!(stat(stats, "ack"), (2, 0.4), "{stats}");
    assert_eq!(stat(stats, "redeliver"), (0, 0.0), "{stats}");
    let exchange = get(addr, "/api/exchanges/%2F/rated-in", GUEST).await.json();
    let stats = &exchange["message_stats"];
    assert_eq!(stat(stats, "publish_in"), (3, 0.6), "{stats}");
    assert_eq!(stat(stats, "publish_out"), (3, 0.6), "{stats}");
    let overview = get(addr, "/api/overview", GUEST).await.json();
    let stats = &overview["message_stats"];
    assert_eq!(stat(stats, "publish"), (4, 0.8), "{stats}");
    assert_eq!(stat(stats, "drop_unroutable"), (1, 0.2), "{stats}");

    // The next interval: one more published, nothing got. A rate is this interval's increase,
    // not the total over the time since the start; a sample at the same instant changes
    // nothing.
    publish(&ch, "rated-in", "", "d").await;
    sync(&ch).await;
    t.broker.sample_rates().await;
    let queue = get(addr, "/api/queues/%2F/rated", GUEST).await.json();
    assert_eq!(stat(&queue["message_stats"], "publish"), (4, 0.6));
    t.broker.advance(INTERVAL);
    t.broker.sample_rates().await;
    let queue = get(addr, "/api/queues/%2F/rated", GUEST).await.json();
    let stats = &queue["message_stats"];
    assert_eq!(stat(stats, "publish"), (4, 0.2), "{stats}");
    assert_eq!(stat(stats, "get"), (2, 0.0), "{stats}");
    assert_eq!(stat(stats, "ack"), (2, 0.0), "{stats}");
    let overview = get(addr, "/api/overview", GUEST).await.json();
    assert_eq!(
        stat(&overview["message_stats"], "drop_unroutable"),
        (1, 0.0)
    );
}
