//! Dead-lettering through a real client: every reason, the exact `x-death` history, routing-key
//! override, CC/BCC, the cycle rule, and the retry loop services build from it.

use std::time::Duration;

use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, ExchangeKind};

/// `x-dead-letter-exchange` (and optionally `-routing-key`) plus any extra arguments.
fn dlx_args(exchange: &str, routing_key: Option<&str>, extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(exchange.into()),
    );
    if let Some(key) = routing_key {
        args.insert(
            "x-dead-letter-routing-key".into(),
            AMQPValue::LongString(key.into()),
        );
    }
    for (k, v) in extra {
        args.insert((*k).into(), v.clone());
    }
    args
}

async fn queue_with(ch: &Channel, name: &str, args: FieldTable) {
    ch.queue_declare(name.into(), QueueDeclareOptions::default(), args)
        .await
        .expect("queue declared");
}

async fn publish(ch: &Channel, exchange: &str, key: &str, body: &str, props: BasicProperties) {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        props,
    )
    .await
    .expect("published");
    // The broker has taken it before the test moves the clock.
    sync(ch).await;
}

async fn get(ch: &Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    ch.basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
}

async fn get_one(ch: &Channel, queue: &str) -> lapin::message::BasicGetMessage {
    get(ch, queue).await.expect("a message is ready")
}

fn text(v: &AMQPValue) -> String {
    match v {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        AMQPValue::ShortString(s) => s.to_string(),
        AMQPValue::LongLongInt(n) => format!("{n}"),
        AMQPValue::Timestamp(t) => format!("T{t}"),
        AMQPValue::FieldArray(a) => {
            let items: Vec<String> = a.as_slice().iter().map(text).collect();
            format!("[{}]", items.join(","))
        }
        other => format!("{other:?}"),
    }
}

