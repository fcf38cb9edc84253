//! Queues through a real client: server-named queues, declare-ok counts, passive declares,
//! auto-delete, purge, unbind, the "last declared queue" shortcut, and
//! RabbitMQ's texts for bad arguments.

use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, ExchangeKind};

// ---------------------------------------------------------------------------------------------
// Declaring queues
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn server_named_queues_get_distinct_amq_gen_names() {
    let t = start().await;
    let ch = t.channel().await;
    let a = declare_with(
        &ch,
        "",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let b = declare_with(
        &ch,
        "",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    for q in [&a, &b] {
        let name = q.name().as_str();
        assert!(name.starts_with("amq.gen-"), "{name}");
        assert_eq!(name.len(), 30, "{name}");
        assert!(
            name["amq.gen-".len()..]
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
            "{name}"
        );
        assert_eq!((q.message_count(), q.consumer_count()), (0, 0));
    }
    assert_ne!(a.name(), b.name());
    let names = t.broker.queue_names("/");
    assert!(names.contains(&a.name().to_string()) && names.contains(&b.name().to_string()));
    // The generated name is usable like any other.
    fill(&ch, a.name().as_str(), &["x"]).await;
    assert_eq!(ready(&t, a.name().as_str()), 1);
}

#[tokio::test]
async fn declare_ok_counts_ready_messages_and_consumers() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "counted").await;
    fill(&ch, "counted", &["1", "2", "3"]).await;
    let q = declare_with(
        &ch,
        "counted",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!((q.message_count(), q.consumer_count()), (3, 0));

    // A consumer holding one unacked message: 2 ready, 1 consumer.
    let cch = t.channel().await;
    cch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = consume(&cch, "counted", "c", false).await;
    assert_eq!(next(&mut consumer).await.0, "1");
    let q = declare_with(
        &ch,
        "counted",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!((q.message_count(), q.consumer_count()), (2, 1));
    let info = t.broker.queue_info("/", "counted").unwrap();
    assert_eq!((info.messages, info.consumers), (2, 1));
}

#[tokio::test]
async fn passive_declare_of_an_existing_queue_reports_it_and_ignores_the_other_flags() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "there").await;
    fill(&ch, "there", &["a", "b"]).await;
    let _consumer = consume(&t.channel().await, "there", "", false).await;
    let q = declare_with(&ch, "there", passive(), FieldTable::default())
        .await
        .unwrap();
    assert_eq!(q.name().as_str(), "there");
    assert_eq!(q.consumer_count(), 1);
    // A passive declare does not compare durability or arguments (RabbitMQ ignores them).
    let q = declare_with(
        &ch,
        "there",
        QueueDeclareOptions {
            passive: true,
            durable: true,
            auto_delete: true,
            ..Default::default()
        },
        table(&[("x-max-length", AMQPValue::LongInt(1))]),
    )
    .await
    .unwrap();
    assert_eq!(q.name().as_str(), "there");
}

