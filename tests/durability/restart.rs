//! What survives a stop and a start on the same directory (definitions, persistent messages,
//! deletions), and confirms that wait for the commit in progress.

use crate::common::*;
use crate::support::*;
use dwellmq::{ApplyTo, Broker, BrokerConfig, Policy, PolicyDefinition};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, ConfirmSelectOptions, ExchangeBindOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::ExchangeKind;

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

/// Deleting a queue that held an auto-delete exchange's last binding deletes the exchange,
/// in the store too: it does not come back after a restart. Before, only memory forgot it.
#[tokio::test]
async fn an_auto_delete_exchange_orphaned_by_a_queue_deletion_does_not_come_back() {
    let dir = DataDir::new("orphaned-auto-delete");
    let broker = start_on(&dir).await;
    let (connection, ch) = channel(&broker).await;
    ch.exchange_declare(
        "fleeting".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions {
            durable: true,
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare(&ch, "only", true, FieldTable::default()).await;
    ch.queue_bind(
        "only".into(),
        "fleeting".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_delete("only".into(), Default::default())
        .await
        .unwrap();
    assert!(!broker.exchange_names("/").iter().any(|x| x == "fleeting"));
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let broker = start_on(&dir).await;
    assert!(
        !broker.exchange_names("/").iter().any(|x| x == "fleeting"),
        "the orphaned exchange came back: {:?}",
        broker.exchange_names("/")
    );
    broker.shutdown().await;
}
