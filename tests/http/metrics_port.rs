//! Prometheus metrics on a listener of their own (`BrokerConfig::metrics`, `--metrics`), as
//! RabbitMQ's `rabbitmq_prometheus` serves them on 15692.

use std::net::SocketAddr;

use crate::http_client::*;
use dwellmq::{Broker, BrokerConfig};

#[tokio::test]
async fn metrics_are_served_alone_on_their_own_port() {
    let mut config = BrokerConfig::ephemeral();
    config.metrics = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let broker = Broker::start(config).await.expect("broker starts");
    assert_eq!(broker.http_addr(), None, "the management API stays off");
    let addr = broker.metrics_addr().expect("metrics listen");
    let reply = get(addr, "/metrics", As::Nobody).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert!(
        reply.text().contains("rabbitmq_connections 0"),
        "{}",
        reply.text()
    );
    // Nothing else is there.
    get(addr, "/api/overview", GUEST).await.error(404);
    get(addr, "/", GUEST).await.error(404);
    broker.shutdown().await;
}

#[tokio::test]
async fn the_metrics_port_is_off_by_default() {
    let broker = Broker::start(BrokerConfig::ephemeral()).await.unwrap();
    assert_eq!(broker.metrics_addr(), None);
    broker.shutdown().await;
    assert_eq!(BrokerConfig::default().metrics, None);
}
