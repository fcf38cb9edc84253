//! Durability on a data directory, through a real client: what survives a stop and a start on
//! the same directory, and what does not.

use crate::common::*;
use dwellmq::{ApplyTo, Broker, BrokerConfig, BrokerHandle, Policy, PolicyDefinition};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions,
    ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

fn on_disk(dir: &DataDir) -> BrokerConfig {
    BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral()
    }
}

async fn start_on(dir: &DataDir) -> BrokerHandle {
    Broker::start(on_disk(dir)).await.expect("broker starts")
}

async fn channel(broker: &BrokerHandle) -> (lapin::Connection, Channel) {
    let connection = connect(broker).await;
    let ch = connection.create_channel().await.expect("channel");
    (connection, ch)
}

async fn declare(ch: &Channel, name: &str, durable: bool, arguments: FieldTable) {
    ch.queue_declare(
        name.into(),
        QueueDeclareOptions {
            durable,
            ..Default::default()
        },
        arguments,
    )
    .await
    .expect("queue declared");
}

/// Publishes with confirms and waits for the confirm; true for an ack.
async fn publish_confirmed(ch: &Channel, queue: &str, body: &str, persistent: bool) -> bool {
    let mode = if persistent { 2 } else { 1 };
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default().with_delivery_mode(mode),
    )
    .await
    .expect("publish sent")
    .await
    .expect("confirm")
    .is_ack()
}

