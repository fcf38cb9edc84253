//! `/metrics` as `rabbitmq_prometheus` serves it: every family the RabbitMQ-Overview dashboard
//! queries, in a text a strict reader accepts, with counters that move under real AMQP traffic
//! (lapin); `/metrics/per-object` and `/metrics/detailed` filtering.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use crate::common::*;
use crate::http_client::*;
use crate::prometheus_text::{parse, value, MetricFamily};
use dwellmq::BrokerConfig;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel};
use serde_json::json;

/// Every family of issue 26's list (what the dashboard needs), with RabbitMQ's type.
const DASHBOARD_FAMILIES: &[(&str, &str)] = &[
    ("rabbitmq_identity_info", "untyped"),
    ("rabbitmq_build_info", "untyped"),
    ("rabbitmq_erlang_uptime_seconds", "gauge"),
    ("rabbitmq_process_resident_memory_bytes", "gauge"),
    ("rabbitmq_resident_memory_limit_bytes", "gauge"),
    ("rabbitmq_process_open_fds", "gauge"),
    ("rabbitmq_process_max_fds", "gauge"),
    ("rabbitmq_disk_space_available_bytes", "gauge"),
    ("rabbitmq_disk_space_available_limit_bytes", "gauge"),
    ("rabbitmq_connections", "gauge"),
    ("rabbitmq_connections_opened_total", "counter"),
    ("rabbitmq_connections_closed_total", "counter"),
    ("rabbitmq_channels", "gauge"),
    ("rabbitmq_channels_opened_total", "counter"),
    ("rabbitmq_channels_closed_total", "counter"),
    ("rabbitmq_queues", "gauge"),
    ("rabbitmq_queues_declared_total", "counter"),
    ("rabbitmq_queues_created_total", "counter"),
    ("rabbitmq_queues_deleted_total", "counter"),
    ("rabbitmq_queue_messages_ready", "gauge"),
    ("rabbitmq_queue_messages_unacked", "gauge"),
    ("rabbitmq_global_consumers", "gauge"),
    ("rabbitmq_global_publishers", "gauge"),
    ("rabbitmq_global_messages_received_total", "counter"),
    ("rabbitmq_global_messages_received_confirm_total", "counter"),
    ("rabbitmq_global_messages_routed_total", "counter"),
    (
        "rabbitmq_global_messages_unroutable_dropped_total",
        "counter",
    ),
    (
        "rabbitmq_global_messages_unroutable_returned_total",
        "counter",
    ),
    ("rabbitmq_global_messages_confirmed_total", "counter"),
    ("rabbitmq_global_messages_delivered_total", "counter"),
    (
        "rabbitmq_global_messages_delivered_consume_auto_ack_total",
        "counter",
    ),
    (
        "rabbitmq_global_messages_delivered_consume_manual_ack_total",
        "counter",
    ),
    (
        "rabbitmq_global_messages_delivered_get_auto_ack_total",
        "counter",
    ),
    (
        "rabbitmq_global_messages_delivered_get_manual_ack_total",
        "counter",
    ),
    ("rabbitmq_global_messages_get_empty_total", "counter"),
    ("rabbitmq_global_messages_redelivered_total", "counter"),
    ("rabbitmq_global_messages_acknowledged_total", "counter"),
    ("rabbitmq_message_size_bytes", "histogram"),
];

type Families = BTreeMap<String, MetricFamily>;

async fn start_api() -> (TestBroker, SocketAddr) {
    let mut config = BrokerConfig::ephemeral();
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let broker = start_with(config).await;
    let addr = broker.broker.http_addr().expect("HTTP on");
    (broker, addr)
}

async fn scrape(addr: SocketAddr, path: &str) -> Families {
    let reply = get(addr, path, As::Nobody).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        reply.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    parse(&reply.text())
}

const AMQP: (&str, &str) = ("protocol", "amqp091");
const CLASSIC: (&str, &str) = ("queue_type", "rabbit_classic_queue");

fn global(families: &Families, name: &str) -> f64 {
    value(
        families,
        &format!("rabbitmq_global_messages_{name}_total"),
        &[AMQP],
    )
}

fn classic(families: &Families, name: &str) -> f64 {
    value(
        families,
        &format!("rabbitmq_global_messages_{name}_total"),
        &[AMQP, CLASSIC],
    )
}

async fn publish(ch: &Channel, exchange: &str, key: &str, mandatory: bool, body: &[u8]) {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions {
            mandatory,
            ..Default::default()
        },
        body,
        BasicProperties::default(),
    )
    .await
    .expect("publish");
}

