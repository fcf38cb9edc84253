//! Names outside ASCII (vhost, user, password, exchange, queue, routing keys) end to end:
//! created over HTTP with percent-encoded URLs, used through lapin with a percent-encoded
//! AMQP URL, kept by the store across a restart, and shown back byte for byte.

use crate::common::*;
use crate::http_client::{delete, get, post, put, start_http, GUEST};
use crate::support::on_disk;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, ExchangeKind};
use serde_json::json;

const VHOST: &str = "ventes/東京-é";
const USER: &str = "José-Δ";
const PASSWORD: &str = "pässwörd 秘密";
const EXCHANGE: &str = "заказы";
const QUEUE: &str = "キュー.ü";
const BINDING_KEY: &str = "注文.#";
const ROUTING_KEY: &str = "注文.東京";

/// Percent-encodes every octet outside RFC 3986's unreserved set, as a management client does
/// for a path segment (so `/` in a name is `%2F`).
fn enc(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn amqp_url(broker: &dwellmq::BrokerHandle) -> String {
    let port = broker.local_addr().port();
    format!(
        "amqp://{}:{}@127.0.0.1:{port}/{}",
        enc(USER),
        enc(PASSWORD),
        enc(VHOST)
    )
}

async fn publish_confirmed_to(ch: &Channel, exchange: &str, key: &str, body: &str) {
    let confirm = ch
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            body.as_bytes(),
            BasicProperties::default().with_delivery_mode(2),
        )
        .confirmed()
        .await
        .expect("confirm");
    assert!(confirm.is_ack(), "{body} confirmed");
}

#[tokio::test]
async fn non_ascii_names_survive_the_api_the_client_and_a_restart() {
    let dir = DataDir::new("non-ascii");
    let (broker, addr) = start_http(on_disk(&dir)).await;
    let vhost_path = format!("/api/vhosts/{}", enc(VHOST));
    assert_eq!(put(addr, &vhost_path, GUEST, json!({})).await.status, 201);
    let user_path = format!("/api/users/{}", enc(USER));
    let created = put(
        addr,
        &user_path,
        GUEST,
        json!({"password": PASSWORD, "tags": "management"}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text());
    // The user, and guest for the API's view of the vhost (as in RabbitMQ, an administrator
    // sees a vhost's objects only with permissions there).
    for user in [USER, "guest"] {
        let permissions_path = format!("/api/permissions/{}/{}", enc(VHOST), enc(user));
        let granted = put(
            addr,
            &permissions_path,
            GUEST,
            json!({"configure": ".*", "write": ".*", "read": ".*"}),
        )
        .await;
        assert_eq!(granted.status, 201, "{}", granted.text());
    }

    let connection = connect_url(&amqp_url(&broker))
        .await
        .expect("the user logs in to the vhost through a percent-encoded URL");
    let ch = connection.create_channel().await.unwrap();
    ch.exchange_declare(
        EXCHANGE.into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_declare(
        QUEUE.into(),
        QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        QUEUE.into(),
        EXCHANGE.into(),
        BINDING_KEY.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    publish_confirmed_to(&ch, EXCHANGE, ROUTING_KEY, "première").await;
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;

    let (broker, addr) = start_http(on_disk(&dir)).await;
    // The API finds each object by its encoded name and shows the name as declared.
    let queue_path = format!("/api/queues/{}/{}", enc(VHOST), enc(QUEUE));
    let queue = get(addr, &queue_path, GUEST).await.json();
    assert_eq!(
        (&queue["name"], &queue["vhost"], &queue["messages"]),
        (&json!(QUEUE), &json!(VHOST), &json!(1)),
        "{queue}"
    );
    let exchange = get(
        addr,
        &format!("/api/exchanges/{}/{}", enc(VHOST), enc(EXCHANGE)),
        GUEST,
    )
    .await
    .json();
    assert_eq!(exchange["name"], EXCHANGE, "{exchange}");
    let bindings = get(
        addr,
        &format!(
            "/api/bindings/{}/e/{}/q/{}",
            enc(VHOST),
            enc(EXCHANGE),
            enc(QUEUE)
        ),
        GUEST,
    )
    .await
    .json();
    assert_eq!(bindings.as_array().map(Vec::len), Some(1), "{bindings}");
    assert_eq!(bindings[0]["routing_key"], BINDING_KEY, "{bindings}");
    let user = get(addr, &user_path, GUEST).await.json();
    assert_eq!(user["name"], USER, "{user}");
    let vhosts = get(addr, "/api/vhosts", GUEST).await.json();
    assert!(
        vhosts
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == VHOST),
        "{vhosts}"
    );

    // The client finds the same: the password, the message with its routing key, the binding.
    let connection = connect_url(&amqp_url(&broker))
        .await
        .expect("the stored password still logs in");
    let ch = connection.create_channel().await.unwrap();
    let got = ch
        .basic_get(QUEUE.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the persistent message");
    assert_eq!(got.delivery.data, "première".as_bytes());
    assert_eq!(got.delivery.exchange.as_str(), EXCHANGE);
    assert_eq!(got.delivery.routing_key.as_str(), ROUTING_KEY);
    ch.basic_publish(
        EXCHANGE.into(),
        "注文.大阪".into(),
        BasicPublishOptions::default(),
        b"seconde",
        BasicProperties::default(),
    )
    .await
    .unwrap();
    sync(&ch).await;

    // HTTP publish and get through the encoded names.
    let published = post(
        addr,
        &format!("/api/exchanges/{}/{}/publish", enc(VHOST), enc(EXCHANGE)),
        GUEST,
        json!({"routing_key": "注文.京都", "payload": "troisième", "payload_encoding": "string", "properties": {}}),
    )
    .await;
    assert_eq!(published.json(), json!({"routed": true}));
    let got = post(
        addr,
        &format!("{queue_path}/get"),
        GUEST,
        json!({"count": 2, "ackmode": "ack_requeue_false", "encoding": "auto"}),
    )
    .await
    .json();
    let seen: Vec<(&str, &str)> = got
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["routing_key"].as_str().unwrap(),
                m["payload"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [("注文.大阪", "seconde"), ("注文.京都", "troisième")]);

    // Deleted by its encoded name: gone for the client too.
    assert_eq!(delete(addr, &queue_path, GUEST).await.status, 204);
    let (code, text) = channel_error(passive_declare(&ch, QUEUE).await);
    assert_eq!(
        (code, text),
        (
            404,
            format!("NOT_FOUND - no queue '{QUEUE}' in vhost '{VHOST}'")
        )
    );
    connection.close(200, "bye".into()).await.ok();
    broker.shutdown().await;
}
