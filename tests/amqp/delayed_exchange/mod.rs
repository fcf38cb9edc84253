//! `x-delayed-message` exchanges through a real client, driven by the manual clock: one module
//! per feature, sharing the helpers here.

use crate::common::*;
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};

mod declarations;
mod delay_header;
mod held_messages;
mod moving;
mod namesakes;
mod release_order;
mod routing;

pub(crate) fn delay_headers(value: AMQPValue) -> FieldTable {
    let mut headers = FieldTable::default();
    headers.insert("x-delay".into(), value);
    headers
}

pub(crate) async fn publish_delayed(
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

pub(crate) async fn setup(t: &TestBroker, inner: &str) -> Channel {
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