#[tokio::test]
async fn durable_definitions_survive_a_restart_and_transient_ones_do_not() {
    let dir = DataDir::new("definitions");
    let broker = start_on(&dir).await;
    let (connection, ch) = channel(&broker).await;
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        "orders".into(),
        ExchangeKind::Topic,
        durable,
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.exchange_declare(
        "fanin".into(),
        ExchangeKind::Fanout,
        durable,
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.exchange_declare(
        "scratch".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare(
        &ch,
        "orders.eu",
        true,
        table(&[("x-max-length", AMQPValue::LongLongInt(10))]),
    )
    .await;
    declare(&ch, "temporary", false, FieldTable::default()).await;
    ch.queue_bind(
        "orders.eu".into(),
        "orders".into(),
        "eu.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    // Exchange to exchange: fanin → orders.
    ch.exchange_bind(
        "orders".into(),
        "fanin".into(),
        "".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let definition = PolicyDefinition {
        message_ttl: Some(60_000),
        ..Default::default()
    };
    broker
        .set_policy(
            "/",
            Policy {
                name: "ttl".into(),
                pattern: "^orders".into(),
                apply_to: ApplyTo::Queues,
                priority: 1,
                definition,
            },
        )
        .unwrap();
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let broker = start_on(&dir).await;
    let (_connection, ch) = channel(&broker).await;
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    for name in ["orders", "fanin"] {
        ch.exchange_declare(
            name.into(),
            ExchangeKind::Topic,
            passive,
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("exchange {name} restored: {e}"));
    }
    passive_declare(&ch, "orders.eu")
        .await
        .expect("durable queue restored");
    // Its arguments came back: redeclaring with others is refused as inequivalent.
    let (code, _) = channel_error(
        ch.queue_declare(
            "orders.eu".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await,
    );
    assert_eq!(code, 406);
    let (_connection, ch) = channel(&broker).await;
    let (code, _) = channel_error(passive_declare(&ch, "temporary").await);
    assert_eq!(code, 404, "a transient queue is gone");
    let (_connection, ch) = channel(&broker).await;
    let (code, _) = channel_error(
        ch.exchange_declare(
            "scratch".into(),
            ExchangeKind::Direct,
            passive,
            FieldTable::default(),
        )
        .await,
    );
    assert_eq!(code, 404, "a transient exchange is gone");
    // Both bindings came back: a message into fanin reaches orders.eu through orders.
    let (_connection, ch) = channel(&broker).await;
    publish(&ch, "fanin", "eu.de", "routed").await;
    sync(&ch).await;
    assert_eq!(broker.queue_info("/", "orders.eu").unwrap().messages, 1);
    let policies = broker.policies("/");
    assert_eq!(policies.len(), 1);
    assert_eq!(policies[0].definition.message_ttl, Some(60_000));
    broker.shutdown().await;
}

#[tokio::test]
async fn persistent_messages_survive_a_restart_in_order_and_transient_ones_do_not() {
    let dir = DataDir::new("messages");
    let broker = start_on(&dir).await;
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "jobs", true, FieldTable::default()).await;
    declare(&ch, "scratch", false, FieldTable::default()).await;
    for i in 1..=8 {
        assert!(publish_confirmed(&ch, "jobs", &format!("p{i}"), true).await);
        assert!(publish_confirmed(&ch, "jobs", &format!("t{i}"), false).await);
    }
    assert!(publish_confirmed(&ch, "scratch", "on a transient queue", true).await);
    // Take p1 and t1 and ack them; take p2 unacked (it comes back).
    let mut consumer = ch
        .basic_consume(
            "jobs".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    ch.basic_qos(3, Default::default()).await.unwrap();
    let first = next_delivery(&mut consumer).await;
    let second = next_delivery(&mut consumer).await;
    let third = next_delivery(&mut consumer).await;
    assert_eq!(
        [body(&first), body(&second), body(&third)],
        ["p1", "t1", "p2"]
    );
    first.ack(BasicAckOptions::default()).await.unwrap();
    second.ack(BasicAckOptions::default()).await.unwrap();
    sync(&ch).await;
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let broker = start_on(&dir).await;
    let (_connection, ch) = channel(&broker).await;
    let left = drain_with_get(&ch, "jobs").await;
    let bodies: Vec<&str> = left.iter().map(|(b, _)| b.as_str()).collect();
    assert_eq!(bodies, ["p2", "p3", "p4", "p5", "p6", "p7", "p8"]);
    assert!(
        left.iter().all(|(_, redelivered)| *redelivered),
        "recovered messages are flagged redelivered: {left:?}"
    );
    assert_eq!(broker.queue_info("/", "scratch"), None);
    // New messages continue after the recovered ones.
    publish(&ch, "", "jobs", "after").await;
    assert_eq!(drain_with_get(&ch, "jobs").await[0].0, "after");
    broker.shutdown().await;

    // What was taken (no-ack) after the restart is gone after the next one too.
    let broker = start_on(&dir).await;
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(drain_with_get(&ch, "jobs").await, Vec::new());
    broker.shutdown().await;
}

#[tokio::test]
async fn a_deleted_durable_queue_does_not_come_back() {
    let dir = DataDir::new("deleted");
    let broker = start_on(&dir).await;
    let (connection, ch) = channel(&broker).await;
    declare(&ch, "gone", true, FieldTable::default()).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish_confirmed(&ch, "gone", "old", true).await);
    ch.queue_bind(
        "gone".into(),
        "amq.direct".into(),
        "old-key".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_delete("gone".into(), Default::default())
        .await
        .unwrap();
    // Declared again under the same name: neither its messages nor its binding are the old
    // queue's.
    declare(&ch, "gone", true, FieldTable::default()).await;
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let broker = start_on(&dir).await;
    let (_connection, ch) = channel(&broker).await;
    assert_eq!(drain_with_get(&ch, "gone").await, Vec::new());
    publish(&ch, "amq.direct", "old-key", "unroutable").await;
    sync(&ch).await;
    assert_eq!(broker.queue_info("/", "gone").unwrap().messages, 0);
    broker.shutdown().await;
}

#[tokio::test]
async fn a_second_broker_on_the_same_directory_is_refused() {
    let dir = DataDir::new("locked");
    let first = start_on(&dir).await;
    let refused = Broker::start(on_disk(&dir)).await;
    let message = match refused {
        Ok(_) => panic!("a second broker started on the same data directory"),
        Err(e) => e.to_string(),
    };
    assert!(
        message.contains("in use by another dwellmq") && message.contains("LOCK"),
        "{message}"
    );
    first.shutdown().await;
    // Once the first has stopped, the directory is free.
    start_on(&dir).await.shutdown().await;
}

#[tokio::test]
async fn a_foreign_file_is_refused_naming_it_and_left_as_it_was() {
    let dir = DataDir::new("foreign");
    std::fs::create_dir_all(dir.path()).unwrap();
    let file = dir.path().join("dwellmq.redb");
    let contents = b"not a database, just someone's notes".repeat(200);
    std::fs::write(&file, &contents).unwrap();
    let message = match Broker::start(on_disk(&dir)).await {
        Ok(_) => panic!("started on a foreign file"),
        Err(e) => e.to_string(),
    };
    assert!(message.contains(&file.display().to_string()), "{message}");
    assert_eq!(std::fs::read(&file).unwrap(), contents, "left untouched");
}

#[tokio::test]
async fn in_memory_writes_nothing() {
    let t = start().await;
    let ch = t.channel().await;
    declare(&ch, "durable-in-memory", true, FieldTable::default()).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish_confirmed(&ch, "durable-in-memory", "m", true).await);
    assert_eq!(BrokerConfig::ephemeral().data_dir, None);
    assert_eq!(BrokerConfig::default().data_dir, None);
}

#[tokio::test]
async fn a_failed_write_nacks_the_publishes_it_carried_and_later_ones_are_acked() {
    let dir = DataDir::new("faults");
    let faults = std::sync::Arc::new(dwellmq::StoreFaults::default());
    let config = BrokerConfig {
        store_faults: Some(faults.clone()),
        ..on_disk(&dir)
    };
    let broker = Broker::start(config).await.expect("broker starts");
    let (connection, ch) = channel(&broker).await;
    declare(&ch, "jobs", true, FieldTable::default()).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    assert!(publish_confirmed(&ch, "jobs", "before", true).await);
    faults
        .fail_writes
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        !publish_confirmed(&ch, "jobs", "during", true).await,
        "a publish whose write failed is nacked"
    );
    // The failed write raised the disk alarm: publishing connections are blocked until a
    // write succeeds again (durability_faults.rs follows the alarm itself), so the
    // transient message goes after the fault clears; it needs no write and is acked as usual.
    faults
        .fail_writes
        .store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(publish_confirmed(&ch, "jobs", "transient", false).await);
    assert!(
        publish_confirmed(&ch, "jobs", "after", true).await,
        "writes work again"
    );
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let broker = start_on(&dir).await;
    let (_connection, ch) = channel(&broker).await;
    let bodies: Vec<String> = drain_with_get(&ch, "jobs")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    // What was confirmed is there; the nacked one may or may not be (at least once).
    assert!(
        bodies == ["before", "after"] || bodies == ["before", "during", "after"],
        "{bodies:?}"
    );
    broker.shutdown().await;
}

/// Publishes to a delayed exchange with confirms; true for an ack.
async fn publish_delayed(ch: &Channel, exchange: &str, body: &str, delay_ms: i64) -> bool {
    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), AMQPValue::LongLongInt(delay_ms));
    ch.basic_publish(
        exchange.into(),
        "k".into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        // Transient: a delayed exchange stores what it holds whatever the delivery mode.
        BasicProperties::default().with_headers(headers),
    )
    .await
    .expect("publish sent")
    .await
    .expect("confirm")
    .is_ack()
}

#[tokio::test]
async fn messages_held_by_a_durable_delayed_exchange_survive_a_restart_at_their_due_times() {
    let dir = DataDir::new("delayed");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("reminders", true), ("scratch", false)]).await;
    assert!(publish_delayed(&ch, "reminders", "in 5 s", 5_000).await);
    assert!(publish_delayed(&ch, "reminders", "in 1 s", 1_000).await);
    assert!(publish_delayed(&ch, "reminders", "in 1 h", 3_600_000).await);
    assert!(publish_delayed(&ch, "reminders", "cancelled by release", 500).await);
    assert!(publish_delayed(&ch, "scratch", "transient exchange", 1_000).await);
    // One falls due before the stop and goes into the queue (and is consumed: gone).
    broker.advance(std::time::Duration::from_millis(600));
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("cancelled by release".to_string(), false)]
    );
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    // Back 2 s after the first start: "in 1 s" fell due while the broker was down.
    let broker = Broker::start(config(T0_MS + 2_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 3);
    assert_eq!(broker.delayed_count("/", "scratch"), 0);
    let (_connection, ch) = channel(&broker).await;
    broker.advance(std::time::Duration::ZERO);
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("in 1 s".to_string(), false)]
    );
    // The others at their original due times.
    broker.advance(std::time::Duration::from_millis(2_999));
    assert_eq!(drain_with_get(&ch, "due").await, Vec::new());
    broker.advance(std::time::Duration::from_millis(1));
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("in 5 s".to_string(), false)]
    );
    assert_eq!(
        broker.delayed_next_due("/", "reminders"),
        Some(T0_MS + 3_600_000)
    );
    broker.shutdown().await;

    // Released ones are not held again after another restart; the hour-long one still is.
    let broker = Broker::start(config(T0_MS + 10_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 1);
    broker.shutdown().await;
}