#[tokio::test]
async fn auto_delete_queue_goes_when_its_last_consumer_cancels_and_not_before_it_had_one() {
    let t = start().await;
    let ch = t.channel().await;
    let options = QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    declare_with(&ch, "ad", options, FieldTable::default())
        .await
        .unwrap();
    // Never had a consumer: publishing, basic.get and an empty get leave it in place.
    fill(&ch, "ad", &["m"]).await;
    assert!(ch
        .basic_get("ad".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .is_some());
    assert!(ch
        .basic_get("ad".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .is_none());
    assert!(t.broker.queue_info("/", "ad").is_some());

    let _c1 = consume(&ch, "ad", "c1", true).await;
    let _c2 = consume(&ch, "ad", "c2", true).await;
    ch.basic_cancel("c1".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    // One consumer left: still there.
    assert_eq!(t.broker.queue_info("/", "ad").unwrap().consumers, 1);
    ch.basic_cancel("c2".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    assert!(t.broker.queue_info("/", "ad").is_none());
    let err = declare_with(&ch, "ad", passive(), FieldTable::default()).await;
    assert_eq!(
        channel_error(err),
        (404, "NOT_FOUND - no queue 'ad' in vhost '/'".into())
    );
}

#[tokio::test]
async fn auto_delete_queue_goes_when_its_consumers_channel_closes() {
    let t = start().await;
    let ch = t.channel().await;
    let options = QueueDeclareOptions {
        auto_delete: true,
        ..Default::default()
    };
    declare_with(&ch, "ad-close", options, FieldTable::default())
        .await
        .unwrap();
    let cch = t.channel().await;
    let _c = consume(&cch, "ad-close", "", false).await;
    cch.close(200, "bye".into()).await.unwrap();
    assert!(t.broker.queue_info("/", "ad-close").is_none());
}

#[tokio::test]
async fn purge_returns_the_ready_count_and_leaves_unacked_messages_alone() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "pq").await;
    fill(&ch, "pq", &["1", "2", "3", "4"]).await;
    assert_eq!(
        ch.queue_purge("pq".into(), QueuePurgeOptions::default())
            .await
            .unwrap(),
        4
    );
    assert_eq!(ready(&t, "pq"), 0);
    assert_eq!(
        ch.queue_purge("pq".into(), QueuePurgeOptions::default())
            .await
            .unwrap(),
        0
    );

    // One delivered and unacked, two ready: purge takes the two; the unacked one comes back.
    fill(&ch, "pq", &["a", "b", "c"]).await;
    let cch = t.channel().await;
    cch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = consume(&cch, "pq", "c", false).await;
    let (first, tag, _) = next(&mut consumer).await;
    assert_eq!(first, "a");
    assert_eq!(
        ch.queue_purge("pq".into(), QueuePurgeOptions::default())
            .await
            .unwrap(),
        2
    );
    cch.basic_cancel("c".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    cch.basic_nack(
        tag,
        BasicNackOptions {
            requeue: true,
            multiple: false,
        },
    )
    .await
    .unwrap();
    sync(&cch).await;
    assert_eq!(
        drain_with_get(&ch, "pq").await,
        vec![("a".to_string(), true)]
    );
}

#[tokio::test]
async fn unbind_stops_routing_and_unbinding_twice_is_fine() {
    let t = start().await;
    let ch = t.channel().await;
    ch.exchange_declare(
        "ux".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare_queue(&ch, "uq").await;
    ch.queue_bind(
        "uq".into(),
        "ux".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish(&ch, "ux", "k", "routed").await;
    sync(&ch).await;
    assert_eq!(ready(&t, "uq"), 1);
    ch.queue_unbind("uq".into(), "ux".into(), "k".into(), FieldTable::default())
        .await
        .unwrap();
    publish(&ch, "ux", "k", "dropped").await;
    sync(&ch).await;
    assert_eq!(ready(&t, "uq"), 1);
    // A binding that does not exist: unbind succeeds, as in RabbitMQ.
    ch.queue_unbind("uq".into(), "ux".into(), "k".into(), FieldTable::default())
        .await
        .unwrap();
    // Headers bindings are matched on their arguments too.
    let args = table(&[("x-match", long_str("any")), ("a", long_str("1"))]);
    ch.queue_bind(
        "uq".into(),
        "amq.headers".into(),
        "".into(),
        QueueBindOptions::default(),
        args.clone(),
    )
    .await
    .unwrap();
    ch.queue_unbind("uq".into(), "amq.headers".into(), "".into(), args)
        .await
        .unwrap();
    ch.basic_publish(
        "amq.headers".into(),
        "".into(),
        BasicPublishOptions::default(),
        b"h",
        BasicProperties::default().with_headers(table(&[("a", long_str("1"))])),
    )
    .await
    .unwrap();
    sync(&ch).await;
    assert_eq!(ready(&t, "uq"), 1);
}

#[tokio::test]
async fn empty_queue_name_means_the_last_queue_declared_on_the_channel() {
    let t = start().await;
    let ch = t.channel().await;
    let q = declare_with(
        &ch,
        "",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let name = q.name().to_string();
    ch.queue_bind(
        "".into(),
        "amq.direct".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish(&ch, "amq.direct", "k", "one").await;
    publish(&ch, "amq.direct", "k", "two").await;
    sync(&ch).await;
    assert_eq!(ready(&t, &name), 2);
    let got = ch
        .basic_get("".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(body(&got.delivery), "one");
    assert_eq!(
        ch.queue_purge("".into(), QueuePurgeOptions::default())
            .await
            .unwrap(),
        1
    );
    let mut consumer = consume(&ch, "", "", true).await;
    publish(&ch, "amq.direct", "k", "three").await;
    assert_eq!(next(&mut consumer).await.0, "three");
    ch.queue_unbind(
        "".into(),
        "amq.direct".into(),
        "k".into(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_delete("".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    assert!(t.broker.queue_info("/", &name).is_none());

    // Another channel has declared nothing: RabbitMQ's 404.
    let other = t.channel().await;
    let err = other
        .queue_purge("".into(), QueuePurgeOptions::default())
        .await;
    assert_eq!(
        channel_error(err),
        (404, "NOT_FOUND - no previously declared queue".into())
    );
}

#[tokio::test]
async fn bind_with_empty_queue_and_empty_key_uses_the_queue_name_as_key() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "shortcut").await;
    ch.queue_bind(
        "".into(),
        "amq.direct".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish(&ch, "amq.direct", "shortcut", "by name").await;
    sync(&ch).await;
    assert_eq!(ready(&t, "shortcut"), 1);
}

#[tokio::test]
async fn closing_a_connection_does_not_delete_a_later_queue_of_the_same_name() {
    let t = start().await;
    let a = t.channel().await;
    declare_with(
        &a,
        "reused",
        QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    let _c = consume(&a, "reused", "c", true).await;
    a.basic_cancel("c".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    assert!(t.broker.queue_info("/", "reused").is_none());

    // Another connection now owns a plain queue called "reused".
    let other = connect(&t.broker).await;
    let b = other.create_channel().await.unwrap();
    declare_queue(&b, "reused").await;
    fill(&b, "reused", &["keep me"]).await;

    t.connection.close(200, "bye".into()).await.unwrap();
    eventually("the first connection is gone", || {
        t.broker.connection_count() == 1
    })
    .await;
    let q = declare_with(&b, "reused", passive(), FieldTable::default())
        .await
        .expect("the other connection's queue survives");
    assert_eq!(q.message_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// Argument validation
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn bad_queue_arguments_are_406_with_rabbitmqs_texts() {
    let t = start().await;
    let plain = QueueDeclareOptions::default();
    let cases: Vec<(&str, QueueDeclareOptions, FieldTable, &str)> = vec![
        (
            "ttl",
            plain,
            table(&[("x-message-ttl", AMQPValue::LongInt(-1))]),
            "invalid arg 'x-message-ttl' for queue 'ttl' in vhost '/': {value_negative,-1}",
        ),
        (
            "exp0",
            plain,
            table(&[("x-expires", AMQPValue::LongInt(0))]),
            "invalid arg 'x-expires' for queue 'exp0' in vhost '/': {value_zero,0}",
        ),
        (
            "ovf",
            plain,
            table(&[("x-overflow", long_str("drop-tail"))]),
            "invalid arg 'x-overflow' for queue 'ovf' in vhost '/': invalid_overflow",
        ),
        (
            "typ",
            plain,
            table(&[("x-queue-type", long_str("fancy"))]),
            "invalid arg 'x-queue-type' for queue 'typ' in vhost '/': \"unsupported queue type 'fancy'\"",
        ),
        (
            "qq",
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..Default::default()
            },
            table(&[("x-queue-type", long_str("quorum"))]),
            "invalid property 'exclusive-owner' for queue 'qq' in vhost '/'",
        ),
    ];
    for (name, options, arguments, text) in cases {
        let ch = t.channel().await;
        let err = declare_with(&ch, name, options, arguments).await;
        assert_eq!(
            channel_error(err),
            (406, format!("PRECONDITION_FAILED - {text}")),
            "queue {name}"
        );
        assert!(
            t.broker.queue_info("/", name).is_none(),
            "{name} not created"
        );
    }
}

#[tokio::test]
async fn headers_binding_with_a_bad_x_match_is_406() {
    let t = start().await;
    let ch = t.channel().await;
    declare_queue(&ch, "hq").await;
    let err = ch
        .queue_bind(
            "hq".into(),
            "amq.headers".into(),
            "".into(),
            QueueBindOptions::default(),
            table(&[("x-match", long_str("some")), ("a", long_str("1"))]),
        )
        .await;
    assert_eq!(
        channel_error(err),
        (
            406,
            "PRECONDITION_FAILED - Invalid x-match field value <<\"some\">>; expected all, any, all-with-x, or any-with-x".into()
        )
    );
    let ch = t.channel().await;
    let err = ch
        .queue_bind(
            "hq".into(),
            "amq.match".into(),
            "".into(),
            QueueBindOptions::default(),
            table(&[("x-match", AMQPValue::LongInt(5))]),
        )
        .await;
    assert_eq!(
        channel_error(err),
        (
            406,
            "PRECONDITION_FAILED - Invalid x-match field type signedint (value 5); expected longstr"
                .into()
        )
    );
    // The valid modes bind.
    let ch = t.channel().await;
    for mode in ["all", "any", "all-with-x", "any-with-x"] {
        ch.queue_bind(
            "hq".into(),
            "amq.headers".into(),
            "".into(),
            QueueBindOptions::default(),
            table(&[("x-match", long_str(mode)), ("a", long_str("1"))]),
        )
        .await
        .unwrap_or_else(|e| panic!("x-match {mode}: {e}"));
    }
}

#[tokio::test]
async fn recover_without_requeue_is_not_implemented_like_rabbitmq() {
    let t = start().await;
    let ch = t.channel().await;
    let err = ch
        .basic_recover(BasicRecoverOptions { requeue: false })
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (540, "NOT_IMPLEMENTED - requeue=false".into())
    );
}

#[tokio::test]
async fn a_priority_queue_delivers_highest_priority_first_and_requeues_in_place() {
    let t = start().await;
    let ch = t.channel().await;
    let mut args = FieldTable::default();
    args.insert("x-max-priority".into(), AMQPValue::ShortShortUInt(3));
    ch.queue_declare("prio".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    for (body, priority) in [
        ("none", None),
        ("p1", Some(1)),
        ("p7", Some(7)),
        ("p3", Some(3)),
    ] {
        let mut props = BasicProperties::default();
        if let Some(p) = priority {
            props = props.with_priority(p);
        }
        ch.basic_publish(
            "".into(),
            "prio".into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            props,
        )
        .await
        .unwrap();
    }
    sync(&ch).await;
    // 7 is capped at the queue's maximum, 3, and then keeps publish order within that level.
    let first = ch
        .basic_get("prio".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(body(&first.delivery), "p7");
    ch.basic_reject(
        first.delivery.delivery_tag,
        BasicRejectOptions { requeue: true },
    )
    .await
    .unwrap();
    let order = drain_with_get(&ch, "prio").await;
    assert_eq!(
        order,
        [
            ("p7".to_string(), true),
            ("p3".to_string(), false),
            ("p1".to_string(), false),
            ("none".to_string(), false),
        ]
    );
}
