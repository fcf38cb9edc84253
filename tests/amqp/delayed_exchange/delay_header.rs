//! The `x-delay` header as the plugin reads it: missing, zero, negative, strings, floats and
//! non-numbers.

use super::{delay_headers, publish_delayed, setup};
use crate::common::*;
use lapin::types::AMQPValue;
use lapin::BasicProperties;

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
