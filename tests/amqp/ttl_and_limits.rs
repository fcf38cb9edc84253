//! Message TTL, queue expiry and length limits through a real client, on the manual clock.

use std::time::Duration;

use crate::common::*;
use dwellmq::BrokerConfig;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

fn args(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (k, v) in entries {
        table.insert((*k).into(), v.clone());
    }
    table
}

async fn queue_with(ch: &Channel, name: &str, entries: &[(&str, AMQPValue)]) {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), args(entries))
        .await
        .expect("queue declared");
}

async fn publish(ch: &Channel, queue: &str, body: &str, expiration: Option<&str>) {
    let mut props = BasicProperties::default();
    if let Some(e) = expiration {
        props = props.with_expiration(e.into());
    }
    ch.basic_publish(
        "".into(),
        queue.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        props,
    )
    .await
    .expect("published");
    sync(ch).await;
}

async fn ready(ch: &Channel, queue: &str) -> u32 {
    passive_declare(ch, queue)
        .await
        .expect("queue exists")
        .message_count()
}

async fn get_body(ch: &Channel, queue: &str) -> Option<String> {
    ch.basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
        .map(|m| String::from_utf8(m.delivery.data).expect("utf-8"))
}

#[tokio::test]
async fn a_per_message_ttl_expires_the_message_on_the_dot() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    publish(&ch, "q", "m", Some("1000")).await;
    t.broker.advance(Duration::from_millis(999));
    assert_eq!(ready(&ch, "q").await, 1);
    t.broker.advance(Duration::from_millis(1));
    assert_eq!(ready(&ch, "q").await, 0);
    assert_eq!(get_body(&ch, "q").await, None);
    assert_eq!(t.broker.death_counts(dwellmq::DeathReason::Expired), (0, 1));
}

#[tokio::test]
async fn queue_ttl_and_message_ttl_the_lower_wins() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(&ch, "q", &[("x-message-ttl", AMQPValue::LongInt(500))]).await;
    publish(&ch, "q", "queue-ttl", None).await;
    publish(&ch, "q", "message-ttl-lower", Some("100")).await;
    publish(&ch, "q", "message-ttl-higher", Some("5000")).await;
    t.broker.advance(Duration::from_millis(100));
    assert_eq!(ready(&ch, "q").await, 2);
    t.broker.advance(Duration::from_millis(400));
    assert_eq!(ready(&ch, "q").await, 0);
}

#[tokio::test]
async fn ttl_zero_reaches_only_a_consumer_that_can_take_it_at_once() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(&ch, "q", &[("x-message-ttl", AMQPValue::LongInt(0))]).await;
    publish(&ch, "q", "nobody-waits", None).await;
    assert_eq!(ready(&ch, "q").await, 0);
    assert_eq!(get_body(&ch, "q").await, None);
    let mut consumer = consume_no_ack(&ch, "q").await;
    publish(&ch, "q", "taken", None).await;
    assert_eq!(next_body(&mut consumer).await, "taken");
}

#[tokio::test]
async fn an_expired_message_is_never_delivered_even_after_a_requeue() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    publish(&ch, "q", "short", Some("100")).await;
    publish(&ch, "q", "long", None).await;
    let first = ch
        .basic_get("q".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.delivery.data, b"short");
    t.broker.advance(Duration::from_millis(150));
    // Requeued after its deadline: it keeps its original expiry, so it is gone at once.
    first
        .delivery
        .nack(BasicNackOptions {
            requeue: true,
            ..Default::default()
        })
        .await
        .unwrap();
    sync(&ch).await;
    assert_eq!(get_body(&ch, "q").await.as_deref(), Some("long"));
    assert_eq!(get_body(&ch, "q").await, None);
}

/// dwellmq's default: a short TTL behind a long one still expires on time.
#[tokio::test]
async fn expiry_is_on_time_behind_a_longer_ttl_by_default() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    publish(&ch, "q", "long", Some("60000")).await;
    publish(&ch, "q", "short", Some("1000")).await;
    t.broker.advance(Duration::from_millis(999));
    assert_eq!(
        ready(&ch, "q").await,
        2,
        "nothing expires a millisecond early"
    );
    t.broker.advance(Duration::from_millis(1));
    assert_eq!(
        ready(&ch, "q").await,
        1,
        "the short one expires behind the long one"
    );
    assert_eq!(get_body(&ch, "q").await.as_deref(), Some("long"));
    assert_eq!(get_body(&ch, "q").await, None);
}