/// Each `x-death` entry as `key=value` pairs in a fixed key order, most recent first.
fn x_death(props: &BasicProperties) -> Vec<String> {
    let headers = props.headers().as_ref().expect("headers");
    let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death") else {
        panic!("no x-death array in {headers:?}");
    };
    deaths
        .as_slice()
        .iter()
        .map(|d| {
            let AMQPValue::FieldTable(t) = d else {
                panic!("x-death entry is not a table: {d:?}")
            };
            let order = [
                "count",
                "reason",
                "queue",
                "time",
                "exchange",
                "routing-keys",
                "original-expiration",
            ];
            assert!(
                t.inner().keys().all(|k| order.contains(&k.as_str())),
                "unexpected x-death key in {t:?}"
            );
            order
                .iter()
                .filter_map(|k| t.inner().get(*k).map(|v| format!("{k}={}", text(v))))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn header(props: &BasicProperties, name: &str) -> Option<String> {
    props
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(name))
        .map(text)
}

const T0_S: u64 = T0_MS / 1000;

/// A work queue dead-lettering into `dlx` (fanout) → `dead`.
async fn work_and_dead(ch: &Channel, work_args: FieldTable) {
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare_queue(ch, "dead").await;
    ch.queue_bind(
        "dead".into(),
        "dlx".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    queue_with(ch, "work", work_args).await;
}

#[tokio::test]
async fn a_rejected_message_carries_rabbitmqs_x_death() {
    let t = start_manual().await;
    let ch = t.channel().await;
    work_and_dead(&ch, dlx_args("dlx", None, &[])).await;
    publish(&ch, "", "work", "job", BasicProperties::default()).await;
    let msg = ch
        .basic_get("work".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    msg.delivery
        .nack(BasicNackOptions {
            requeue: false,
            ..Default::default()
        })
        .await
        .unwrap();
    let dead = get_one(&ch, "dead").await;
    assert_eq!(dead.delivery.exchange.as_str(), "dlx");
    assert_eq!(dead.delivery.routing_key.as_str(), "work");
    let props = &dead.delivery.properties;
    assert_eq!(
        x_death(props),
        [format!(
            "count=1 reason=rejected queue=work time=T{T0_S} exchange= routing-keys=[work]"
        )]
    );
    for (name, value) in [
        ("x-first-death-queue", "work"),
        ("x-first-death-reason", "rejected"),
        ("x-first-death-exchange", ""),
        ("x-last-death-queue", "work"),
        ("x-last-death-reason", "rejected"),
        ("x-last-death-exchange", ""),
    ] {
        assert_eq!(header(props, name).as_deref(), Some(value), "{name}");
    }
    assert_eq!(
        t.broker.death_counts(dwellmq::DeathReason::Rejected),
        (1, 0)
    );
}

#[tokio::test]
async fn an_expired_message_keeps_its_ttl_as_original_expiration() {
    let t = start_manual().await;
    let ch = t.channel().await;
    work_and_dead(&ch, dlx_args("dlx", None, &[])).await;
    publish(
        &ch,
        "",
        "work",
        "soon",
        BasicProperties::default().with_expiration("1500".into()),
    )
    .await;
    t.broker.advance(Duration::from_millis(1499));
    assert_eq!(
        passive_declare(&ch, "work").await.unwrap().message_count(),
        1
    );
    t.broker.advance(Duration::from_millis(1));
    assert_eq!(
        passive_declare(&ch, "work").await.unwrap().message_count(),
        0
    );
    let dead = get_one(&ch, "dead").await;
    let props = &dead.delivery.properties;
    assert_eq!(
        x_death(props),
        [format!(
            "count=1 reason=expired queue=work time=T{} exchange= routing-keys=[work] \
             original-expiration=1500",
            T0_S + 1
        )]
    );
    // The message must not expire again where it goes next.
    assert_eq!(props.expiration(), &None);
}

#[tokio::test]
async fn drop_head_dead_letters_the_oldest_with_reason_maxlen() {
    let t = start_manual().await;
    let ch = t.channel().await;
    work_and_dead(
        &ch,
        dlx_args("dlx", None, &[("x-max-length", AMQPValue::LongInt(1))]),
    )
    .await;
    publish(&ch, "", "work", "first", BasicProperties::default()).await;
    publish(&ch, "", "work", "second", BasicProperties::default()).await;
    let dead = get_one(&ch, "dead").await;
    assert_eq!(dead.delivery.data, b"first");
    assert_eq!(
        x_death(&dead.delivery.properties),
        [format!(
            "count=1 reason=maxlen queue=work time=T{T0_S} exchange= routing-keys=[work]"
        )]
    );
    assert_eq!(get_one(&ch, "work").await.delivery.data, b"second");
}

fn cc(keys: &[&str]) -> FieldTable {
    let mut headers = FieldTable::default();
    headers.insert(
        "CC".into(),
        AMQPValue::FieldArray(
            keys.iter()
                .map(|k| AMQPValue::LongString(LongString::from(*k)))
                .collect::<Vec<_>>()
                .into(),
        ),
    );
    headers
}

#[tokio::test]
async fn without_a_dead_letter_routing_key_cc_keys_route_and_are_recorded() {
    let t = start_manual().await;
    let ch = t.channel().await;
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    for (queue, key) in [("by-key", "work"), ("by-cc", "extra")] {
        declare_queue(&ch, queue).await;
        ch.queue_bind(
            queue.into(),
            "dlx".into(),
            key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    queue_with(
        &ch,
        "work",
        dlx_args("dlx", None, &[("x-message-ttl", AMQPValue::LongInt(10))]),
    )
    .await;
    publish(
        &ch,
        "",
        "work",
        "m",
        BasicProperties::default().with_headers(cc(&["extra"])),
    )
    .await;
    t.broker.advance(Duration::from_millis(10));
    for queue in ["by-key", "by-cc"] {
        let dead = get_one(&ch, queue).await;
        let props = &dead.delivery.properties;
        assert_eq!(header(props, "CC").as_deref(), Some("[extra]"));
        assert_eq!(
            x_death(props),
            [format!(
                "count=1 reason=expired queue=work time=T{T0_S} exchange= routing-keys=[work,extra]"
            )]
        );
    }
}

#[tokio::test]
async fn a_dead_letter_routing_key_replaces_the_keys_and_drops_cc() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "parking").await;
    queue_with(
        &ch,
        "work",
        dlx_args(
            "",
            Some("parking"),
            &[("x-message-ttl", AMQPValue::LongInt(0))],
        ),
    )
    .await;
    publish(
        &ch,
        "",
        "work",
        "m",
        BasicProperties::default().with_headers(cc(&["elsewhere"])),
    )
    .await;
    let dead = get_one(&ch, "parking").await;
    assert_eq!(dead.delivery.routing_key.as_str(), "parking");
    assert_eq!(dead.delivery.exchange.as_str(), "");
    assert_eq!(header(&dead.delivery.properties, "CC"), None);
    assert_eq!(
        x_death(&dead.delivery.properties),
        [format!(
            "count=1 reason=expired queue=work time=T{T0_S} exchange= routing-keys=[work,elsewhere]"
        )]
    );
}

/// The retry loop of a typical service: the consumer rejects, the message waits in a TTL queue
/// whose dead-letter exchange leads back to the work queue, and the consumer counts attempts
/// from `x-death`.
#[tokio::test]
async fn the_retry_loop_counts_attempts_in_x_death_across_two_queues() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(&ch, "work", dlx_args("", Some("wait"), &[])).await;
    queue_with(
        &ch,
        "wait",
        dlx_args(
            "",
            Some("work"),
            &[("x-message-ttl", AMQPValue::LongInt(30_000))],
        ),
    )
    .await;
    publish(&ch, "", "work", "webhook", BasicProperties::default()).await;
    let mut consumer = ch
        .basic_consume(
            "work".into(),
            "worker".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut seen = Vec::new();
    for attempt in 1..=3u64 {
        let delivery = next_delivery(&mut consumer).await;
        seen.push(match delivery.properties.headers() {
            None => Vec::new(),
            Some(_) => x_death(&delivery.properties),
        });
        delivery
            .reject(BasicRejectOptions { requeue: false })
            .await
            .unwrap();
        sync(&ch).await;
        assert_eq!(
            passive_declare(&ch, "wait").await.unwrap().message_count(),
            1,
            "attempt {attempt}"
        );
        t.broker.advance(Duration::from_secs(30));
    }
    assert!(seen[0].is_empty());
    assert_eq!(
        seen[2],
        [
            // The first death in `wait` came 30 s after the first rejection.
            format!(
                "count=2 reason=expired queue=wait time=T{} exchange= routing-keys=[wait]",
                T0_S + 30
            ),
            format!(
                "count=2 reason=rejected queue=work time=T{T0_S} exchange= routing-keys=[work]"
            ),
        ]
    );
    let fourth = next_delivery(&mut consumer).await;
    let deaths = x_death(&fourth.properties);
    assert!(
        deaths[0].starts_with("count=3 reason=expired queue=wait"),
        "{deaths:?}"
    );
    assert!(
        deaths[1].starts_with("count=3 reason=rejected queue=work"),
        "{deaths:?}"
    );
    assert_eq!(
        header(&fourth.properties, "x-first-death-reason").as_deref(),
        Some("rejected")
    );
    assert_eq!(
        header(&fourth.properties, "x-last-death-queue").as_deref(),
        Some("wait")
    );
}

#[tokio::test]
async fn an_expiry_cycle_without_a_rejection_is_dropped() {
    let t = start_manual().await;
    let ch = t.channel().await;
    // Expires into itself: the second time round it would loop forever.
    queue_with(
        &ch,
        "loop",
        dlx_args(
            "",
            Some("loop"),
            &[("x-message-ttl", AMQPValue::LongInt(100))],
        ),
    )
    .await;
    publish(&ch, "", "loop", "m", BasicProperties::default()).await;
    t.broker.advance(Duration::from_millis(100));
    assert_eq!(
        passive_declare(&ch, "loop").await.unwrap().message_count(),
        0
    );
    // Two queues expiring into each other: dropped when it would enter the first again.
    queue_with(
        &ch,
        "a",
        dlx_args("", Some("b"), &[("x-message-ttl", AMQPValue::LongInt(100))]),
    )
    .await;
    queue_with(
        &ch,
        "b",
        dlx_args("", Some("a"), &[("x-message-ttl", AMQPValue::LongInt(100))]),
    )
    .await;
    publish(&ch, "", "a", "m", BasicProperties::default()).await;
    t.broker.advance(Duration::from_millis(100));
    assert_eq!(passive_declare(&ch, "b").await.unwrap().message_count(), 1);
    t.broker.advance(Duration::from_millis(100));
    assert_eq!(passive_declare(&ch, "a").await.unwrap().message_count(), 0);
    assert_eq!(passive_declare(&ch, "b").await.unwrap().message_count(), 0);
}

#[tokio::test]
async fn a_missing_dead_letter_exchange_drops_the_message() {
    let t = start_manual().await;
    let ch = t.channel().await;
    queue_with(&ch, "work", dlx_args("nowhere", None, &[])).await;
    publish(&ch, "", "work", "m", BasicProperties::default()).await;
    let msg = ch
        .basic_get("work".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    msg.delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .unwrap();
    sync(&ch).await;
    assert_eq!(
        passive_declare(&ch, "work").await.unwrap().message_count(),
        0
    );
}

#[tokio::test]
async fn a_client_published_x_death_is_replaced_by_the_brokers_history() {
    let t = start_manual().await;
    let ch = t.channel().await;
    work_and_dead(
        &ch,
        dlx_args("dlx", None, &[("x-message-ttl", AMQPValue::LongInt(5))]),
    )
    .await;
    let mut forged = FieldTable::default();
    let mut entry = FieldTable::default();
    entry.insert("count".into(), AMQPValue::LongLongInt(41));
    entry.insert("reason".into(), AMQPValue::LongString("rejected".into()));
    entry.insert("queue".into(), AMQPValue::LongString("work".into()));
    forged.insert(
        "x-death".into(),
        AMQPValue::FieldArray(vec![AMQPValue::FieldTable(entry)].into()),
    );
    forged.insert(
        "x-first-death-queue".into(),
        AMQPValue::LongString("forged".into()),
    );
    publish(
        &ch,
        "",
        "work",
        "m",
        BasicProperties::default().with_headers(forged),
    )
    .await;
    t.broker.advance(Duration::from_millis(5));
    let dead = get_one(&ch, "dead").await;
    assert_eq!(
        x_death(&dead.delivery.properties),
        [format!(
            "count=1 reason=expired queue=work time=T{T0_S} exchange= routing-keys=[work]"
        )]
    );
    assert_eq!(
        header(&dead.delivery.properties, "x-first-death-queue").as_deref(),
        Some("work")
    );
}

#[tokio::test]
async fn a_dead_letter_exchange_that_is_delayed_holds_the_message_for_its_x_delay() {
    let t = start_manual().await;
    let ch = t.channel().await;
    let mut args = FieldTable::default();
    args.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("fanout".into()),
    );
    ch.exchange_declare(
        "later".into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions::default(),
        args,
    )
    .await
    .unwrap();
    declare_queue(&ch, "retried").await;
    ch.queue_bind(
        "retried".into(),
        "later".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    queue_with(&ch, "work", dlx_args("later", None, &[])).await;
    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), AMQPValue::LongInt(5000));
    publish(
        &ch,
        "",
        "work",
        "m",
        BasicProperties::default().with_headers(headers),
    )
    .await;
    let msg = ch
        .basic_get("work".into(), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    msg.delivery
        .reject(BasicRejectOptions { requeue: false })
        .await
        .unwrap();
    sync(&ch).await;
    assert_eq!(t.broker.delayed_count("/", "later"), 1);
    t.broker.advance(Duration::from_millis(5000));
    let released = get_one(&ch, "retried").await;
    assert_eq!(x_death(&released.delivery.properties).len(), 1);
}

/// A retry loop through a delayed exchange: the work queue dead-letters into `x-delayed-message`
/// exchange that routes back to it. The message is held packed while it waits; its history must
/// survive that, so the second rejection counts 2, as RabbitMQ with the plugin counts.
#[tokio::test]
async fn the_history_survives_a_wait_in_a_delayed_exchange() {
    let t = start_manual().await;
    let ch = t.channel().await;
    let mut args = FieldTable::default();
    args.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString("direct".into()),
    );
    ch.exchange_declare(
        "retry".into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions::default(),
        args,
    )
    .await
    .unwrap();
    queue_with(&ch, "work", dlx_args("retry", None, &[])).await;
    ch.queue_bind(
        "work".into(),
        "retry".into(),
        "work".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), AMQPValue::LongInt(5000));
    publish(
        &ch,
        "",
        "work",
        "m",
        BasicProperties::default().with_headers(headers),
    )
    .await;

    for attempt in 1..=3u64 {
        let msg = ch
            .basic_get("work".into(), BasicGetOptions { no_ack: false })
            .await
            .unwrap()
            .expect("back in work");
        if attempt > 1 {
            assert_eq!(
                x_death(&msg.delivery.properties),
                [format!(
                    "count={} reason=rejected queue=work time=T{T0_S} exchange= routing-keys=[work]",
                    attempt - 1
                )],
                "attempt {attempt}"
            );
            assert_eq!(
                header(&msg.delivery.properties, "x-first-death-queue").as_deref(),
                Some("work")
            );
        }
        msg.delivery
            .reject(BasicRejectOptions { requeue: false })
            .await
            .unwrap();
        sync(&ch).await;
        // Held (or, once `x-delay` is negated, routed at once): either way back in `work`.
        t.broker.advance(Duration::from_millis(5000));
    }
}

/// `BCC` keys are removed at publish, yet the dead letter is routed by them too (without a
/// dead-letter routing key), as RabbitMQ routes it; `x-death` does not record them.
#[tokio::test]
async fn without_a_dead_letter_routing_key_bcc_keys_route_but_are_not_recorded() {
    let t = start_manual().await;
    let ch = t.channel().await;
    ch.exchange_declare(
        "dlx".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    for (queue, key) in [("by-key", "work"), ("by-bcc", "hidden")] {
        declare_queue(&ch, queue).await;
        ch.queue_bind(
            queue.into(),
            "dlx".into(),
            key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    queue_with(
        &ch,
        "work",
        dlx_args("dlx", None, &[("x-message-ttl", AMQPValue::LongInt(10))]),
    )
    .await;
    let mut headers = FieldTable::default();
    headers.insert(
        "BCC".into(),
        AMQPValue::FieldArray(vec![AMQPValue::LongString("hidden".into())].into()),
    );
    publish(
        &ch,
        "",
        "work",
        "m",
        BasicProperties::default().with_headers(headers),
    )
    .await;
    t.broker.advance(Duration::from_millis(10));
    for queue in ["by-key", "by-bcc"] {
        let dead = get_one(&ch, queue).await;
        let props = &dead.delivery.properties;
        assert_eq!(header(props, "BCC"), None, "{queue}");
        assert_eq!(
            x_death(props),
            [format!(
                "count=1 reason=expired queue=work time=T{T0_S} exchange= routing-keys=[work]"
            )],
            "{queue}"
        );
    }
    assert!(get(&ch, "by-bcc").await.is_none(), "one copy only");
}
