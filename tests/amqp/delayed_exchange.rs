//! `x-delayed-message` exchanges through a real client, driven by the manual clock.

use std::time::Duration;

use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, ExchangeKind};

fn delay_headers(value: AMQPValue) -> FieldTable {
    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), value);
    headers
}

async fn publish_delayed(
    ch: &Channel,
    exchange: &str,
    key: &str,
    body: &str,
    delay: Option<AMQPValue>,
) {
    let mut props = BasicProperties::default();
    if let Some(d) = delay {
        props = props.with_headers(delay_headers(d));
    }
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        props,
    )
    .await
    .unwrap();
}

async fn setup(t: &TestBroker, inner: &str) -> Channel {
    let ch = t.channel().await;
    declare_delayed(&ch, "delayed", inner, false).await;
    declare_queue(&ch, "out").await;
    ch.queue_bind(
        "out".into(),
        "delayed".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch
}

#[tokio::test]
async fn shorter_delay_published_later_arrives_first() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "three", Some(AMQPValue::LongInt(3000))).await;
    publish_delayed(&ch, "delayed", "k", "one", Some(AMQPValue::LongInt(1000))).await;
    sync(&ch).await;
    assert_eq!(t.broker.delayed_count("/", "delayed"), 2);
    assert_eq!(ready(&t, "out"), 0);
    let mut consumer = consume_no_ack(&ch, "out").await;
    assert_eq!(t.broker.advance(Duration::from_millis(999)), 0);
    assert_eq!(t.broker.advance(Duration::from_millis(1)), 1);
    let first = next_delivery(&mut consumer).await;
    assert_eq!(first.data, b"one");
    let headers = first.properties.headers().clone().unwrap();
    // Signed 32-bit, as the 3.x plugin writes it (pika reads a 64-bit `l` as unsigned).
    assert_eq!(
        headers.inner().get(&ShortString::from("x-delay")),
        Some(&AMQPValue::LongInt(-1000))
    );
    assert_eq!(t.broker.advance(Duration::from_secs(2)), 1);
    assert_eq!(next_body(&mut consumer).await, "three");
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
}

#[tokio::test]
async fn same_millisecond_releases_in_publish_order() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    for i in 0..20 {
        publish_delayed(
            &ch,
            "delayed",
            "k",
            &i.to_string(),
            Some(AMQPValue::LongInt(500)),
        )
        .await;
    }
    sync(&ch).await;
    let mut consumer = consume_no_ack(&ch, "out").await;
    assert_eq!(t.broker.advance(Duration::from_millis(500)), 20);
    for i in 0..20 {
        assert_eq!(next_body(&mut consumer).await, i.to_string());
    }
}

#[tokio::test]
async fn a_24_hour_reminder_runs_in_milliseconds() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "reminder",
        Some(AMQPValue::LongLongInt(86_400_000)),
    )
    .await;
    sync(&ch).await;
    t.broker.advance(Duration::from_secs(86_399));
    assert_eq!(ready(&t, "out"), 0);
    t.broker.advance(Duration::from_secs(1));
    assert_eq!(ready(&t, "out"), 1);
}

#[tokio::test]
async fn delays_beyond_u32_millis_are_honoured() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let sixty_days = 60 * 86_400_000i64;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "later",
        Some(AMQPValue::LongLongInt(sixty_days)),
    )
    .await;
    sync(&ch).await;
    assert_eq!(
        ready(&t, "out"),
        0,
        "not delivered at once, unlike the plugin"
    );
    let listed = t.broker.delayed_messages("/", "delayed", 10);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].due_ms, T0_MS + sixty_days as u64);
    let mut consumer = consume_no_ack(&ch, "out").await;
    t.broker.set_now(T0_MS + sixty_days as u64);
    let delivery = next_delivery(&mut consumer).await;
    // −delay does not fit 32 bits: only then is it written as a signed 64-bit `l`.
    assert_eq!(
        delivery
            .properties
            .headers()
            .as_ref()
            .unwrap()
            .inner()
            .get("x-delay"),
        Some(&AMQPValue::LongLongInt(-sixty_days))
    );
}