/// RabbitMQ's classic queues expire only at the head: the head-of-queue trap, kept on request.
#[tokio::test]
async fn head_only_expiry_reproduces_rabbitmqs_head_of_queue_trap() {
    let t = start_with(
        BrokerConfig::ephemeral()
            .with_manual_clock(T0_MS)
            .with_head_only_expiry(),
    )
    .await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    publish(&ch, "q", "long", Some("60000")).await;
    publish(&ch, "q", "short", Some("1000")).await;
    t.broker.advance(Duration::from_millis(1000));
    assert_eq!(ready(&ch, "q").await, 2);
    t.broker.advance(Duration::from_millis(59_000));
    assert_eq!(ready(&ch, "q").await, 0);
}

#[tokio::test]
async fn an_unused_queue_expires_and_use_postpones_it() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(&ch, "temp", &[("x-expires", AMQPValue::LongInt(10_000))]).await;
    publish(&ch, "temp", "kept-until-expiry", None).await;
    t.broker.advance(Duration::from_millis(6_000));
    // A basic.get is a use: the period starts again.
    assert_eq!(
        get_body(&ch, "temp").await.as_deref(),
        Some("kept-until-expiry")
    );
    t.broker.advance(Duration::from_millis(6_000));
    assert!(t.broker.queue_info("/", "temp").is_some());
    t.broker.advance(Duration::from_millis(4_000));
    assert!(t.broker.queue_info("/", "temp").is_none());
}

#[tokio::test]
async fn a_queue_with_a_consumer_does_not_expire_until_the_consumer_leaves() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(&ch, "temp", &[("x-expires", AMQPValue::LongInt(1_000))]).await;
    let consumer = consume_no_ack(&ch, "temp").await;
    t.broker.advance(Duration::from_millis(5_000));
    assert!(t.broker.queue_info("/", "temp").is_some());
    ch.basic_cancel(consumer.tag(), BasicCancelOptions::default())
        .await
        .unwrap();
    t.broker.advance(Duration::from_millis(999));
    assert!(t.broker.queue_info("/", "temp").is_some());
    t.broker.advance(Duration::from_millis(1));
    assert!(t.broker.queue_info("/", "temp").is_none());
}

#[tokio::test]
async fn redeclaring_a_queue_postpones_its_expiry() {
    let t = start_manual().await;
    let ch = t.channel().await;
    let expires = [("x-expires", AMQPValue::LongInt(1_000))];
    queue_with(&ch, "temp", &expires).await;
    t.broker.advance(Duration::from_millis(900));
    queue_with(&ch, "temp", &expires).await;
    t.broker.advance(Duration::from_millis(900));
    assert!(t.broker.queue_info("/", "temp").is_some());
    t.broker.advance(Duration::from_millis(100));
    assert!(t.broker.queue_info("/", "temp").is_none());
}

#[tokio::test]
async fn drop_head_keeps_the_newest_within_max_length() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(&ch, "q", &[("x-max-length", AMQPValue::LongInt(2))]).await;
    for body in ["a", "b", "c"] {
        publish(&ch, "q", body, None).await;
    }
    assert_eq!(get_body(&ch, "q").await.as_deref(), Some("b"));
    assert_eq!(get_body(&ch, "q").await.as_deref(), Some("c"));
}

#[tokio::test]
async fn max_length_bytes_counts_body_bytes() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(&ch, "q", &[("x-max-length-bytes", AMQPValue::LongInt(6))]).await;
    for body in ["aaa", "bbb", "ccc"] {
        publish(&ch, "q", body, None).await;
    }
    assert_eq!(ready(&ch, "q").await, 2);
    assert_eq!(get_body(&ch, "q").await.as_deref(), Some("bbb"));
}

