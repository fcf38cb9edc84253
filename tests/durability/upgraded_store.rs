//! Data directories of earlier store formats, written by their own commits' store code (the
//! store crate's fixtures), start this build's broker: the store is upgraded in place and the
//! broker serves everything it held: definitions, users and permissions, waiting messages with
//! their delivery state (a classic queue's length from the counts the upgrade made), kept
//! dead letters, and held delayed messages at their due times.

use crate::common::*;
use dwellmq::{Broker, BrokerConfig};
use lapin::{Connection, ConnectionProperties};

#[path = "../../crates/dwellmq-store/tests/fixtures/generator/data.rs"]
mod data;

/// A copy of a fixture (tests/fixtures/<name> of the store crate) as a data directory.
fn fixture_data_dir(name: &str) -> DataDir {
    let dir = DataDir::new(name);
    std::fs::create_dir_all(dir.path()).unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("crates/dwellmq-store/tests/fixtures")
        .join(name)
        .join(dwellmq_store::DB_FILE);
    std::fs::copy(fixture, dir.path().join(dwellmq_store::DB_FILE)).unwrap();
    dir
}

/// Connects as `user` to `vhost` (URL-encoded).
async fn connect_as(
    broker: &dwellmq::BrokerHandle,
    user: &str,
    password: &str,
    vhost: &str,
) -> lapin::Result<Connection> {
    let url = format!("amqp://{user}:{password}@{}/{vhost}", broker.local_addr());
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        Connection::connect(&url, ConnectionProperties::default()),
    )
    .await
    .expect("connect within 10 s")
}

fn bodies(got: Vec<(String, bool)>) -> Vec<String> {
    got.into_iter().map(|(body, _)| body).collect()
}

#[tokio::test]
async fn a_format_2_data_directory_starts_the_broker_with_every_message_and_held_message() {
    serves_everything("format-2", 2).await;
}

#[tokio::test]
async fn a_format_3_data_directory_starts_the_broker_with_its_kept_dead_letters() {
    serves_everything("format-3", 3).await;
}

async fn serves_everything(fixture: &str, format: u32) {
    let dir = fixture_data_dir(fixture);
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(data::BASE_MS)).await.expect("starts");
    for name in ["orders", "unrouted", "events", "reminders"] {
        assert!(
            broker.exchange_names("/").contains(&name.to_string()),
            "{name}"
        );
    }
    assert!(broker.queue_names("shop").contains(&"parcels".to_string()));
    assert!(broker.policies("/").iter().any(|p| p.name == "audit-ttl"));
    // The stored user logs in with its password; the permission cleared at runtime stays
    // cleared.
    let connection = connect_as(&broker, "app", data::APP_PASSWORD, "%2f")
        .await
        .expect("the stored user logs in");
    assert!(connect_as(&broker, "guest", "guest", "shop").await.is_err());
    let ch = connection.create_channel().await.expect("channel");

    // Waiting messages, in order, redelivered exactly when they were delivered before.
    let tasks: Vec<(String, bool)> = data::MESSAGES
        .iter()
        .filter(|m| m.queue == 1 && !m.forgotten)
        .map(|m| {
            let redelivered = m.delivered || m.state.is_some_and(|s| s.redelivered);
            (String::from_utf8(m.body.bytes()).unwrap(), redelivered)
        })
        .collect();
    assert_eq!(tasks.len(), 5);
    assert_eq!(drain_with_get(&ch, "tasks").await, tasks);
    let retries = broker.queue_info("/", "retries").expect("retries");
    assert_eq!((retries.messages, retries.retrying), (2, 1));
    assert_eq!(retries.next_retry_at, Some(data::BASE_MS + data::HOUR_MS));
    // A dead letter kept for at-least-once dead-lettering (format 3 on) goes to its target
    // once the broker is back; in format 2 it is an ordinary redelivered message.
    let kept = broker.queue_info("/", "kept").expect("kept");
    let unrouted = broker.queue_info("/", "unrouted-q").expect("unrouted-q");
    if format >= 3 {
        assert_eq!(
            (kept.messages, kept.dead_lettered, unrouted.messages),
            (1, 0, 1)
        );
    } else {
        assert_eq!(
            (kept.messages, kept.dead_lettered, unrouted.messages),
            (2, 0, 0)
        );
    }

    // Held messages: counted, listed in due order, released at their due times.
    assert_eq!(broker.delayed_count("/", "reminders"), 7);
    assert_eq!(broker.delayed_count("shop", "nightly"), 2);
    let mut reminders: Vec<&data::Held> = data::HELD
        .iter()
        .filter(|h| h.exchange == "reminders" && !h.released)
        .collect();
    reminders.sort_by_key(|h| (h.due_ms, h.seq));
    let listed: Vec<u64> = broker
        .delayed_messages("/", "reminders", 100)
        .iter()
        .map(|m| m.due_ms)
        .collect();
    assert_eq!(
        listed,
        reminders.iter().map(|h| h.due_ms).collect::<Vec<_>>()
    );
    let text = |h: &data::Held| String::from_utf8(h.body.bytes()).unwrap();

    broker.advance(std::time::Duration::from_millis(data::MINUTE_MS - 1));
    assert_eq!(drain_with_get(&ch, "tasks").await, Vec::new());
    broker.advance(std::time::Duration::from_millis(1));
    assert_eq!(
        bodies(drain_with_get(&ch, "tasks").await),
        [text(reminders[0])]
    );
    broker.set_now(data::BASE_MS + 9 * data::DAY_MS);
    assert_eq!(
        bodies(drain_with_get(&ch, "tasks").await),
        reminders[1..].iter().map(|h| text(h)).collect::<Vec<_>>()
    );
    assert_eq!(broker.delayed_count("/", "reminders"), 0);
    // The shop's first reminder went to its queue; the one a month ahead still waits.
    assert_eq!(broker.delayed_count("shop", "nightly"), 1);
    assert_eq!(broker.queue_info("shop", "parcels").unwrap().messages, 2);
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    // The upgraded store starts again with what is left.
    let broker = Broker::start(config(data::BASE_MS + 9 * data::DAY_MS + 1))
        .await
        .expect("starts again");
    assert_eq!(broker.delayed_count("/", "reminders"), 0);
    assert_eq!(broker.delayed_count("shop", "nightly"), 1);
    assert_eq!(broker.queue_info("/", "tasks").unwrap().messages, 0);
    assert_eq!(broker.queue_info("shop", "parcels").unwrap().messages, 2);
    broker.shutdown().await;
}
