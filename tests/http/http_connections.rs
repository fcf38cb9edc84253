//! `/api/connections` and `/api/consumers`, and closing a connection over HTTP.

use std::net::SocketAddr;

use crate::common::raw::RawClient;
use crate::common::*;
use crate::http_client::*;
use dwellmq::{BrokerConfig, UserConfig};
use lapin::options::*;
use lapin::types::FieldTable;
use serde_json::json;

fn config() -> BrokerConfig {
    let mut config = BrokerConfig::ephemeral();
    config.http = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
    config.users.push(UserConfig {
        name: "mgmt".into(),
        password: "pw".into(),
        password_hash: None,
        vhosts: vec!["*".into()],
        loopback_only: false,
        tags: vec!["management".into()],
    });
    config
}

/// Percent-encodes a connection name for a path.
fn encoded(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn connections_and_consumers_are_listed() {
    let t = start_with(config()).await;
    let addr = t.broker.http_addr().unwrap();
    let ch = t.channel().await;
    let _second = t.channel().await;
    declare_queue(&ch, "q").await;
    ch.basic_qos(7, BasicQosOptions::default()).await.unwrap();
    // Kept: lapin cancels a consumer it drops.
    let _consumer = ch
        .basic_consume(
            "q".into(),
            "c1".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    sync(&ch).await;

    let list = get(addr, "/api/connections", GUEST).await.json();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1);
    let c = &list[0];
    let name = c["name"].as_str().unwrap().to_string();
    let amqp_port = t.broker.local_addr().port();
    assert!(
        name.ends_with(&format!(" -> 127.0.0.1:{amqp_port}")),
        "{name}"
    );
    assert_eq!(c["user"], "guest");
    assert_eq!(c["vhost"], "/");
    assert_eq!(c["protocol"], "AMQP 0-9-1");
    assert_eq!(c["port"], amqp_port);
    assert_eq!(c["peer_host"], "127.0.0.1");
    assert_eq!(c["channels"], 2);
    assert!(c["client_properties"]["capabilities"].is_object(), "{c}");
    let one = get(addr, &format!("/api/connections/{}", encoded(&name)), GUEST).await;
    assert_eq!(one.json()["name"], name);
    get(addr, "/api/connections/nope", GUEST).await.error(404);

    let consumers = get(addr, "/api/consumers", GUEST).await.json();
    assert_eq!(consumers.as_array().unwrap().len(), 1, "{consumers}");
    let consumer = &consumers[0];
    assert_eq!(consumer["consumer_tag"], "c1");
    assert_eq!(consumer["queue"], json!({"name": "q", "vhost": "/"}));
    assert_eq!(consumer["ack_required"], true);
    assert_eq!(consumer["exclusive"], false);
    assert_eq!(consumer["prefetch_count"], 7);
    assert_eq!(consumer["channel_details"]["connection_name"], name);
    assert_eq!(consumer["channel_details"]["number"], 1);

    // A management user sees only its own connections (and consumers).
    let mgmt = As::User("mgmt", "pw");
    assert_eq!(get(addr, "/api/connections", mgmt).await.json(), json!([]));
    assert_eq!(get(addr, "/api/consumers", mgmt).await.json(), json!([]));
    get(addr, &format!("/api/connections/{}", encoded(&name)), mgmt)
        .await
        .error(404);
    drop(t); // shuts the broker down
}

#[tokio::test]
async fn deleting_a_connection_closes_it_with_the_reason() {
    let (broker, addr) = start_http(config()).await;
    let mut raw = RawClient::open(broker.local_addr()).await;
    let list = get(addr, "/api/connections", GUEST).await.json();
    let name = list[0]["name"].as_str().unwrap().to_string();
    let path = format!("/api/connections/{}", encoded(&name));
    let reply = crate::http_client::raw(addr, "DELETE", &path, GUEST, None).await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    assert_eq!(
        raw.expect_close_and_ack().await,
        (
            320,
            "CONNECTION_FORCED - Closed via management plugin".into(),
            0,
            0
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn the_close_reason_comes_from_x_reason() {
    let (broker, addr) = start_http(config()).await;
    let mut raw = RawClient::open(broker.local_addr()).await;
    let list = get(addr, "/api/connections", GUEST).await.json();
    let name = list[0]["name"].as_str().unwrap().to_string();
    let path = format!("/api/connections/{}", encoded(&name));
    let reason = [("X-Reason", "maintenance")];
    let reply = raw_with_headers(addr, "DELETE", &path, GUEST, &reason, None).await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    assert_eq!(
        raw.expect_close_and_ack().await,
        (320, "CONNECTION_FORCED - maintenance".into(), 0, 0)
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn only_administrators_close_other_users_connections() {
    let (broker, addr) = start_http(config()).await;
    let _raw = RawClient::open(broker.local_addr()).await;
    let list = get(addr, "/api/connections", GUEST).await.json();
    let name = list[0]["name"].as_str().unwrap().to_string();
    // Not visible to `mgmt`, so not found for it.
    delete(
        addr,
        &format!("/api/connections/{}", encoded(&name)),
        As::User("mgmt", "pw"),
    )
    .await
    .error(404);
    assert_eq!(
        get(addr, "/api/connections", GUEST)
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn channels_are_listed_as_their_connection_describes_them() {
    let t = start_with(config()).await;
    let addr = t.broker.http_addr().unwrap();
    let plain = t.channel().await;
    let confirming = t.channel().await;
    confirming
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    declare_queue(&confirming, "q").await;
    confirming
        .basic_qos(7, BasicQosOptions::default())
        .await
        .unwrap();
    confirming
        .basic_publish(
            "".into(),
            "q".into(),
            BasicPublishOptions::default(),
            b"m",
            lapin::BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let mut consumer = confirming
        .basic_consume(
            "q".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    next_delivery(&mut consumer).await; // left unacked
    sync(&plain).await;

    let list = get(addr, "/api/channels", GUEST).await.json();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "{list:?}");
    let (first, second) = (&list[0], &list[1]);
    assert_eq!(first["number"], 1);
    assert_eq!(first["confirm"], false);
    assert_eq!(first["consumer_count"], 0);
    assert_eq!(second["number"], 2);
    assert_eq!(second["confirm"], true);
    assert_eq!(second["transactional"], false);
    assert_eq!(second["consumer_count"], 1);
    assert_eq!(second["prefetch_count"], 7);
    assert_eq!(second["messages_unacknowledged"], 1);
    assert_eq!(second["user"], "guest");
    let connection = second["connection_details"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(second["name"], format!("{connection} (2)"));
    let path = format!("/api/connections/{}/channels", encoded(&connection));
    assert_eq!(
        get(addr, &path, GUEST)
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Another user's channels are not shown to a management user.
    assert_eq!(
        get(addr, "/api/channels", As::User("mgmt", "pw"))
            .await
            .json(),
        json!([])
    );
    drop(t); // shuts the broker down
}
