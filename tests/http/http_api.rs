//! The management API's resources through HTTP, cross-checked through a real AMQP client.

use std::net::SocketAddr;

use crate::common::*;
use crate::http_client::*;
use dwellmq::{BrokerConfig, MemoryWatermark};
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;
use serde_json::{json, Value};

async fn start_api() -> (TestBroker, SocketAddr) {
    let mut config = BrokerConfig::ephemeral();
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    let broker = start_with(config).await;
    let addr = broker.broker.http_addr().expect("HTTP on");
    (broker, addr)
}

/// The list at `path`, asserting 200.
async fn list(addr: SocketAddr, path: &str) -> Vec<Value> {
    let reply = get(addr, path, GUEST).await;
    assert_eq!(reply.status, 200, "{path}: {}", reply.text());
    reply.json().as_array().expect("a JSON array").clone()
}

fn named<'a>(items: &'a [Value], name: &str) -> Option<&'a Value> {
    items.iter().find(|v| v["name"] == name)
}

#[tokio::test]
async fn overview_counts_what_the_broker_holds() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    for body in [&b"a"[..], b"b"] {
        ch.basic_publish(
            "".into(),
            "q".into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    sync(&ch).await;
    let overview = get(addr, "/api/overview", GUEST).await.json();
    assert_eq!(overview["product_name"], "dwellmq");
    assert!(overview["rabbitmq_version"].is_string());
    assert_eq!(overview["queue_totals"]["messages_ready"], 2);
    assert_eq!(overview["queue_totals"]["messages"], 2);
    assert_eq!(overview["object_totals"]["queues"], 1);
    assert_eq!(overview["object_totals"]["connections"], 1);
    // Seven predeclared exchanges in "/".
    assert_eq!(overview["object_totals"]["exchanges"], 7);
    let listener = &overview["listeners"][0];
    assert_eq!(listener["protocol"], "amqp");
    assert_eq!(listener["port"], t.broker.local_addr().port());
    assert_eq!(overview["contexts"][0]["port"], addr.port().to_string());
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn vhosts_users_and_permissions_reflect_the_configuration() {
    let (t, addr) = start_api().await;
    let vhosts = list(addr, "/api/vhosts").await;
    assert_eq!(vhosts.len(), 1);
    assert_eq!(vhosts[0]["name"], "/");
    assert_eq!(vhosts[0]["messages"], 0);
    assert_eq!(
        get(addr, "/api/vhosts/%2F", GUEST).await.json()["name"],
        "/"
    );
    get(addr, "/api/vhosts/nope", GUEST).await.error(404);
    let users = list(addr, "/api/users").await;
    assert_eq!(users.len(), 1);
    assert_eq!(users[0]["name"], "guest");
    assert_eq!(users[0]["tags"], json!(["administrator"]));
    assert_eq!(
        users[0]["hashing_algorithm"],
        "rabbit_password_hashing_sha256"
    );
    assert_eq!(
        get(addr, "/api/users/guest", GUEST).await.json()["name"],
        "guest"
    );
    get(addr, "/api/users/nobody", GUEST).await.error(404);
    let permissions = list(addr, "/api/permissions").await;
    assert_eq!(
        permissions,
        [json!({"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"})]
    );
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn exchanges_are_declared_shown_and_deleted() {
    let (t, addr) = start_api().await;
    let path = "/api/exchanges/%2F/orders";
    let body = json!({"type": "topic", "durable": true, "arguments": {"alternate-exchange": "ae"}});
    assert_eq!(put(addr, path, GUEST, body.clone()).await.status, 201);
    assert_eq!(
        put(addr, path, GUEST, body).await.status,
        204,
        "an equivalent redeclare"
    );
    let shown = get(addr, path, GUEST).await.json();
    assert_eq!(shown["name"], "orders");
    assert_eq!(shown["vhost"], "/");
    assert_eq!(shown["type"], "topic");
    assert_eq!(shown["durable"], true);
    assert_eq!(shown["auto_delete"], false);
    assert_eq!(shown["internal"], false);
    assert_eq!(shown["arguments"], json!({"alternate-exchange": "ae"}));
    // The AMQP side sees it, with the same properties.
    let ch = t.channel().await;
    ch.exchange_declare(
        "orders".into(),
        lapin::ExchangeKind::Topic,
        ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("declared over HTTP, visible over AMQP");
    // An inequivalent redeclare: RabbitMQ's 400 with the AMQP code and text.
    let reply = put(
        addr,
        path,
        GUEST,
        json!({"type": "topic", "durable": false}),
    )
    .await;
    assert_eq!(
        reply.error(400),
        "406 PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'orders' in vhost '/': received 'false' but current is 'true'"
    );
    let reply = put(addr, path, GUEST, json!({"type": "nonsense"})).await;
    assert!(reply
        .error(400)
        .contains("unknown exchange type 'nonsense'"));
    put(
        addr,
        "/api/exchanges/%2F/amq.mine",
        GUEST,
        json!({"type": "direct"}),
    )
    .await
    .error(400);
    // Listing: the default exchange is "" and amq.default in paths.
    let all = list(addr, "/api/exchanges/%2F").await;
    assert!(named(&all, "").is_some() && named(&all, "amq.topic").is_some());
    assert_eq!(list(addr, "/api/exchanges").await.len(), all.len());
    assert_eq!(
        get(addr, "/api/exchanges/%2F/amq.default", GUEST)
            .await
            .json()["type"],
        "direct"
    );
    // Deleting.
    delete(addr, "/api/exchanges/%2F/amq.direct", GUEST)
        .await
        .error(400);
    assert_eq!(delete(addr, path, GUEST).await.status, 204);
    get(addr, path, GUEST).await.error(404);
    delete(addr, path, GUEST).await.error(404);
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn if_unused_keeps_a_bound_exchange() {
    let (t, addr) = start_api().await;
    put(
        addr,
        "/api/exchanges/%2F/x",
        GUEST,
        json!({"type": "fanout"}),
    )
    .await;
    put(addr, "/api/queues/%2F/q", GUEST, json!({})).await;
    post(addr, "/api/bindings/%2F/e/x/q/q", GUEST, json!({})).await;
    let reply = delete(addr, "/api/exchanges/%2F/x?if-unused=true", GUEST).await;
    assert!(reply.error(400).contains("in use"));
    assert_eq!(
        delete(addr, "/api/exchanges/%2F/x", GUEST).await.status,
        204
    );
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn queues_show_counts_and_are_declared_purged_and_deleted() {
    let (t, addr) = start_api().await;
    let path = "/api/queues/%2F/work";
    let body = json!({"durable": true, "arguments": {"x-max-priority": 5}});
    assert_eq!(put(addr, path, GUEST, body.clone()).await.status, 201);
    assert_eq!(put(addr, path, GUEST, body).await.status, 204);
    let ch = t.channel().await;
    for i in 0..3 {
        ch.basic_publish(
            "".into(),
            "work".into(),
            BasicPublishOptions::default(),
            format!("m{i}").as_bytes(),
            BasicProperties::default(),
        )
        .await
        .unwrap();
    }
    // One delivered and left unacked.
    ch.basic_qos(1, BasicQosOptions::default()).await.unwrap();
    let mut consumer = ch
        .basic_consume(
            "work".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    next_delivery(&mut consumer).await;
    let shown = get(addr, path, GUEST).await.json();
    assert_eq!(shown["name"], "work");
    assert_eq!(shown["vhost"], "/");
    assert_eq!(shown["durable"], true);
    assert_eq!(shown["auto_delete"], false);
    assert_eq!(shown["exclusive"], false);
    assert_eq!(shown["arguments"], json!({"x-max-priority": 5}));
    assert_eq!(shown["messages_ready"], 2);
    assert_eq!(shown["messages_unacknowledged"], 1);
    assert_eq!(shown["messages"], 3);
    assert_eq!(shown["consumers"], 1);
    assert_eq!(shown["state"], "running");
    assert_eq!(shown["type"], "classic");
    assert!(named(&list(addr, "/api/queues").await, "work").is_some());
    assert!(named(&list(addr, "/api/queues/%2F").await, "work").is_some());
    // if-unused and if-empty refuse; purge empties the ready messages.
    assert!(delete(addr, "/api/queues/%2F/work?if-unused=true", GUEST)
        .await
        .error(400)
        .contains("in use"));
    assert!(delete(addr, "/api/queues/%2F/work?if-empty=true", GUEST)
        .await
        .error(400)
        .contains("not empty"));
    assert_eq!(
        delete(addr, "/api/queues/%2F/work/contents", GUEST)
            .await
            .status,
        204
    );
    assert_eq!(get(addr, path, GUEST).await.json()["messages_ready"], 0);
    // Deleting cancels the consumer, as queue.delete does.
    assert_eq!(delete(addr, path, GUEST).await.status, 204);
    get(addr, path, GUEST).await.error(404);
    delete(addr, path, GUEST).await.error(404);
    let gone = passive_declare(&ch, "work")
        .await
        .expect_err("queue deleted");
    assert_eq!(amqp_error(&gone).0, 404);
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn bad_queue_arguments_get_the_amqp_text() {
    let (t, addr) = start_api().await;
    let reply = put(
        addr,
        "/api/queues/%2F/q",
        GUEST,
        json!({"arguments": {"x-max-priority": "high"}}),
    )
    .await;
    assert!(
        reply
            .error(400)
            .starts_with("406 PRECONDITION_FAILED - invalid arg 'x-max-priority'"),
        "{}",
        reply.text()
    );
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn bindings_are_listed_created_and_deleted_by_properties_key() {
    let (t, addr) = start_api().await;
    put(
        addr,
        "/api/exchanges/%2F/x",
        GUEST,
        json!({"type": "direct"}),
    )
    .await;
    put(
        addr,
        "/api/exchanges/%2F/x2",
        GUEST,
        json!({"type": "fanout"}),
    )
    .await;
    put(addr, "/api/queues/%2F/q", GUEST, json!({})).await;
    let reply = post(
        addr,
        "/api/bindings/%2F/e/x/q/q",
        GUEST,
        json!({"routing_key": "a key", "arguments": {}}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(reply.header("location"), Some("a+key"));
    let reply = post(
        addr,
        "/api/bindings/%2F/e/x/e/x2",
        GUEST,
        json!({"routing_key": "k"}),
    )
    .await;
    assert_eq!(reply.status, 201);
    let all = list(addr, "/api/bindings/%2F").await;
    assert_eq!(
        all[0],
        json!({"source": "", "vhost": "/", "destination": "q", "destination_type": "queue",
               "routing_key": "q", "arguments": {}, "properties_key": "q"}),
        "the default exchange's binding comes first"
    );
    assert!(all.contains(&json!({"source": "x", "vhost": "/", "destination": "q",
        "destination_type": "queue", "routing_key": "a key", "arguments": {}, "properties_key": "a+key"})));
    assert!(all
        .iter()
        .any(|b| b["destination"] == "x2" && b["destination_type"] == "exchange"));
    assert_eq!(list(addr, "/api/bindings").await.len(), all.len());
    assert_eq!(list(addr, "/api/bindings/%2F/e/x/q/q").await.len(), 1);
    assert_eq!(
        list(addr, "/api/exchanges/%2F/x/bindings/source")
            .await
            .len(),
        2
    );
    assert_eq!(
        list(addr, "/api/exchanges/%2F/x2/bindings/destination")
            .await
            .len(),
        1
    );
    assert_eq!(list(addr, "/api/queues/%2F/q/bindings").await.len(), 2);
    // The binding routes for an AMQP publisher.
    let ch = t.channel().await;
    ch.basic_publish(
        "x".into(),
        "a key".into(),
        BasicPublishOptions::default(),
        b"hi",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    sync(&ch).await;
    assert_eq!(t.broker.queue_info("/", "q").unwrap().messages, 1);
    // Shown and deleted by properties key (percent-encoded once more in the path).
    let one = get(addr, "/api/bindings/%2F/e/x/q/q/a%2Bkey", GUEST)
        .await
        .json();
    assert_eq!(one["routing_key"], "a key");
    assert_eq!(
        delete(addr, "/api/bindings/%2F/e/x/q/q/a%2Bkey", GUEST)
            .await
            .status,
        204
    );
    delete(addr, "/api/bindings/%2F/e/x/q/q/a%2Bkey", GUEST)
        .await
        .error(404);
    assert!(list(addr, "/api/bindings/%2F/e/x/q/q").await.is_empty());
    // Missing ends are 404; the default exchange cannot be bound.
    post(addr, "/api/bindings/%2F/e/x/q/nope", GUEST, json!({}))
        .await
        .error(404);
    post(addr, "/api/bindings/%2F/e/nope/q/q", GUEST, json!({}))
        .await
        .error(404);
    post(
        addr,
        "/api/bindings/%2F/e/amq.default/q/q",
        GUEST,
        json!({}),
    )
    .await
    .error(400);
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn publish_over_http_reaches_an_amqp_consumer() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    let mut consumer = consume_no_ack(&ch, "q").await;
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.default/publish",
        GUEST,
        json!({
        "properties": {"delivery_mode": 2, "headers": {"h": "v"}, "content_type": "text/plain"},
        "routing_key": "q", "payload": "hello", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(reply.json(), json!({"routed": true}));
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(delivery.data, b"hello");
    assert_eq!(delivery.properties.delivery_mode(), &Some(2));
    assert_eq!(
        delivery
            .properties
            .content_type()
            .as_ref()
            .map(|s| s.as_str()),
        Some("text/plain")
    );
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.default/publish",
        GUEST,
        json!({
        "routing_key": "q", "payload": "AAEC", "payload_encoding": "base64"}),
    )
    .await;
    assert_eq!(reply.json(), json!({"routed": true}));
    assert_eq!(next_delivery(&mut consumer).await.data, [0, 1, 2]);
    // Unroutable; unknown exchange; bad inputs.
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.direct/publish",
        GUEST,
        json!({
        "routing_key": "nowhere", "payload": "", "payload_encoding": "string"}),
    )
    .await;
    assert_eq!(reply.json(), json!({"routed": false}));
    post(
        addr,
        "/api/exchanges/%2F/nope/publish",
        GUEST,
        json!({
        "routing_key": "", "payload": "", "payload_encoding": "string"}),
    )
    .await
    .error(404);
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.default/publish",
        GUEST,
        json!({
        "routing_key": "q", "payload": "!", "payload_encoding": "base64"}),
    )
    .await;
    assert!(reply.error(400).contains("base64"));
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.default/publish",
        GUEST,
        json!({
        "routing_key": "q", "payload": "x"}),
    )
    .await;
    assert!(
        reply.error(400).contains("payload_encoding"),
        "{}",
        reply.text()
    );
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.default/publish",
        GUEST,
        json!({
        "properties": {"user_id": "mallory"}, "routing_key": "q", "payload": "x",
        "payload_encoding": "string"}),
    )
    .await;
    assert!(reply
        .error(400)
        .contains("user_id property set to 'mallory'"));
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn get_peeks_with_requeue_and_takes_without() {
    let (t, addr) = start_api().await;
    let ch = t.channel().await;
    declare_queue(&ch, "q").await;
    for (body, props) in [
        (
            &b"one"[..],
            BasicProperties::default().with_message_id("m1".into()),
        ),
        (&[0xff, 0xfe][..], BasicProperties::default()),
    ] {
        ch.basic_publish(
            "".into(),
            "q".into(),
            BasicPublishOptions::default(),
            body,
            props,
        )
        .await
        .unwrap();
    }
    sync(&ch).await;
    let path = "/api/queues/%2F/q/get";
    let got = post(
        addr,
        path,
        GUEST,
        json!({"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"}),
    )
    .await
    .json();
    assert_eq!(got.as_array().unwrap().len(), 2);
    assert_eq!(
        got[0],
        json!({"payload_bytes": 3, "redelivered": false, "exchange": "",
        "routing_key": "q", "message_count": 1, "properties": {"message_id": "m1"},
        "payload": "one", "payload_encoding": "string"})
    );
    assert_eq!(got[1]["payload"], "//4=", "not UTF-8: base64");
    assert_eq!(got[1]["payload_encoding"], "base64");
    assert_eq!(got[1]["message_count"], 0);
    // Requeued, in order, marked redelivered.
    assert_eq!(t.broker.queue_info("/", "q").unwrap().messages, 2);
    let got = post(
        addr,
        path,
        GUEST,
        json!({"count": 1, "ackmode": "reject_requeue_false", "encoding": "base64", "truncate": 2}),
    )
    .await
    .json();
    assert_eq!(got[0]["redelivered"], true);
    assert_eq!(
        got[0]["payload"], "b24=",
        "truncated to 2 bytes, base64 asked for"
    );
    assert_eq!(got[0]["payload_bytes"], 3);
    assert_eq!(t.broker.queue_info("/", "q").unwrap().messages, 1);
    // The remaining message is still delivered to an AMQP consumer.
    let mut consumer = consume_no_ack(&ch, "q").await;
    assert_eq!(next_delivery(&mut consumer).await.data, [0xff, 0xfe]);
    // Bad requests.
    let reply = post(
        addr,
        path,
        GUEST,
        json!({"count": 1, "ackmode": "ack_maybe"}),
    )
    .await;
    assert!(reply.error(400).contains("ackmode"));
    post(addr, path, GUEST, json!({"ackmode": "ack_requeue_true"}))
        .await
        .error(400);
    post(
        addr,
        "/api/queues/%2F/nope/get",
        GUEST,
        json!({"count": 1, "ackmode": "ack_requeue_true"}),
    )
    .await
    .error(404);
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn health_checks_answer_ok() {
    let (t, addr) = start_api().await;
    let reply = get(addr, "/api/health/checks/alarms", GUEST).await;
    assert_eq!((reply.status, reply.json()), (200, json!({"status": "ok"})));
    let reply = get(addr, "/api/aliveness-test/%2F", GUEST).await;
    assert_eq!((reply.status, reply.json()), (200, json!({"status": "ok"})));
    assert_eq!(
        t.broker.queue_info("/", "aliveness-test").unwrap().messages,
        0
    );
    get(addr, "/api/aliveness-test/nope", GUEST)
        .await
        .error(404);
    drop(t); // shuts the broker down
}

/// The alarms check's other answer: 503 with the alarm in effect while memory is over the
/// watermark, as RabbitMQ answers, and 200 again once the memory is freed.
#[tokio::test]
async fn the_alarms_health_check_fails_while_the_memory_alarm_is_on() {
    let mut config = BrokerConfig::ephemeral();
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.limits.memory_high_watermark = MemoryWatermark::Absolute(1024);
    let t = start_with(config).await;
    let addr = t.broker.http_addr().expect("HTTP on");
    let ch = t.channel().await;
    declare_queue(&ch, "big").await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let confirm = ch
        .basic_publish(
            "".into(),
            "big".into(),
            BasicPublishOptions::default(),
            &[0u8; 2048],
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    assert!(confirm.is_ack());
    let reply = get(addr, "/api/health/checks/alarms", GUEST).await;
    assert_eq!(
        (reply.status, reply.json()),
        (
            503,
            json!({
                "status": "failed",
                "reason": "resource alarm(s) in effect in the cluster",
                "alarms": [{"node": "dwellmq@localhost", "resource": "memory"}],
            })
        )
    );
    delete(addr, "/api/queues/%2F/big/contents", GUEST).await;
    let reply = get(addr, "/api/health/checks/alarms", GUEST).await;
    assert_eq!((reply.status, reply.json()), (200, json!({"status": "ok"})));
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn flags_and_counts_sent_as_strings_are_accepted_as_rabbitmqadmin_sends_them() {
    let (t, addr) = start_api().await;
    let reply = put(
        addr,
        "/api/queues/%2F/q",
        GUEST,
        json!({"durable": "false", "auto_delete": "false", "arguments": {}}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        get(addr, "/api/queues/%2F/q", GUEST).await.json()["durable"],
        false
    );
    let reply = put(
        addr,
        "/api/exchanges/%2F/x",
        GUEST,
        json!({"type": "direct", "durable": "true", "internal": "false"}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    put(
        addr,
        "/api/queues/%2F/q2",
        GUEST,
        json!({"durable": "maybe"}),
    )
    .await
    .error(400);
    let got = post(
        addr,
        "/api/queues/%2F/q/get",
        GUEST,
        json!({"count": "3", "ackmode": "ack_requeue_true", "encoding": "auto"}),
    )
    .await;
    assert_eq!(got.json(), json!([]));
    drop(t); // shuts the broker down
}