#[tokio::test]
async fn delayed_messages_that_fell_due_during_an_outage_are_caught_up_at_a_bounded_rate() {
    let dir = DataDir::new("catch-up");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("reminders", true)]).await;
    // Published newest-due first: they come out oldest first all the same.
    for i in (1..=25).rev() {
        assert!(publish_delayed(&ch, "reminders", &format!("{i:02}"), 1_000 + i).await);
    }
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    // An hour later all 25 are overdue: 10 per millisecond (10,000 per second) from now on.
    let broker = Broker::start(config(T0_MS + 3_600_000)).await.unwrap();
    let (_connection, ch) = channel(&broker).await;
    let bodies = |got: Vec<(String, bool)>| got.into_iter().map(|(b, _)| b).collect::<Vec<_>>();
    let expect = |from: i64, to: i64| (from..=to).map(|i| format!("{i:02}")).collect::<Vec<_>>();
    broker.advance(std::time::Duration::ZERO);
    assert_eq!(bodies(drain_with_get(&ch, "due").await), expect(1, 10));
    broker.advance(std::time::Duration::from_millis(1));
    assert_eq!(bodies(drain_with_get(&ch, "due").await), expect(11, 20));
    broker.advance(std::time::Duration::from_millis(1));
    assert_eq!(bodies(drain_with_get(&ch, "due").await), expect(21, 25));
    broker.shutdown().await;

    // Released (under their catch-up times) means removed from the store.
    let broker = Broker::start(config(T0_MS + 7_200_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 0);
    broker.shutdown().await;
}