#[tokio::test]
async fn reject_publish_nacks_under_confirms_and_other_queues_still_take_it() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(
        &ch,
        "full",
        &[
            ("x-max-length", AMQPValue::LongInt(1)),
            ("x-overflow", AMQPValue::LongString("reject-publish".into())),
        ],
    )
    .await;
    declare_queue(&ch, "open").await;
    for queue in ["full", "open"] {
        ch.queue_bind(
            queue.into(),
            "amq.fanout".into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let mut confirms = Vec::new();
    for body in ["first", "second", "third"] {
        let confirm = ch
            .basic_publish(
                "amq.fanout".into(),
                "".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        confirms.push(confirm.is_ack());
    }
    assert_eq!(confirms, [true, false, false]);
    assert_eq!(ready(&ch, "full").await, 1);
    assert_eq!(ready(&ch, "open").await, 3);
}

#[tokio::test]
async fn reject_publish_without_confirms_drops_the_new_message() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(
        &ch,
        "full",
        &[
            ("x-max-length", AMQPValue::LongInt(1)),
            ("x-overflow", AMQPValue::LongString("reject-publish".into())),
        ],
    )
    .await;
    publish(&ch, "full", "kept", None).await;
    publish(&ch, "full", "refused", None).await;
    assert_eq!(get_body(&ch, "full").await.as_deref(), Some("kept"));
    assert_eq!(get_body(&ch, "full").await, None);
}

#[tokio::test]
async fn reject_publish_dlx_also_dead_letters_the_refused_message() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "overflowed").await;
    queue_with(
        &ch,
        "full",
        &[
            ("x-max-length", AMQPValue::LongInt(1)),
            (
                "x-overflow",
                AMQPValue::LongString("reject-publish-dlx".into()),
            ),
            ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
            (
                "x-dead-letter-routing-key",
                AMQPValue::LongString("overflowed".into()),
            ),
        ],
    )
    .await;
    publish(&ch, "full", "kept", None).await;
    publish(&ch, "full", "refused", None).await;
    assert_eq!(
        get_body(&ch, "overflowed").await.as_deref(),
        Some("refused")
    );
    assert_eq!(get_body(&ch, "full").await.as_deref(), Some("kept"));
}

#[tokio::test]
async fn declare_ok_and_purge_count_only_what_a_consumer_can_receive() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    publish(&ch, "q", "expiring", Some("10")).await;
    publish(&ch, "q", "staying", None).await;
    t.broker.advance(Duration::from_millis(10));
    assert_eq!(ready(&ch, "q").await, 1);
    let purged = ch
        .queue_purge("q".into(), QueuePurgeOptions::default())
        .await
        .unwrap();
    assert_eq!(purged, 1);
}

#[tokio::test]
async fn bad_ttl_length_and_dead_letter_arguments_are_406_with_rabbitmqs_texts() {
    let t = start().await;
    type Case = (&'static str, Vec<(&'static str, AMQPValue)>, &'static str);
    let cases: Vec<Case> = vec![
        (
            "len",
            vec![("x-max-length", AMQPValue::LongInt(-1))],
            "invalid arg 'x-max-length' for queue 'len' in vhost '/': {value_negative,-1}",
        ),
        (
            "bytes",
            vec![("x-max-length-bytes", AMQPValue::Boolean(true))],
            "invalid arg 'x-max-length-bytes' for queue 'bytes' in vhost '/': \"expected integer, got bool\"",
        ),
        (
            "dlrk",
            vec![("x-dead-letter-routing-key", AMQPValue::LongString("rk".into()))],
            "invalid arg 'x-dead-letter-routing-key' for queue 'dlrk' in vhost '/': routing_key_but_no_dlx_defined",
        ),
        (
            "ttl",
            vec![("x-message-ttl", AMQPValue::LongLongInt(315_360_000_001))],
            "invalid arg 'x-message-ttl' for queue 'ttl' in vhost '/': {value_too_large,315360000001}",
        ),
    ];
    for (name, entries, text) in cases {
        let ch = t.channel().await;
        let err = ch
            .queue_declare(name.into(), QueueDeclareOptions::default(), args(&entries))
            .await
            .expect_err("refused");
        assert_eq!(
            amqp_error(&err),
            (406, format!("PRECONDITION_FAILED - {text}")),
            "queue {name}"
        );
    }
}

/// Under confirms: drop-head acks the new message (the old one goes), reject-publish-dlx nacks
/// it and dead-letters it.
#[tokio::test]
async fn overflow_modes_under_confirms() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "overflowed").await;
    for (queue, overflow) in [("dh", "drop-head"), ("rpd", "reject-publish-dlx")] {
        queue_with(
            &ch,
            queue,
            &[
                ("x-max-length", AMQPValue::LongInt(1)),
                ("x-overflow", AMQPValue::LongString(overflow.into())),
                ("x-dead-letter-exchange", AMQPValue::LongString("".into())),
                (
                    "x-dead-letter-routing-key",
                    AMQPValue::LongString("overflowed".into()),
                ),
            ],
        )
        .await;
    }
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let mut acks = Vec::new();
    for (queue, body) in [("dh", "a"), ("dh", "b"), ("rpd", "c"), ("rpd", "d")] {
        let confirm = ch
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        acks.push(confirm.is_ack());
    }
    assert_eq!(acks, [true, true, true, false]);
    assert_eq!(get_body(&ch, "overflowed").await.as_deref(), Some("a"));
    assert_eq!(get_body(&ch, "overflowed").await.as_deref(), Some("d"));
    assert_eq!(get_body(&ch, "dh").await.as_deref(), Some("b"));
    assert_eq!(get_body(&ch, "rpd").await.as_deref(), Some("c"));
}