#[tokio::test]
async fn missing_zero_or_negative_delay_routes_immediately() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "none", None).await;
    publish_delayed(&ch, "delayed", "k", "zero", Some(AMQPValue::LongInt(0))).await;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "negative",
        Some(AMQPValue::LongInt(-5)),
    )
    .await;
    publish_delayed(&ch, "delayed", "k", "bool", Some(AMQPValue::Boolean(true))).await;
    sync(&ch).await;
    assert_eq!(ready(&t, "out"), 4);
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
}

#[tokio::test]
async fn string_and_float_delays_are_read_like_the_plugin() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "str",
        Some(AMQPValue::LongString("+2000".into())),
    )
    .await;
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "float",
        Some(AMQPValue::Double(1500.9)),
    )
    .await;
    sync(&ch).await;
    let due: Vec<u64> = t
        .broker
        .delayed_messages("/", "delayed", 10)
        .iter()
        .map(|m| m.due_ms - T0_MS)
        .collect();
    assert_eq!(due, [1500, 2000]);
}

#[tokio::test]
async fn a_non_numeric_delay_string_is_a_406_channel_error() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let (code, text) = publish_error(
        &ch,
        "delayed",
        "k",
        BasicProperties::default()
            .with_headers(delay_headers(AMQPValue::LongString("soon".into()))),
    )
    .await;
    assert_eq!(code, 406);
    assert!(text.contains("x-delay"), "{text}");
    // The connection is fine.
    let ch = t.channel().await;
    sync(&ch).await;
}

#[tokio::test]
async fn each_delayed_type_routes_like_its_base_type() {
    let t = start_manual().await;
    let ch = t.channel().await;
    for (exchange, kind, key) in [
        ("d-direct", "direct", "k"),
        ("d-topic", "topic", "a.*"),
        ("d-fanout", "fanout", "ignored"),
    ] {
        declare_delayed(&ch, exchange, kind, false).await;
        declare_queue(&ch, exchange).await;
        ch.queue_bind(
            exchange.into(),
            exchange.into(),
            key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
        publish_delayed(&ch, exchange, "k", "m", Some(AMQPValue::LongInt(10))).await;
        publish_delayed(&ch, exchange, "a.b", "m", Some(AMQPValue::LongInt(10))).await;
    }
    declare_delayed(&ch, "d-headers", "headers", false).await;
    declare_queue(&ch, "d-headers").await;
    let mut match_args = FieldTable::default();
    match_args.insert("kind".into(), AMQPValue::LongString("invoice".into()));
    ch.queue_bind(
        "d-headers".into(),
        "d-headers".into(),
        "".into(),
        QueueBindOptions::default(),
        match_args,
    )
    .await
    .unwrap();
    let mut headers = delay_headers(AMQPValue::LongInt(10));
    headers.insert("kind".into(), AMQPValue::LongString("invoice".into()));
    ch.basic_publish(
        "d-headers".into(),
        "".into(),
        BasicPublishOptions::default(),
        b"h",
        BasicProperties::default().with_headers(headers),
    )
    .await
    .unwrap();
    sync(&ch).await;
    t.broker.advance(Duration::from_millis(10));
    let depth = |q: &str| t.broker.queue_info("/", q).unwrap().messages;
    assert_eq!(depth("d-direct"), 1);
    assert_eq!(depth("d-topic"), 1);
    assert_eq!(depth("d-fanout"), 2);
    assert_eq!(depth("d-headers"), 1);
}

async fn declare_delayed_with(ch: &Channel, name: &str, inner: Option<&str>) -> lapin::Result<()> {
    let mut args = FieldTable::default();
    if let Some(inner) = inner {
        args.insert("x-delayed-type".into(), AMQPValue::LongString(inner.into()));
    }
    ch.exchange_declare(
        name.into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        ExchangeDeclareOptions::default(),
        args,
    )
    .await
}

#[tokio::test]
async fn bad_declarations_get_the_plugins_errors() {
    let t = start_manual().await;
    let channel_errors = [
        (None, "PRECONDITION_FAILED - Invalid argument, 'x-delayed-type' must be an existing exchange type"),
        (Some("x-delayed-message"), "PRECONDITION_FAILED - Invalid argument, 'x-delayed-message' can't be used for 'x-delayed-type'"),
    ];
    for (inner, expected) in channel_errors {
        let ch = t.channel().await;
        let err = declare_delayed_with(&ch, "bad", inner).await.unwrap_err();
        assert_eq!(amqp_error(&err), (406, expected.to_string()));
    }
    // The plugin checks the name with RabbitMQ's own `check_type`: a connection error.
    let connection_errors = [
        (
            "nonexistent",
            "COMMAND_INVALID - unknown exchange type 'nonexistent'",
        ),
        ("x-foo", "COMMAND_INVALID - unknown exchange type 'x-foo'"),
        ("", "COMMAND_INVALID - invalid exchange type ''"),
    ];
    for (inner, expected) in connection_errors {
        let connection = connect(&t.broker).await;
        let ch = connection.create_channel().await.unwrap();
        let err = declare_delayed_with(&ch, "bad", Some(inner))
            .await
            .unwrap_err();
        assert_eq!(amqp_error(&err), (503, expected.to_string()), "{inner:?}");
        assert!(!connection.status().connected(), "{inner:?}");
    }
    assert!(!t.broker.exchange_names("/").contains(&"bad".to_string()));
}

#[tokio::test]
async fn redeclaring_ignores_x_delayed_type() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    // Checked only at creation, never compared: another type, none, or even a bad one.
    for inner in [
        Some("fanout"),
        None,
        Some("nonexistent"),
        Some("x-delayed-message"),
    ] {
        declare_delayed_with(&ch, "delayed", inner)
            .await
            .unwrap_or_else(|e| panic!("redeclare with {inner:?}: {e}"));
    }
    // Still routes as direct.
    publish_delayed(&ch, "delayed", "other", "m", Some(AMQPValue::LongInt(10))).await;
    publish_delayed(&ch, "delayed", "k", "m", Some(AMQPValue::LongInt(10))).await;
    sync(&ch).await;
    t.broker.advance(Duration::from_millis(10));
    assert_eq!(ready(&t, "out"), 1);
}