#[tokio::test]
async fn confirms_after_a_commit_in_progress_wait_for_it_in_order() {
    use crate::common::raw::{publish_frames_with, publish_method, queue_declare, RawClient};
    use dwellmq::codec::methods::{BasicAck, ConfirmSelect, QueueDeclare};
    use dwellmq::codec::{BasicProperties as Properties, Method};

    let dir = DataDir::new("order");
    let faults = std::sync::Arc::new(dwellmq::StoreFaults::default());
    let config = BrokerConfig {
        store_faults: Some(faults.clone()),
        ..on_disk(&dir)
    };
    let broker = Broker::start(config).await.expect("broker starts");
    let mut raw = RawClient::open(broker.local_addr()).await;
    raw.open_channel(1).await;
    let declare = Method::QueueDeclare(QueueDeclare {
        queue: "ordered".into(),
        durable: true,
        ..Default::default()
    });
    raw.send_method(1, &declare).await;
    assert!(matches!(
        raw.recv_method().await.1,
        Method::QueueDeclareOk(_)
    ));
    raw.send_method(1, &Method::ConfirmSelect(ConfirmSelect { no_wait: false }))
        .await;
    assert!(matches!(raw.recv_method().await.1, Method::ConfirmSelectOk));
    // The next fsync waits: the persistent message's commit cannot end.
    faults.pause();
    let mut out = bytes::BytesMut::new();
    let publish = publish_method("", "ordered", false);
    let persistent = Properties {
        delivery_mode: Some(2),
        ..Default::default()
    };
    publish_frames_with(&mut out, 1, &publish, persistent, b"persistent");
    publish_frames_with(&mut out, 1, &publish, Properties::default(), b"transient");
    raw.send_raw(&out).await;
    // A round trip: both publishes were handled; the transient one's ack waits behind tag 1.
    raw.send_method(1, &queue_declare("ordered", true)).await;
    let (_, reply) = raw.recv_method().await;
    assert!(
        matches!(reply, Method::QueueDeclareOk(_)),
        "nothing is confirmed before the commit: {reply:?}"
    );
    faults.resume();
    let (_, reply) = raw.recv_method().await;
    assert!(
        matches!(
            reply,
            Method::BasicAck(BasicAck {
                delivery_tag: 2,
                multiple: true
            })
        ),
        "both confirmed together once committed: {reply:?}"
    );
    drop(raw);
    broker.shutdown().await;
}