#[tokio::test]
async fn x_single_active_consumer_delivers_to_one_consumer_at_a_time() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(
        &ch,
        "sac",
        &[("x-single-active-consumer", AMQPValue::Boolean(true))],
    )
    .await;
    let mut first = consume_no_ack(&ch, "sac").await;
    let other = t.channel().await;
    let mut second = consume_no_ack(&other, "sac").await;
    for body in ["a", "b", "c"] {
        publish(&ch, "sac", body, None).await;
    }
    for body in ["a", "b", "c"] {
        assert_eq!(next_body(&mut first).await, body);
    }
    ch.basic_cancel(first.tag(), BasicCancelOptions::default())
        .await
        .unwrap();
    publish(&ch, "sac", "d", None).await;
    assert_eq!(next_body(&mut second).await, "d");
}

#[tokio::test]
async fn wait_for_sees_a_condition_reached_and_names_what_it_saw_on_timeout() {
    use dwellmq::Condition;
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    ch.basic_publish(
        "".into(),
        "q".into(),
        BasicPublishOptions::default(),
        b"m",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    t.broker
        .wait_for(Condition::ready("q", 1), Duration::from_secs(5))
        .await
        .unwrap();
    t.broker
        .wait_for(Condition::Idle, Duration::from_secs(5))
        .await
        .unwrap();
    let err = t
        .broker
        .wait_for(Condition::consumers("q", 1), Duration::from_millis(20))
        .await
        .unwrap_err();
    assert_eq!(err.seen, "0 consumers");
    let missing = t
        .broker
        .wait_for(Condition::ready("nope", 0), Duration::from_millis(5))
        .await
        .unwrap_err();
    assert_eq!(missing.seen, "no queue 'nope' in vhost '/'");
}

#[tokio::test]
async fn a_queue_expires_only_once_its_last_consumer_has_left_and_from_that_moment() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(&ch, "temp", &[("x-expires", AMQPValue::LongInt(1_000))]).await;
    publish(&ch, "temp", "held", None).await;
    // Two consumers on another connection: one acking (it holds the message unacked), one not.
    let other = connect(&t.broker).await;
    let holder = other.create_channel().await.unwrap();
    let mut holding = holder
        .basic_consume(
            "temp".into(),
            "holder".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let held = next_delivery(&mut holding).await;
    assert_eq!(held.data, b"held");
    let watcher = other.create_channel().await.unwrap();
    let watching = consume_no_ack(&watcher, "temp").await;
    t.broker.advance(Duration::from_millis(10_000));
    assert!(t.broker.queue_info("/", "temp").is_some());

    // One consumer leaves by basic.cancel: the other still uses the queue.
    watcher
        .basic_cancel(watching.tag(), BasicCancelOptions::default())
        .await
        .unwrap();
    t.broker.advance(Duration::from_millis(10_000));
    assert!(t.broker.queue_info("/", "temp").is_some());

    // The last one leaves with its connection (its message back in the queue): the period
    // starts at that moment, not at the queue's last earlier use.
    other.close(200, "bye".into()).await.unwrap();
    eventually("the closed connection's consumer is gone", || {
        t.broker
            .queue_info("/", "temp")
            .is_some_and(|q| q.consumers == 0)
    })
    .await;
    assert_eq!(
        ready(&ch, "temp").await,
        1,
        "the unacked message is requeued"
    );
    t.broker.advance(Duration::from_millis(999));
    assert!(t.broker.queue_info("/", "temp").is_some());
    t.broker.advance(Duration::from_millis(1));
    assert!(t.broker.queue_info("/", "temp").is_none());
    // Gone for the client too: RabbitMQ's 404 on a passive declare.
    let ch = t.channel().await;
    let (code, _) = channel_error(passive_declare(&ch, "temp").await);
    assert_eq!(code, 404);
}