#[tokio::test]
async fn type_mismatch_texts_quote_the_delayed_type_as_erlang_does() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let err = ch
        .exchange_declare(
            "delayed".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'delayed' in vhost '/': \
             received 'direct' but current is ''x-delayed-message''"
                .into()
        )
    );
    let ch = t.channel().await;
    ch.exchange_declare(
        "plain".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let err = declare_delayed_with(&ch, "plain", Some("direct"))
        .await
        .unwrap_err();
    assert_eq!(
        amqp_error(&err),
        (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'plain' in vhost '/': \
             received ''x-delayed-message'' but current is 'direct'"
                .into()
        )
    );
}

#[tokio::test]
async fn mandatory_is_checked_at_publish_not_at_release() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let unroutable = ch
        .basic_publish(
            "delayed".into(),
            "nobody".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"x",
            BasicProperties::default().with_headers(delay_headers(AMQPValue::LongInt(1000))),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let returned = unroutable.take_message().expect("returned at once");
    // Exactly as published: the −delay rewrite happens only at release.
    assert_eq!(
        returned
            .properties
            .headers()
            .as_ref()
            .unwrap()
            .inner()
            .get("x-delay"),
        Some(&AMQPValue::LongInt(1000))
    );
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0, "and not held");
    let routable = ch
        .basic_publish(
            "delayed".into(),
            "k".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"y",
            BasicProperties::default().with_headers(delay_headers(AMQPValue::LongInt(1000))),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(routable.is_ack());
    assert!(
        routable.take_message().is_none(),
        "no bogus 312 for a routable delayed message"
    );
    assert_eq!(t.broker.delayed_count("/", "delayed"), 1);
}

