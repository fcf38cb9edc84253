//! Publishing and getting over HTTP, and the aliveness test built on them.
//!
//! [`publish_message`] and [`get_messages`] are the only places where HTTP touches the message
//! path; they follow what `basic.publish` and `basic.get` do on a channel.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use bytes::{Bytes, BytesMut};
use dwellmq_codec::{BasicProperties, ShortStr};
use dwellmq_core::Body;
use dwellmq_core::{BrokerResult, Message};
use serde::Deserialize;
use serde_json::{json, Value};

use super::auth::{Authed, MANAGEMENT};
use super::error::{ApiError, ApiResult};
use super::exchanges::broker_name;
use super::extract::{lenient_count, lenient_opt_count, JsonBody, PathOf};
use super::fields::{json_to_properties, properties_to_json, short};
use super::queues::find_queue;
use super::resource::checked_vhost;
use super::Api;
use crate::broker::access::{Operation, ResourceKind};
use crate::broker::publish::{self, Prepared};
use crate::broker::queue::Queue;
use crate::broker::stats::MessageCounts;
use crate::broker::vhost::{QueueSpec, Routing, VHost};
use crate::broker::BrokerState;

/// Publishes one message to `exchange` as `basic.publish` without `mandatory` would: the same
/// checks, delays held by delayed exchanges, direct replies delivered. Returns whether it was
/// routed to at least one queue (or reply consumer).
pub(crate) fn publish_message(
    state: &BrokerState,
    vhost: &Arc<VHost>,
    exchange: &str,
    routing_key: ShortStr,
    properties: BasicProperties,
    body: Bytes,
    user: &str,
) -> BrokerResult<bool> {
    // The checks and the message as on a channel (`broker::publish`). No reply consumer
    // over HTTP: a request for a direct reply is refused.
    publish::check_size(body.len() as u64, state.config.limits.max_message_size)?;
    let submitted = publish::Submitted {
        exchange: ShortStr::from(exchange),
        routing_key: routing_key.clone(),
        properties,
        body: Body::Single(body),
        user,
        reply_address: None,
    };
    let (target, prepared) = publish::accept(vhost, submitted)?;
    let Prepared {
        message,
        delay_ms,
        extra_keys,
        bcc,
    } = prepared;
    let mut counts = MessageCounts {
        published: 1,
        ..MessageCounts::default()
    };
    let mut routing = Routing::default();
    let outgoing = publish::Outgoing {
        exchange: &target,
        message: &message,
        routing_key: &routing_key,
        extra_keys: &extra_keys,
        bcc: bcc.as_ref(),
        hold_until: (delay_ms > 0).then(|| state.clock.now_ms().saturating_add(delay_ms)),
        mandatory: false,
        dead_lettered: false,
    };
    // No confirm over HTTP: nothing waits for the store, and a refusing queue changes nothing.
    let outcome = publish::route_and_enqueue(vhost, outgoing, &mut routing, None);
    // Counted on the exchange as a channel's publish is (RabbitMQ publishes HTTP messages
    // through a channel of its own).
    target.counters.published_one(outcome.routed);
    counts.unroutable_dropped = u64::from(outcome.dropped);
    counts.routed = u64::from(outcome.routed);
    state.stats.flush(&mut counts);
    Ok(outcome.routed)
}

/// A message taken by [`get_messages`], with the ready count left behind it.
pub(crate) struct Got {
    pub(crate) message: Arc<Message>,
    pub(crate) redelivered: bool,
    pub(crate) remaining: usize,
}

/// `basic.get` `count` times; with `requeue` the messages go back (marked redelivered), else
/// they are acknowledged at once.
pub(crate) fn get_messages(
    vhost: &VHost,
    queue: &Arc<Queue>,
    count: usize,
    requeue: bool,
) -> Vec<Got> {
    queue
        .take_for_inspection(vhost, count, requeue)
        .into_iter()
        .map(|(entry, remaining)| Got {
            message: entry.message,
            redelivered: entry.redelivered,
            remaining,
        })
        .collect()
}

/// The body of `POST /api/exchanges/{vhost}/{name}/publish`.
#[derive(Deserialize)]
pub(crate) struct PublishBody {
    #[serde(default)]
    properties: Option<Value>,
    routing_key: String,
    payload: String,
    payload_encoding: String,
}

/// `POST /api/exchanges/{vhost}/{name}/publish`: `{"routed": bool}`.
pub(crate) async fn publish(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    JsonBody(body): JsonBody<PublishBody>,
) -> ApiResult<Json<Value>> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    user.permit(
        &vhost.name,
        Operation::Write,
        ResourceKind::Exchange,
        broker_name(&name),
    )?;
    let payload = match body.payload_encoding.as_str() {
        "string" => Bytes::from(body.payload),
        "base64" => base64::engine::general_purpose::STANDARD
            .decode(body.payload.as_bytes())
            .map(Bytes::from)
            .map_err(|e| ApiError::bad_request(format!("payload is not base64: {e}")))?,
        other => {
            return Err(ApiError::bad_request(format!(
                "payload_encoding must be string or base64, not '{other}'"
            )))
        }
    };
    let properties = json_to_properties(body.properties.as_ref())?;
    let routing_key = short(&body.routing_key, "routing key")?;
    let routed = publish_message(
        &api.state,
        &vhost,
        broker_name(&name),
        routing_key,
        properties,
        payload,
        &user.user.name,
    )?;
    Ok(Json(json!({ "routed": routed })))
}