#[tokio::test]
async fn every_dashboard_family_is_there_with_rabbitmqs_type() {
    let (_t, addr) = start_api().await;
    for path in ["/metrics", "/metrics/per-object"] {
        let families = scrape(addr, path).await;
        for (name, kind) in DASHBOARD_FAMILIES {
            let family = families
                .get(*name)
                .unwrap_or_else(|| panic!("{name} missing from {path}"));
            assert_eq!(family.kind, *kind, "{name} on {path}");
            assert!(!family.help.is_empty(), "{name} has no help");
        }
        // dwellmq's own families stay.
        for name in [
            "dwellmq_delayed_messages",
            "dwellmq_delayed_bytes",
            "dwellmq_delayed_release_lateness_seconds",
            "dwellmq_dead_lettered_total",
        ] {
            assert!(families.contains_key(name), "{name} missing from {path}");
        }
    }
    let families = scrape(addr, "/metrics").await;
    let identity = &families["rabbitmq_identity_info"].samples[0];
    let label = |k: &str| {
        identity
            .labels
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(label("rabbitmq_node").as_deref(), Some("dwellmq@localhost"));
    assert_eq!(
        label("rabbitmq_cluster").as_deref(),
        Some("dwellmq@localhost")
    );
    assert_eq!(label("rabbitmq_endpoint").as_deref(), Some("aggregated"));
    assert!(value(&families, "rabbitmq_process_resident_memory_bytes", &[]) > 0.0);
    assert!(value(&families, "rabbitmq_process_open_fds", &[]) > 0.0);
    assert!(value(&families, "rabbitmq_resident_memory_limit_bytes", &[]) > 0.0);
    assert!(value(&families, "rabbitmq_erlang_uptime_seconds", &[]) >= 0.0);
}

#[tokio::test]
async fn counters_follow_publishes_confirms_gets_consumes_acks_and_returns() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    for queue in ["q", "auto", "empty", "gone"] {
        declare_queue(&ch, queue).await;
    }
    ch.queue_delete("gone".into(), QueueDeleteOptions::default())
        .await
        .unwrap();

    // Three confirmed publishes, of 5, 500 and 5000 bytes.
    let confirming = t.channel().await;
    confirming
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for size in [5, 500, 5000] {
        confirming
            .basic_publish(
                "".into(),
                "q".into(),
                BasicPublishOptions::default(),
                &vec![b'x'; size],
                BasicProperties::default(),
            )
            .await
            .unwrap()
            .await
            .expect("confirmed");
    }
    // Unroutable: dropped, then returned.
    publish(&ch, "amq.direct", "nowhere", false, b"d").await;
    publish(&ch, "amq.direct", "nowhere", true, b"r").await;
    sync(&ch).await;

    // basic.get with a manual ack, with auto-ack, and on an empty queue.
    let got = ch
        .basic_get("q".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("a message");
    ch.basic_ack(got.delivery.delivery_tag, BasicAckOptions::default())
        .await
        .unwrap();
    ch.basic_get("q".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    assert!(ch
        .basic_get("empty".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .is_none());

    // A manual-ack consumer: the last message, nacked back once (redelivered), then acked.
    let consumer_channel = t.channel().await;
    let mut consumer = consumer_channel
        .basic_consume(
            "q".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let first = next_delivery(&mut consumer).await;
    consumer_channel
        .basic_nack(
            first.delivery_tag,
            BasicNackOptions {
                requeue: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let again = next_delivery(&mut consumer).await;
    assert!(again.redelivered);
    consumer_channel
        .basic_ack(again.delivery_tag, BasicAckOptions::default())
        .await
        .unwrap();
    sync(&consumer_channel).await;

    // An auto-ack consumer.
    let mut auto = consume_no_ack(&ch, "auto").await;
    publish(&ch, "", "auto", false, b"a").await;
    next_delivery(&mut auto).await;
    sync(&ch).await;

    let m = scrape(addr, "/metrics").await;
    assert_eq!(global(&m, "received"), 6.0);
    assert_eq!(global(&m, "received_confirm"), 3.0);
    assert_eq!(global(&m, "confirmed"), 3.0);
    assert_eq!(global(&m, "routed"), 4.0);
    assert_eq!(global(&m, "unroutable_dropped"), 1.0);
    assert_eq!(global(&m, "unroutable_returned"), 1.0);
    assert_eq!(classic(&m, "delivered_get_manual_ack"), 1.0);
    assert_eq!(classic(&m, "delivered_get_auto_ack"), 1.0);
    assert_eq!(classic(&m, "get_empty"), 1.0);
    assert_eq!(classic(&m, "delivered_consume_manual_ack"), 2.0);
    assert_eq!(classic(&m, "delivered_consume_auto_ack"), 1.0);
    assert_eq!(classic(&m, "delivered"), 5.0);
    assert_eq!(classic(&m, "redelivered"), 1.0);
    assert_eq!(classic(&m, "acknowledged"), 2.0);
    assert_eq!(
        value(
            &m,
            "rabbitmq_global_messages_delivered_total",
            &[AMQP, ("queue_type", "rabbit_quorum_queue")]
        ),
        0.0
    );
    // Gauges: two consumers, three channels that published or consume, one connection.
    assert_eq!(
        value(&m, "rabbitmq_global_consumers", &[AMQP]),
        2.0,
        "consumers"
    );
    assert_eq!(value(&m, "rabbitmq_global_publishers", &[AMQP]), 2.0);
    assert_eq!(value(&m, "rabbitmq_connections", &[]), 1.0);
    assert_eq!(value(&m, "rabbitmq_channels", &[]), 3.0);
    assert_eq!(value(&m, "rabbitmq_channels_opened_total", &[]), 3.0);
    assert_eq!(value(&m, "rabbitmq_connections_opened_total", &[]), 1.0);
    assert_eq!(value(&m, "rabbitmq_queues", &[]), 3.0);
    assert_eq!(value(&m, "rabbitmq_queues_declared_total", &[]), 4.0);
    assert_eq!(value(&m, "rabbitmq_queues_created_total", &[]), 4.0);
    assert_eq!(value(&m, "rabbitmq_queues_deleted_total", &[]), 1.0);
    // Aggregated queue gauges are sums over the queues: nothing is left in any.
    assert_eq!(value(&m, "rabbitmq_queue_messages_ready", &[]), 0.0);
    assert_eq!(value(&m, "rabbitmq_queue_messages_unacked", &[]), 0.0);
    // Sizes: 5, 500, 5000, 1, 1, 1 bytes.
    let size = |suffix: &str, labels: &[(&str, &str)]| {
        let mut with_protocol = vec![AMQP];
        with_protocol.extend_from_slice(labels);
        value(
            &m,
            &format!("rabbitmq_message_size_bytes{suffix}"),
            &with_protocol,
        )
    };
    assert_eq!(size("_bucket", &[("le", "100")]), 4.0);
    assert_eq!(size("_bucket", &[("le", "1000")]), 5.0);
    assert_eq!(size("_bucket", &[("le", "10000")]), 6.0);
    assert_eq!(size("_count", &[]), 6.0);
    assert_eq!(size("_sum", &[]), 5508.0);

    // Closing channels and the connection moves the churn counters.
    consumer_channel.close(200, "bye".into()).await.unwrap();
    confirming.close(200, "bye".into()).await.unwrap();
    sync(&ch).await;
    let m = scrape(addr, "/metrics").await;
    assert_eq!(value(&m, "rabbitmq_channels_closed_total", &[]), 2.0);
    assert_eq!(value(&m, "rabbitmq_channels", &[]), 1.0);
    assert_eq!(value(&m, "rabbitmq_global_publishers", &[AMQP]), 1.0);
    t.connection.close(200, "bye".into()).await.unwrap();
    let mut closed = 0.0;
    for _ in 0..100 {
        let m = scrape(addr, "/metrics").await;
        closed = value(&m, "rabbitmq_connections_closed_total", &[]);
        if closed == 1.0 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(closed, 1.0);
}

#[tokio::test]
async fn per_object_labels_queues_exchanges_and_channels() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    declare_queue(&ch, "a").await;
    declare_queue(&ch, "b").await;
    publish(&ch, "", "a", false, b"1").await;
    publish(&ch, "", "a", false, b"2").await;
    publish(&ch, "", "b", false, b"3").await;
    sync(&ch).await;

    let m = scrape(addr, "/metrics").await;
    assert_eq!(value(&m, "rabbitmq_queue_messages_ready", &[]), 3.0);
    assert!(m["rabbitmq_queue_messages_ready"].samples[0]
        .labels
        .is_empty());

    let m = scrape(addr, "/metrics/per-object").await;
    fn queue(name: &str) -> [(&str, &str); 2] {
        [("vhost", "/"), ("queue", name)]
    }
    assert_eq!(value(&m, "rabbitmq_queue_messages_ready", &queue("a")), 2.0);
    assert_eq!(value(&m, "rabbitmq_queue_messages_ready", &queue("b")), 1.0);
    assert_eq!(value(&m, "rabbitmq_queue_messages", &queue("a")), 2.0);
    assert_eq!(
        value(&m, "rabbitmq_queue_messages_ready_bytes", &queue("a")),
        2.0
    );
    assert_eq!(
        value(
            &m,
            "rabbitmq_queue_info",
            &[("queue", "a"), ("queue_type", "rabbit_classic_queue")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &m,
            "rabbitmq_exchange_messages_published_total",
            &[("vhost", "/"), ("exchange", "")]
        ),
        3.0
    );
    let channel = &m["rabbitmq_channel_messages_published_total"].samples;
    assert_eq!(channel.len(), 1, "{channel:?}");
    assert!(channel[0].labels[0].1.ends_with(" (1)"), "{channel:?}");
    assert_eq!(channel[0].value, 3.0);
    let identity = &m["rabbitmq_identity_info"].samples[0].labels;
    assert!(identity.contains(&("rabbitmq_endpoint".into(), "per-object".into())));
}

#[tokio::test]
async fn detailed_serves_only_the_asked_families_of_the_asked_vhosts() {
    let (t, addr) = start_api().await;
    assert_eq!(
        put(addr, "/api/vhosts/other", GUEST, json!({}))
            .await
            .status,
        201
    );
    let everything = json!({"configure": ".*", "write": ".*", "read": ".*"});
    put(addr, "/api/permissions/other/guest", GUEST, everything).await;
    let created = put(addr, "/api/queues/other/elsewhere", GUEST, json!({})).await;
    assert_eq!(created.status, 201, "{}", created.text());
    let ch = t.channel().await;
    declare_queue(&ch, "here").await;

    // Without a family: only who is answering.
    let m = scrape(addr, "/metrics/detailed").await;
    let names: Vec<&String> = m.keys().collect();
    assert_eq!(names, ["rabbitmq_build_info", "rabbitmq_identity_info"]);

    let m = scrape(
        addr,
        "/metrics/detailed?family=queue_coarse_metrics&family=vhost_status&vhost=other",
    )
    .await;
    assert!(m.keys().all(|name| name.starts_with("rabbitmq_detailed_")
        || name.starts_with("rabbitmq_cluster_")
        || name.ends_with("_info")));
    let ready = &m["rabbitmq_detailed_queue_messages_ready"].samples;
    assert_eq!(ready.len(), 1, "{ready:?}");
    assert!(ready[0]
        .labels
        .contains(&("queue".into(), "elsewhere".into())));
    assert!(m.contains_key("rabbitmq_detailed_queue_info"));
    assert!(!m.contains_key("rabbitmq_detailed_queue_consumers"));
    assert_eq!(
        value(&m, "rabbitmq_cluster_vhost_status", &[("vhost", "other")]),
        1.0
    );
    assert_eq!(m["rabbitmq_cluster_vhost_status"].samples.len(), 1);

    // Every vhost without `vhost`; several families.
    let m = scrape(
        addr,
        "/metrics/detailed?family=queue_consumer_count&family=connection_churn_metrics",
    )
    .await;
    assert_eq!(m["rabbitmq_detailed_queue_consumers"].samples.len(), 2);
    assert_eq!(
        value(&m, "rabbitmq_detailed_queues_created_total", &[]),
        2.0
    );
}

#[tokio::test]
async fn quorum_queues_count_apart_and_show_their_delayed_retries() {
    let mut config = BrokerConfig::ephemeral().with_manual_clock(T0_MS);
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let t = start_with(config).await;
    let addr = t.broker.http_addr().expect("HTTP on");
    let reply = put(
        addr,
        "/api/queues/%2F/jobs",
        GUEST,
        json!({"durable": true, "arguments": {
            "x-queue-type": "quorum",
            "x-delayed-retry-type": "failed",
            "x-delayed-retry-min": 30000,
            "x-delayed-retry-max": 120000,
        }}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let ch = t.channel().await;
    publish(&ch, "", "jobs", false, b"job").await;
    let got = ch
        .basic_get("jobs".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("a message");
    got.delivery
        .reject(BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    sync(&ch).await;

    let m = scrape(addr, "/metrics").await;
    let quorum = ("queue_type", "rabbit_quorum_queue");
    let name = "rabbitmq_global_messages_delivered_get_manual_ack_total";
    assert_eq!(value(&m, name, &[AMQP, quorum]), 1.0);
    assert_eq!(value(&m, name, &[AMQP, CLASSIC]), 0.0);
    let jobs = [("vhost", "/"), ("queue", "jobs")];
    assert_eq!(value(&m, "dwellmq_queue_messages_delayed", &jobs), 1.0);
    assert_eq!(value(&m, "dwellmq_queue_next_delayed_seconds", &jobs), 30.0);
    let m = scrape(addr, "/metrics/per-object").await;
    assert_eq!(
        value(
            &m,
            "rabbitmq_queue_info",
            &[("queue", "jobs"), ("queue_type", "rabbit_quorum_queue")]
        ),
        1.0
    );
}