#[tokio::test]
async fn exchange_to_exchange_binding_from_a_delayed_exchange() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_delayed(&ch, "delayed", "topic", false).await;
    ch.exchange_declare(
        "fan".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.exchange_bind(
        "fan".into(),
        "delayed".into(),
        "jobs.#".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare_queue(&ch, "via").await;
    ch.queue_bind(
        "via".into(),
        "fan".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish_delayed(
        &ch,
        "delayed",
        "jobs.email",
        "m",
        Some(AMQPValue::LongInt(250)),
    )
    .await;
    sync(&ch).await;
    assert_eq!(t.broker.queue_info("/", "via").unwrap().messages, 0);
    t.broker.advance(Duration::from_millis(250));
    assert_eq!(t.broker.queue_info("/", "via").unwrap().messages, 1);
}

/// `front` (of `kind`) bound to the delayed direct exchange `delayed` (key `k`, which routes
/// to `out`) and straight to the queue `now`.
async fn front_exchange(ch: &Channel, kind: ExchangeKind) {
    ch.exchange_declare(
        "front".into(),
        kind,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.exchange_bind(
        "delayed".into(),
        "front".into(),
        "k".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare_queue(ch, "now").await;
    ch.queue_bind(
        "now".into(),
        "front".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

fn x_delay_of(delivery: &lapin::message::Delivery) -> Option<AMQPValue> {
    delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-delay").cloned())
}

#[tokio::test]
async fn a_message_reaching_a_delayed_exchange_through_a_binding_is_held() {
    for kind in [ExchangeKind::Direct, ExchangeKind::Fanout] {
        let t = start_manual().await;
        let ch = setup(&t, "direct").await;
        front_exchange(&ch, kind.clone()).await;
        let mut now = consume_no_ack(&ch, "now").await;
        let mut out = consume_no_ack(&ch, "out").await;
        publish_delayed(&ch, "front", "k", "m", Some(AMQPValue::LongInt(500))).await;
        // The direct binding delivers at once, the header untouched...
        let direct = next_delivery(&mut now).await;
        assert_eq!(
            x_delay_of(&direct),
            Some(AMQPValue::LongInt(500)),
            "{kind:?}"
        );
        // ...while the delayed exchange holds its copy for the message's x-delay.
        assert_eq!(t.broker.delayed_count("/", "delayed"), 1, "{kind:?}");
        assert_eq!(ready(&t, "out"), 0, "{kind:?}");
        assert_eq!(t.broker.advance(Duration::from_millis(499)), 0, "{kind:?}");
        assert_eq!(t.broker.advance(Duration::from_millis(1)), 1, "{kind:?}");
        let released = next_delivery(&mut out).await;
        assert_eq!(released.data, b"m");
        assert_eq!(released.exchange.as_str(), "front", "published to front");
        assert_eq!(
            x_delay_of(&released),
            Some(AMQPValue::LongInt(-500)),
            "{kind:?}"
        );
        // Dropping the test broker shuts it down.
        drop(t);
    }
}

#[tokio::test]
async fn through_a_binding_without_delay_or_without_route_now() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    front_exchange(&ch, ExchangeKind::Direct).await;
    // No x-delay: straight through the delayed exchange, as the plugin routes it.
    publish_delayed(&ch, "front", "k", "plain", None).await;
    sync(&ch).await;
    assert_eq!(ready(&t, "out"), 1);
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
    // Mandatory, and nothing behind the delayed exchange routes "other" now: returned, not
    // held (the direct binding of `now` does not match either).
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "front".into(),
            "other".into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"x",
            BasicProperties::default().with_headers(delay_headers(AMQPValue::LongInt(100))),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.take_message().is_some(), "returned at once");
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
}

#[tokio::test]
async fn released_messages_are_not_held_again_by_a_second_delayed_exchange() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    declare_delayed(&ch, "first", "fanout", false).await;
    ch.exchange_bind(
        "delayed".into(),
        "first".into(),
        "".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    publish_delayed(&ch, "first", "k", "m", Some(AMQPValue::LongInt(300))).await;
    sync(&ch).await;
    // Held once, by the exchange it was published to, not also by the one behind it.
    assert_eq!(t.broker.delayed_count("/", "first"), 1);
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
    t.broker.advance(Duration::from_millis(300));
    // At release it carries x-delay = −300, which `delayed` routes at once.
    assert_eq!(ready(&t, "out"), 1);
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
}

#[tokio::test]
async fn target_queue_deleted_before_release_drops_the_message() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "m", Some(AMQPValue::LongInt(100))).await;
    sync(&ch).await;
    ch.queue_delete("out".into(), QueueDeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(t.broker.advance(Duration::from_millis(100)), 1);
    assert_eq!(t.broker.delayed_unroutable(), 1);
    assert!(t.broker.queue_info("/", "out").is_none());
}

#[tokio::test]
async fn deleting_a_delayed_exchange_drops_what_it_holds() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "m", Some(AMQPValue::LongInt(100))).await;
    sync(&ch).await;
    assert_eq!(t.broker.delayed_count("/", "delayed"), 1);
    ch.exchange_delete("delayed".into(), ExchangeDeleteOptions::default())
        .await
        .unwrap();
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
    // A new exchange of the same name does not inherit the old messages.
    declare_delayed(&ch, "delayed", "direct", false).await;
    ch.queue_bind(
        "out".into(),
        "delayed".into(),
        "k".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert_eq!(t.broker.advance(Duration::from_millis(100)), 0);
    assert_eq!(ready(&t, "out"), 0);
}

#[tokio::test]
async fn list_cancel_and_purge_held_messages() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    for (body, delay) in [("a", 300), ("b", 100), ("c", 200)] {
        publish_delayed(&ch, "delayed", "k", body, Some(AMQPValue::LongInt(delay))).await;
    }
    sync(&ch).await;
    let held = t.broker.delayed_messages("/", "delayed", 10);
    let order: Vec<u64> = held.iter().map(|m| m.due_ms - T0_MS).collect();
    assert_eq!(order, [100, 200, 300]);
    assert_eq!(held[0].routing_key, "k");
    assert_eq!(held[0].body_size, 1);
    assert_eq!(t.broker.delayed_bytes("/", "delayed"), 3);
    assert!(t.broker.cancel_delayed(held[0].id));
    assert!(!t.broker.cancel_delayed(held[0].id), "already cancelled");
    assert_eq!(t.broker.delayed_count("/", "delayed"), 2);
    t.broker.advance(Duration::from_millis(200));
    assert_eq!(ready(&t, "out"), 1, "only c: b was cancelled");
    assert_eq!(t.broker.purge_delayed("/", "delayed"), 1);
    t.broker.advance(Duration::from_millis(1000));
    assert_eq!(ready(&t, "out"), 1);
}

#[tokio::test]
async fn far_future_messages_keep_publish_order_and_can_be_cancelled() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    // Beyond the wheel's horizon: these wait in the ordered index first.
    for i in 0..10 {
        publish_delayed(
            &ch,
            "delayed",
            "k",
            &i.to_string(),
            Some(AMQPValue::LongInt(90_000)),
        )
        .await;
    }
    publish_delayed(
        &ch,
        "delayed",
        "k",
        "cancel me",
        Some(AMQPValue::LongInt(120_000)),
    )
    .await;
    sync(&ch).await;
    let held = t.broker.delayed_messages("/", "delayed", 20);
    assert_eq!(held.len(), 11);
    assert!(t.broker.cancel_delayed(held[10].id));
    let mut consumer = consume_no_ack(&ch, "out").await;
    // Step through time the way the timer task does, in small increments.
    for _ in 0..90 {
        t.broker.advance(Duration::from_secs(1));
    }
    for i in 0..10 {
        assert_eq!(next_body(&mut consumer).await, i.to_string());
    }
    assert_eq!(t.broker.advance(Duration::from_secs(60)), 0);
    assert_eq!(t.broker.delayed_total(), 0);
}