/// The body of `POST /api/queues/{vhost}/{name}/get`.
#[derive(Deserialize)]
pub(crate) struct GetBody {
    #[serde(deserialize_with = "lenient_count")]
    count: usize,
    #[serde(default)]
    ackmode: Option<String>,
    /// Before `ackmode` existed (RabbitMQ 3.7): `requeue: true|false`.
    #[serde(default)]
    requeue: Option<bool>,
    #[serde(default = "auto")]
    encoding: String,
    #[serde(default, deserialize_with = "lenient_opt_count")]
    truncate: Option<usize>,
}

fn auto() -> String {
    "auto".into()
}

/// At most this many messages per get (each is copied into the response).
const MAX_GET: usize = 10_000;

/// `POST /api/queues/{vhost}/{name}/get`.
pub(crate) async fn get(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf((vhost, name)): PathOf<(String, String)>,
    JsonBody(body): JsonBody<GetBody>,
) -> ApiResult<Json<Value>> {
    let requeue = match (body.ackmode.as_deref(), body.requeue) {
        (Some("ack_requeue_true" | "reject_requeue_true"), _) => true,
        (Some("ack_requeue_false" | "reject_requeue_false"), _) => false,
        (Some(other), _) => {
            return Err(ApiError::bad_request(format!(
                "ackmode must be ack_requeue_true, ack_requeue_false, reject_requeue_true or \
                 reject_requeue_false, not '{other}'"
            )))
        }
        (None, Some(requeue)) => requeue,
        (None, None) => return Err(ApiError::bad_request("ackmode is required")),
    };
    let base64_only = match body.encoding.as_str() {
        "auto" => false,
        "base64" => true,
        other => {
            return Err(ApiError::bad_request(format!(
                "encoding must be auto or base64, not '{other}'"
            )))
        }
    };
    let (home, queue) = find_queue(&api, &user, &vhost, &name)?;
    user.permit(&vhost, Operation::Read, ResourceKind::Queue, &name)?;
    let got = get_messages(&home, &queue, body.count.min(MAX_GET), requeue);
    let list: Vec<Value> = got
        .iter()
        .map(|g| got_json(g, base64_only, body.truncate))
        .collect();
    Ok(Json(Value::Array(list)))
}

fn got_json(got: &Got, base64_only: bool, truncate: Option<usize>) -> Value {
    let m = &got.message;
    let mut payload = BytesMut::with_capacity(m.body_len());
    for chunk in m.body.chunks() {
        payload.extend_from_slice(chunk);
    }
    if let Some(limit) = truncate {
        payload.truncate(limit);
    }
    let (payload, encoding) = match (base64_only, std::str::from_utf8(&payload)) {
        (false, Ok(text)) => (text.to_string(), "string"),
        _ => (
            base64::engine::general_purpose::STANDARD.encode(&payload),
            "base64",
        ),
    };
    json!({
        "payload_bytes": m.body_len(),
        "redelivered": got.redelivered,
        "exchange": m.exchange.as_str(),
        "routing_key": m.routing_key.as_str(),
        "message_count": got.remaining,
        "properties": properties_to_json(&m.properties),
        "payload": payload,
        "payload_encoding": encoding,
    })
}

/// `GET /api/aliveness-test/{vhost}`: declares the queue `aliveness-test`, publishes a message
/// to it and gets it back, as RabbitMQ does; `{"status":"ok"}`.
pub(crate) async fn aliveness(
    user: Authed<MANAGEMENT>,
    State(api): State<Arc<Api>>,
    PathOf(vhost): PathOf<String>,
) -> ApiResult<Response> {
    let vhost = checked_vhost(&api, &user, &vhost)?;
    let queue = vhost.declare_queue(
        QueueSpec {
            name: "aliveness-test".into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            arguments: Default::default(),
        },
        0,
    )?;
    // Whatever an earlier, interrupted test left behind must not be mistaken for this one's.
    queue.purge(&*vhost);
    publish_message(
        &api.state,
        &vhost,
        "",
        queue.name.clone(),
        BasicProperties::default(),
        Bytes::from_static(b"test_message"),
        &user.user.name,
    )?;
    let got = get_messages(&vhost, &queue, 1, false);
    if got.first().is_some_and(|g| g.message.body_len() == 12) {
        Ok(Json(json!({"status": "ok"})).into_response())
    } else {
        Ok((
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "failed", "reason": "the test message did not come back"})),
        )
            .into_response())
    }
}
