//! 50 brokers in one process, each on its own port with its own manual clock: nothing is
//! global, so parallel tests can each start their own broker.

use std::time::Duration;

use crate::common::*;
use dwellmq::{Broker, BrokerConfig, BrokerHandle, Condition};
use futures_lite::future::zip;
use lapin::options::*;
use lapin::types::AMQPValue;
use lapin::ExchangeKind;

const BROKERS: usize = 50;

/// Broker `i`: a delayed exchange `d` bound to queue `q`, one message delayed by `i + 1`
/// seconds, and a consumer on `q`.
async fn prepared(i: usize) -> (BrokerHandle, lapin::Connection, lapin::Consumer) {
    let broker = Broker::start(
        BrokerConfig::ephemeral()
            .with_manual_clock(T0_MS + i as u64)
            .with_name_seed(i as u64),
    )
    .await
    .expect("broker starts");
    let connection = connect(&broker).await;
    let ch = connection.create_channel().await.unwrap();
    ch.exchange_declare(
        "d".into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions::default(),
        table(&[("x-delayed-type", long_str("fanout"))]),
    )
    .await
    .unwrap();
    declare_queue(&ch, "q").await;
    ch.queue_bind(
        "q".into(),
        "d".into(),
        "".into(),
        QueueBindOptions::default(),
        Default::default(),
    )
    .await
    .unwrap();
    let delay = (i as i64 + 1) * 1000;
    publish_with(
        &ch,
        "d",
        "",
        format!("from {i}").as_bytes(),
        lapin::BasicProperties::default()
            .with_headers(table(&[("x-delay", AMQPValue::LongLongInt(delay))])),
    )
    .await;
    sync(&ch).await;
    let consumer = consume_no_ack(&ch, "q").await;
    (broker, connection, consumer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_brokers_keep_their_own_ports_clocks_and_messages() {
    let mut brokers = Vec::new();
    for i in 0..BROKERS {
        brokers.push(prepared(i).await);
    }
    let mut ports: Vec<u16> = brokers
        .iter()
        .map(|(b, ..)| b.local_addr().port())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), BROKERS, "every broker on its own port");
    for (i, (broker, ..)) in brokers.iter().enumerate() {
        assert_eq!(broker.now_ms(), T0_MS + i as u64, "its own clock");
        assert_eq!(broker.delayed_total(), 1, "its own message");
    }

    // Advancing the even brokers by 60 s releases their messages only.
    for (i, (broker, ..)) in brokers.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(broker.advance(Duration::from_secs(60)), 1);
        }
    }
    for (i, (broker, _, consumer)) in brokers.iter_mut().enumerate() {
        if i % 2 == 0 {
            assert_eq!(next_body(consumer).await, format!("from {i}"));
            assert_eq!(broker.now_ms(), T0_MS + i as u64 + 60_000);
        } else {
            assert_eq!(broker.delayed_total(), 1, "broker {i} did not move");
            assert_eq!(broker.now_ms(), T0_MS + i as u64);
            broker
                .wait_for(Condition::consumers("q", 1), Duration::from_secs(5))
                .await
                .unwrap();
        }
    }
    // Counters are per broker too.
    for (broker, ..) in &brokers {
        assert_eq!(broker.counters().published, 1);
    }
    let stops = brokers
        .into_iter()
        .map(|(broker, connection, _)| async move {
            drop(connection);
            broker.shutdown().await;
        });
    let mut stops: Vec<_> = stops.collect();
    while let Some(a) = stops.pop() {
        match stops.pop() {
            Some(b) => {
                zip(a, b).await;
            }
            None => a.await,
        }
    }
}