#[tokio::test]
async fn held_messages_count_toward_memory_until_released_cancelled_or_purged() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let small = "s".repeat(1000);
    let large = "L".repeat(40_000); // above the size that is packed: kept as published
    for (body, delay) in [(&small, 100), (&large, 100), (&small, 200), (&small, 300)] {
        publish_delayed(&ch, "delayed", "k", body, Some(AMQPValue::LongInt(delay))).await;
    }
    sync(&ch).await;
    // Bodies, plus an overhead per message: the small ones are packed while held, the large
    // one is kept as published.
    let packed = dwellmq::HELD_MESSAGE_MEMORY_OVERHEAD as i64;
    let queued = dwellmq::MESSAGE_MEMORY_OVERHEAD as i64;
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.memory_used(), 43_000 + 3 * packed + queued);
    let held = t.broker.delayed_messages("/", "delayed", 10);
    assert!(t.broker.cancel_delayed(held[3].id));
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.memory_used(), 42_000 + 2 * packed + queued);

    let mut consumer = consume_no_ack(&ch, "out").await;
    t.broker.advance(Duration::from_millis(100));
    let mut bodies = vec![
        next_body(&mut consumer).await,
        next_body(&mut consumer).await,
    ];
    bodies.sort_by_key(String::len);
    assert_eq!(bodies, [small.clone(), large]);
    sync(&ch).await;
    t.broker.settle().await.unwrap();
    assert_eq!(
        t.broker.memory_used(),
        1000 + packed,
        "only the message due at 200 is left"
    );
    assert_eq!(t.broker.purge_delayed("/", "delayed"), 1);
    t.broker.settle().await.unwrap();
    assert_eq!(t.broker.memory_used(), 0);
}