/// The test double's store faults: the next write fails as a failed commit would (the
/// publisher gets `basic.nack`, nothing reaches the disk), and `restart` brings the broker back
/// on the same data and address with exactly what was written.
#[tokio::test]
async fn an_injected_write_failure_nacks_and_a_restart_keeps_only_what_was_written() {
    let dir = DataDir::new("write-fault");
    let broker = start_on(&dir).await;
    let addr = broker.local_addr();
    let (connection, ch) = channel(&broker).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare(&ch, "jobs", true, FieldTable::default()).await;

    broker.fail_next_writes(1);
    assert_eq!(broker.writes_to_fail(), 1);
    assert!(
        !publish_confirmed(&ch, "jobs", "lost", true).await,
        "the failed write is nacked"
    );
    assert!(publish_confirmed(&ch, "jobs", "kept", true).await);
    assert_eq!(broker.writes_to_fail(), 0);
    drop(connection);

    let broker = broker.restart().await.expect("restarts");
    assert_eq!(broker.restarts(), 1);
    assert_eq!(broker.local_addr(), addr, "same address");
    let (_connection, ch) = channel(&broker).await;
    let got = ch
        .basic_get(
            "jobs".into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap()
        .expect("the written message is back");
    assert_eq!(got.delivery.data, b"kept");
    assert!(ch
        .basic_get(
            "jobs".into(),
            lapin::options::BasicGetOptions { no_ack: true }
        )
        .await
        .unwrap()
        .is_none());
    broker.shutdown().await;
}

const DAY_MS: i64 = 86_400_000;

/// Declares the delayed exchanges (name, durable) and a durable queue `due` bound to each with
/// key `k`, and puts the channel in confirm mode.
async fn delayed_into_due(ch: &Channel, exchanges: &[(&str, bool)]) {
    for &(name, durable) in exchanges {
        declare_delayed(ch, name, "direct", durable).await;
    }
    declare(ch, "due", true, FieldTable::default()).await;
    let names: Vec<&str> = exchanges.iter().map(|&(name, _)| name).collect();
    bind_all(ch, "due", &names).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
}

/// Binds queue `queue` to each of `exchanges` with key `k`.
async fn bind_all(ch: &Channel, queue: &str, exchanges: &[&str]) {
    for exchange in exchanges {
        ch.queue_bind(
            (*queue).into(),
            (*exchange).into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn messages_held_on_disk_are_listed_cancelled_and_released_in_order_days_after_a_restart() {
    let dir = DataDir::new("disk-held");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("reminders", true), ("scratch", false)]).await;
    // Beyond the scheduler's horizon (held on disk) but for "soon", published out of order.
    for (body, delay_ms) in [
        ("day 3", 3 * DAY_MS),
        ("day 1", DAY_MS),
        ("cancelled", DAY_MS + DAY_MS / 2),
        ("day 2", 2 * DAY_MS),
        ("in 10 s", 10_000),
        ("soon", 500),
    ] {
        assert!(publish_delayed(&ch, "reminders", body, delay_ms).await);
    }
    assert!(publish_delayed(&ch, "scratch", "transient", DAY_MS).await);
    let listed = broker.delayed_messages("/", "reminders", 10);
    let dues: Vec<u64> = listed.iter().map(|m| m.due_ms).collect();
    let at = |delay_ms: i64| T0_MS + delay_ms as u64;
    assert_eq!(
        dues,
        [
            at(500),
            at(10_000),
            at(DAY_MS),
            at(DAY_MS + DAY_MS / 2),
            at(2 * DAY_MS),
            at(3 * DAY_MS)
        ]
    );
    assert!(listed.iter().all(|m| m.routing_key == "k"));
    assert_eq!(listed[3].body_size, "cancelled".len());
    assert_eq!(broker.delayed_messages("/", "scratch", 10).len(), 1);
    // Cancelled on disk: once, and it does not come back.
    assert!(broker.cancel_delayed(listed[3].id));
    assert!(!broker.cancel_delayed(listed[3].id));
    assert_eq!(broker.delayed_count("/", "reminders"), 5);
    assert_eq!(broker.delayed_next_due("/", "reminders"), Some(at(500)));
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    // Back a second later: "soon" fell due while the broker was down.
    let broker = Broker::start(config(T0_MS + 1_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "reminders"), 5);
    assert_eq!(broker.delayed_count("/", "scratch"), 0);
    let listed = broker.delayed_messages("/", "reminders", 10);
    assert_eq!(listed.len(), 5);
    assert_eq!(listed[1].due_ms, at(10_000));
    let (_connection, ch) = channel(&broker).await;
    broker.advance(std::time::Duration::ZERO);
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("soon".to_string(), false)]
    );
    // Days ahead in one jump: each in due order, none lost, the cancelled one not back.
    broker.advance(std::time::Duration::from_millis(3 * DAY_MS as u64));
    let bodies: Vec<String> = drain_with_get(&ch, "due")
        .await
        .into_iter()
        .map(|(body, _)| body)
        .collect();
    assert_eq!(bodies, ["in 10 s", "day 1", "day 2", "day 3"]);
    assert_eq!(broker.delayed_count("/", "reminders"), 0);
    broker.shutdown().await;

    let broker = Broker::start(config(T0_MS + 4 * DAY_MS as u64))
        .await
        .unwrap();
    assert_eq!(broker.delayed_total(), 0);
    broker.shutdown().await;
}

