//! Routing through delayed exchanges: each base type, mandatory, exchange-to-exchange bindings
//! into and out of a delayed exchange.

use std::time::Duration;

use super::{delay_headers, publish_delayed, setup};
use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

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