#[tokio::test]
async fn a_held_message_keeps_its_properties_key_and_exchange() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let mut headers = delay_headers(AMQPValue::LongInt(250));
    headers.insert("trace".into(), AMQPValue::LongString("abc".into()));
    let props = BasicProperties::default()
        .with_headers(headers)
        .with_content_type("application/json".into())
        .with_correlation_id("c-1".into())
        .with_delivery_mode(2)
        .with_priority(3);
    ch.basic_publish(
        "delayed".into(),
        "k".into(),
        BasicPublishOptions::default(),
        b"{}",
        props,
    )
    .await
    .unwrap();
    sync(&ch).await;
    let mut consumer = consume_no_ack(&ch, "out").await;
    t.broker.advance(Duration::from_millis(250));
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(delivery.exchange.as_str(), "delayed");
    assert_eq!(delivery.routing_key.as_str(), "k");
    assert_eq!(delivery.data, b"{}");
    let p = &delivery.properties;
    assert_eq!(
        p.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json")
    );
    assert_eq!(p.correlation_id().as_ref().map(|s| s.as_str()), Some("c-1"));
    assert_eq!(*p.delivery_mode(), Some(2));
    assert_eq!(*p.priority(), Some(3));
    let headers = p.headers().as_ref().expect("headers");
    assert_eq!(
        headers.inner().get("x-delay"),
        Some(&AMQPValue::LongInt(-250))
    );
    assert_eq!(
        headers.inner().get("trace"),
        Some(&AMQPValue::LongString("abc".into()))
    );
}

#[tokio::test]
async fn messages_from_both_tiers_release_in_due_then_publish_order() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    let delay = |ms| Some(AMQPValue::LongInt(ms));
    // "a" waits beyond the wheel's one-second horizon; "b" goes straight into the wheel.
    publish_delayed(&ch, "delayed", "k", "a", delay(2000)).await;
    publish_delayed(&ch, "delayed", "k", "b", delay(800)).await;
    sync(&ch).await;
    let mut consumer = consume_no_ack(&ch, "out").await;
    assert_eq!(t.broker.advance(Duration::from_millis(1500)), 1);
    assert_eq!(next_body(&mut consumer).await, "b");
    // "a" has moved into the wheel by now; "c" is due in the same millisecond and must follow
    // it. "d" waits beyond the horizon and is released by the jump without moving in.
    publish_delayed(&ch, "delayed", "k", "c", delay(500)).await;
    publish_delayed(&ch, "delayed", "k", "d", delay(3000)).await;
    sync(&ch).await;
    let listed: Vec<u64> = t
        .broker
        .delayed_messages("/", "delayed", 10)
        .iter()
        .map(|m| m.due_ms - T0_MS)
        .collect();
    assert_eq!(listed, [2000, 2000, 4500]);
    assert_eq!(
        t.broker.delayed_next_due("/", "delayed"),
        Some(T0_MS + 2000)
    );
    assert_eq!(t.broker.set_now(T0_MS + 10_000), 3);
    for expected in ["a", "c", "d"] {
        assert_eq!(next_body(&mut consumer).await, expected);
    }
    assert_eq!(t.broker.delayed_total(), 0);
    assert_eq!(t.broker.delayed_next_due("/", "delayed"), None);
}

#[tokio::test]
async fn cancel_finds_messages_in_either_tier_and_rejects_a_stale_id() {
    let t = start_manual().await;
    let ch = setup(&t, "direct").await;
    publish_delayed(&ch, "delayed", "k", "near", Some(AMQPValue::LongInt(300))).await;
    publish_delayed(&ch, "delayed", "k", "far", Some(AMQPValue::LongInt(60_000))).await;
    sync(&ch).await;
    let held = t.broker.delayed_messages("/", "delayed", 10);
    let (near, far) = (held[0].id, held[1].id);
    // An id printed and parsed back (as an HTTP API would carry it) still works.
    let far_again: dwellmq::DelayedId = far.to_string().parse().unwrap();
    assert!(t.broker.cancel_delayed(far_again));
    assert!(t.broker.cancel_delayed(near));
    assert!(!t.broker.cancel_delayed(near));
    assert_eq!(t.broker.delayed_count("/", "delayed"), 0);
    assert_eq!(t.broker.advance(Duration::from_secs(120)), 0);
}