/// Publishes `n` messages due `delay_ms` from now to `exchange`, confirms pipelined; true if all
/// were acked.
async fn publish_many_delayed(ch: &Channel, exchange: &str, n: usize, delay_ms: i64) -> bool {
    let mut confirms = Vec::with_capacity(n);
    for i in 0..n {
        let mut headers = FieldTable::default();
        headers.insert(
            "x-delay".into(),
            AMQPValue::LongLongInt(delay_ms + i as i64),
        );
        confirms.push(
            ch.basic_publish(
                exchange.into(),
                "k".into(),
                BasicPublishOptions::default(),
                b"m",
                BasicProperties::default().with_headers(headers),
            )
            .await
            .expect("publish sent"),
        );
    }
    let mut all = true;
    for confirm in confirms {
        all &= confirm.await.expect("confirm").is_ack();
    }
    all
}

#[tokio::test]
async fn purging_or_deleting_a_delayed_exchange_drops_its_disk_held_messages_for_good() {
    let dir = DataDir::new("disk-purge");
    let config = |start_ms| BrokerConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..BrokerConfig::ephemeral().with_manual_clock(start_ms)
    };
    let broker = Broker::start(config(T0_MS)).await.unwrap();
    let (connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("purged", true), ("deleted", true), ("kept", true)]).await;
    let memory_before = broker.memory_used();
    // More than one purge chunk each.
    assert!(publish_many_delayed(&ch, "purged", 2_500, DAY_MS).await);
    assert!(publish_many_delayed(&ch, "deleted", 2_500, DAY_MS).await);
    assert!(publish_delayed(&ch, "kept", "kept", 2 * DAY_MS).await);
    // Held on disk: not charged as memory.
    assert_eq!(broker.memory_used(), memory_before);
    assert_eq!(broker.delayed_count("/", "purged"), 2_500);
    assert_eq!(broker.purge_delayed("/", "purged"), 2_500);
    assert_eq!(broker.delayed_count("/", "purged"), 0);
    assert!(broker.delayed_messages("/", "purged", 10).is_empty());
    ch.exchange_delete("deleted".into(), Default::default())
        .await
        .unwrap();
    assert_eq!(broker.delayed_count("/", "deleted"), 0);
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let broker = Broker::start(config(T0_MS + 1_000)).await.unwrap();
    assert_eq!(broker.delayed_count("/", "purged"), 0);
    assert_eq!(broker.delayed_count("/", "deleted"), 0);
    assert_eq!(broker.delayed_count("/", "kept"), 1);
    let (_connection, ch) = channel(&broker).await;
    // Declared again, the deleted exchange holds nothing.
    declare_delayed(&ch, "deleted", "direct", true).await;
    bind_all(&ch, "due", &["deleted"]).await;
    assert_eq!(broker.delayed_count("/", "deleted"), 0);
    broker.advance(std::time::Duration::from_millis(3 * DAY_MS as u64));
    assert_eq!(
        drain_with_get(&ch, "due").await,
        [("kept".to_string(), false)]
    );
    assert_eq!(broker.delayed_total(), 0);
    broker.shutdown().await;
}

/// Under the system clock a durable exchange's messages due beyond the horizon are held on
/// disk, and the disk mover thread brings them into the timer's wheel ahead of time: each is
/// released in due order and none before its time (publish order differs from due order).
#[tokio::test]
async fn disk_held_messages_are_released_in_due_order_under_the_system_clock() {
    let dir = DataDir::new("mover");
    let broker = start_on(&dir).await;
    let (_connection, ch) = channel(&broker).await;
    delayed_into_due(&ch, &[("later", true)]).await;
    let mut consumer = consume_no_ack(&ch, "due").await;
    // Delays 1.2 s to 2.15 s, 50 ms apart, published in a shuffled order and pipelined (the
    // confirms are awaited afterwards), so that due order is delay order.
    let delays: Vec<u64> = (0..20u64).map(|k| 1_200 + 50 * ((k * 7) % 20)).collect();
    let sent = std::time::Instant::now();
    let mut confirms = Vec::new();
    for &delay in &delays {
        let mut headers = FieldTable::default();
        headers.insert("x-delay".into(), AMQPValue::LongLongInt(delay as i64));
        let confirm = ch
            .basic_publish(
                "later".into(),
                "k".into(),
                BasicPublishOptions::default(),
                delay.to_string().as_bytes(),
                BasicProperties::default().with_headers(headers),
            )
            .await
            .expect("publish sent");
        confirms.push(confirm);
    }
    for confirm in confirms {
        assert!(confirm.await.expect("confirm").is_ack());
    }
    let mut released = Vec::new();
    for _ in &delays {
        let body = next_body(&mut consumer).await;
        let delay: u64 = body.parse().expect("a delay");
        // Never early: due at the broker's receipt plus the delay, which is after `sent`
        // (less the broker clock's millisecond rounding).
        let waited = sent.elapsed().as_millis() as u64;
        assert!(
            waited + 2 >= delay,
            "{delay} ms message released after {waited} ms"
        );
        released.push(delay);
    }
    let mut in_due_order = delays.clone();
    in_due_order.sort_unstable();
    assert_eq!(released, in_due_order);
    assert_eq!(broker.delayed_count("/", "later"), 0);
    broker.shutdown().await;
}
