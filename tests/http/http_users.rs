//! Users and permissions over HTTP (`/api/users`, `/api/permissions`), and definitions that
//! carry them, as RabbitMQ exports them.

use crate::common::{amqp_error, connect_url, declare_queue, publish_error, round_trip};
use crate::http_client::*;
use dwellmq::BrokerConfig;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use serde_json::{json, Value};

/// A definitions file shaped as RabbitMQ 3.10 exports it (`rabbitmqctl export_definitions`):
/// three users with their password hashes (app: `app-secret`, guest: `guest`, ops: `ops-pw`),
/// their permissions, a policy, queues, an exchange and a binding.
fn rabbitmq_3_10_export() -> Value {
    serde_json::from_str(include_str!("../fixtures/rabbitmq-3.10-definitions.json")).unwrap()
}

fn amqp_url(broker: &dwellmq::BrokerHandle, user: &str, password: &str) -> String {
    let port = broker.local_addr().port();
    format!("amqp://{user}:{password}@127.0.0.1:{port}/%2f")
}

#[tokio::test]
async fn a_rabbitmq_3_10_export_imports_and_exports_back_the_same() {
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    let input = rabbitmq_3_10_export();
    let reply = post(addr, "/api/definitions", GUEST, input.clone()).await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    let output = get(addr, "/api/definitions", GUEST).await.json();
    for key in [
        "users",
        "permissions",
        "topic_permissions",
        "parameters",
        "policies",
        "queues",
        "exchanges",
        "bindings",
    ] {
        assert_eq!(output[key], input[key], "{key}");
    }
    assert_eq!(output["vhosts"][0]["name"], "/");

    // The imported hashes log in, over AMQP and HTTP, and the permissions hold.
    let app = connect_url(&amqp_url(&broker, "app", "app-secret"))
        .await
        .expect("app logs in with its RabbitMQ hash");
    round_trip(&app, "app.new").await;
    let ch = app.create_channel().await.unwrap();
    let refused = ch
        .queue_declare(
            "other".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("configure is ^app\\.");
    assert_eq!(
        amqp_error(&refused),
        (
            403,
            "ACCESS_REFUSED - access to queue 'other' in vhost '/' refused for user 'app'".into()
        )
    );
    let ops = As::User("ops", "ops-pw");
    assert_eq!(get(addr, "/api/overview", ops).await.status, 200);
    assert_eq!(
        get(addr, "/api/users", ops).await.error(401),
        "Not administrator user"
    );
    get(addr, "/api/overview", As::User("ops", "ops-PW"))
        .await
        .error(401);
    broker.shutdown().await;
}

#[tokio::test]
async fn tags_as_a_comma_separated_string_are_accepted() {
    // RabbitMQ before 3.9 exported tags as one string; the API takes that form too.
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    let defs = json!({"users": [{"name": "old", "password_hash": "", "tags": "monitoring,management",
                                 "hashing_algorithm": "rabbit_password_hashing_sha256"}]});
    assert_eq!(
        post(addr, "/api/definitions", GUEST, defs).await.status,
        204
    );
    let user = get(addr, "/api/users/old", GUEST).await.json();
    assert_eq!(user["tags"], json!(["monitoring", "management"]));
    assert_eq!(user["password_hash"], "");
    broker.shutdown().await;
}

#[tokio::test]
async fn users_are_created_shown_updated_and_deleted() {
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    let reply = put(
        addr,
        "/api/users/alice",
        GUEST,
        json!({"password": "s3cret", "tags": "management"}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let alice = get(addr, "/api/users/alice", GUEST).await.json();
    assert_eq!(alice["name"], "alice");
    assert_eq!(alice["tags"], json!(["management"]));
    assert_eq!(alice["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert_eq!(alice["limits"], json!({}));
    assert_ne!(alice["password_hash"], "s3cret");
    let names: Vec<Value> = get(addr, "/api/users", GUEST)
        .await
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].clone())
        .collect();
    assert_eq!(names, [json!("alice"), json!("guest")]);

    // No permissions yet: she may log in over HTTP but not open a vhost.
    let who = As::User("alice", "s3cret");
    assert_eq!(get(addr, "/api/whoami", who).await.json()["name"], "alice");
    let err = connect_url(&amqp_url(&broker, "alice", "s3cret"))
        .await
        .expect_err("no permissions in /");
    assert_eq!(
        amqp_error(&err).1,
        "NOT_ALLOWED - access to vhost '/' refused for user 'alice'"
    );

    // Updated with a hash: the old password stops working.
    let reply = put(
        addr,
        "/api/users/alice",
        GUEST,
        json!({"password_hash": "AQIDBKSR723asempcKRBlyrPWcL1zhEiLhyy/se3Vks7S5g+",
               "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["administrator"]}),
    )
    .await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    get(addr, "/api/whoami", who).await.error(401);
    let alice = As::User("alice", "app-secret");
    assert_eq!(get(addr, "/api/users", alice).await.status, 200);

    // Bad bodies.
    assert_eq!(
        put(
            addr,
            "/api/users/x",
            GUEST,
            json!({"password": "a", "password_hash": "b", "tags": ""})
        )
        .await
        .error(400),
        "both_password_and_password_hash_are_provided"
    );
    put(
        addr,
        "/api/users/x",
        GUEST,
        json!({"password_hash": "!!", "tags": ""}),
    )
    .await
    .error(400);
    put(
        addr,
        "/api/users/x",
        GUEST,
        json!({"password": "a", "hashing_algorithm": "rabbit_password_hashing_md5", "tags": ""}),
    )
    .await
    .error(400);
    assert_eq!(
        put(addr, "/api/users/x", GUEST, json!({"password": "a"}))
            .await
            .error(400),
        "tags_not_present"
    );
    // The old administrator flag stands in for tags.
    let old = json!({"password": "a", "administrator": "true"});
    assert_eq!(put(addr, "/api/users/old", GUEST, old).await.status, 201);
    assert_eq!(
        get(addr, "/api/users/old", GUEST).await.json()["tags"],
        json!(["administrator"])
    );
    get(addr, "/api/users/x", GUEST).await.error(404);

    assert_eq!(delete(addr, "/api/users/alice", GUEST).await.status, 204);
    delete(addr, "/api/users/alice", GUEST).await.error(404);
    get(addr, "/api/users/alice", GUEST).await.error(404);
    broker.shutdown().await;
}

#[tokio::test]
async fn permissions_are_set_listed_and_cleared_and_open_channels_follow() {
    let mut config = BrokerConfig::ephemeral();
    config.vhosts = vec!["staging".into()];
    let (broker, addr) = start_http(config).await;
    put(
        addr,
        "/api/users/bob",
        GUEST,
        json!({"password": "pw", "tags": ""}),
    )
    .await;
    let body = json!({"configure": "^bob-", "write": "^amq\\.default$", "read": ""});
    let reply = put(addr, "/api/permissions/%2F/bob", GUEST, body.clone()).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    assert_eq!(
        put(addr, "/api/permissions/%2F/bob", GUEST, body)
            .await
            .status,
        204
    );
    let expected = json!({"user": "bob", "vhost": "/", "configure": "^bob-",
                          "write": "^amq\\.default$", "read": ""});
    assert_eq!(
        get(addr, "/api/permissions/%2F/bob", GUEST).await.json(),
        expected
    );
    assert_eq!(
        get(addr, "/api/users/bob/permissions", GUEST).await.json(),
        json!([expected])
    );
    let all = get(addr, "/api/permissions", GUEST).await.json();
    assert!(all.as_array().unwrap().contains(&expected), "{all}");
    let of_vhost = get(addr, "/api/vhosts/staging/permissions", GUEST)
        .await
        .json();
    assert_eq!(
        of_vhost.as_array().unwrap().len(),
        1,
        "guest only: {of_vhost}"
    );

    // Errors as RabbitMQ's.
    let perms = json!({"configure": ".*", "write": ".*", "read": ".*"});
    assert_eq!(
        put(addr, "/api/permissions/nope/bob", GUEST, perms.clone())
            .await
            .error(400),
        "vhost_or_user_not_found"
    );
    assert_eq!(
        put(addr, "/api/permissions/%2F/nobody", GUEST, perms)
            .await
            .error(400),
        "vhost_or_user_not_found"
    );
    let bad = json!({"configure": "(", "write": "", "read": ""});
    assert!(put(addr, "/api/permissions/%2F/bob", GUEST, bad)
        .await
        .error(400)
        .contains("invalid configure pattern"));
    get(addr, "/api/permissions/staging/bob", GUEST)
        .await
        .error(404);
    get(addr, "/api/users/nobody/permissions", GUEST)
        .await
        .error(404);

    // An open channel sees a change at once.
    let connection = connect_url(&amqp_url(&broker, "bob", "pw")).await.unwrap();
    let ch = connection.create_channel().await.unwrap();
    declare_queue(&ch, "bob-q").await;
    let body = json!({"configure": "^bob-", "write": "", "read": ""});
    put(addr, "/api/permissions/%2F/bob", GUEST, body).await;
    assert_eq!(
        publish_error(&ch, "", "bob-q", lapin::BasicProperties::default()).await,
        (
            403,
            "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'bob'"
                .into()
        )
    );

    assert_eq!(
        delete(addr, "/api/permissions/%2F/bob", GUEST).await.status,
        204
    );
    delete(addr, "/api/permissions/%2F/bob", GUEST)
        .await
        .error(404);
    let err = connect_url(&amqp_url(&broker, "bob", "pw"))
        .await
        .expect_err("no permissions left");
    assert_eq!(amqp_error(&err).0, 530);

    // Non-administrators may not touch any of it.
    put(
        addr,
        "/api/users/mon",
        GUEST,
        json!({"password": "pw", "tags": "monitoring"}),
    )
    .await;
    let mon = As::User("mon", "pw");
    for path in [
        "/api/users",
        "/api/permissions",
        "/api/users/bob/permissions",
    ] {
        assert_eq!(
            get(addr, path, mon).await.error(401),
            "Not administrator user"
        );
    }
    put(addr, "/api/users/x", mon, json!({"password": "pw"}))
        .await
        .error(401);
    broker.shutdown().await;
}

#[tokio::test]
async fn http_operations_are_checked_against_permissions_too() {
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    put(addr, "/api/queues/%2F/shared", GUEST, json!({})).await;
    put(
        addr,
        "/api/exchanges/%2F/shared-x",
        GUEST,
        json!({"type": "direct"}),
    )
    .await;
    put(
        addr,
        "/api/users/app",
        GUEST,
        json!({"password": "pw", "tags": "management"}),
    )
    .await;
    let perms = json!({"configure": "^app\\.", "write": "^app\\.", "read": "^app\\."});
    put(addr, "/api/permissions/%2F/app", GUEST, perms).await;
    let app = As::User("app", "pw");
    let refused = |kind: &str, name: &str| {
        format!("ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user 'app'")
    };

    assert_eq!(
        put(addr, "/api/queues/%2F/app.q", app, json!({}))
            .await
            .status,
        201
    );
    let x = json!({"type": "fanout"});
    assert_eq!(
        put(addr, "/api/exchanges/%2F/app.x", app, x.clone())
            .await
            .status,
        201
    );
    let bind = post(addr, "/api/bindings/%2F/e/app.x/q/app.q", app, json!({})).await;
    assert_eq!(bind.status, 201, "{}", bind.text());

    let reply = put(addr, "/api/queues/%2F/other", app, json!({})).await;
    assert_eq!(reply.error(401), refused("queue", "other"));
    let reply = put(addr, "/api/exchanges/%2F/other-x", app, x).await;
    assert_eq!(reply.error(401), refused("exchange", "other-x"));
    let reply = delete(addr, "/api/queues/%2F/shared", app).await;
    assert_eq!(reply.error(401), refused("queue", "shared"));
    let reply = delete(addr, "/api/queues/%2F/shared/contents", app).await;
    assert_eq!(reply.error(401), refused("queue", "shared"));
    let get_body = json!({"count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"});
    let reply = post(addr, "/api/queues/%2F/shared/get", app, get_body).await;
    assert_eq!(reply.error(401), refused("queue", "shared"));
    let publish_body = json!({"routing_key": "k", "payload": "x", "payload_encoding": "string",
                              "properties": {}});
    let reply = post(
        addr,
        "/api/exchanges/%2F/shared-x/publish",
        app,
        publish_body.clone(),
    )
    .await;
    assert_eq!(reply.error(401), refused("exchange", "shared-x"));
    let reply = post(
        addr,
        "/api/exchanges/%2F/amq.default/publish",
        app,
        publish_body,
    )
    .await;
    assert_eq!(reply.error(401), refused("exchange", "amq.default"));
    let reply = post(addr, "/api/bindings/%2F/e/shared-x/q/app.q", app, json!({})).await;
    assert_eq!(reply.error(401), refused("exchange", "shared-x"));
    let reply = delete(addr, "/api/exchanges/%2F/shared-x", app).await;
    assert_eq!(reply.error(401), refused("exchange", "shared-x"));
    assert!(broker.queue_info("/", "shared").is_some());
    broker.shutdown().await;
}

/// The same round trip with a file exported by a real RabbitMQ 3.10.8 (`GET /api/definitions`
/// after `rabbitmqctl add_user/set_permissions/set_policy` and declares through pika): two
/// vhosts, four users with RabbitMQ's own hashes, patterns, a policy, quorum and TTL queues, an
/// exchange-to-exchange binding. Arrays are compared as sets: RabbitMQ orders them as it likes.
#[tokio::test]
async fn a_real_rabbitmq_3_10_8_export_imports_and_exports_back_the_same() {
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    let input: Value =
        serde_json::from_str(include_str!("../fixtures/rabbitmq-3.10.8-real-export.json")).unwrap();
    let reply = post(addr, "/api/definitions", GUEST, input.clone()).await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    let output = get(addr, "/api/definitions", GUEST).await.json();
    let sorted = |v: &Value| {
        let mut items: Vec<String> = v
            .as_array()
            .unwrap_or_else(|| panic!("not an array: {v}"))
            .iter()
            .map(|item| item.to_string())
            .collect();
        items.sort();
        items
    };
    // Vhosts by name: dwellmq exports them as RabbitMQ 3.11+ does (with `limits` and
    // `metadata`), which 3.10 imports too.
    let names = |v: &Value| {
        sorted(&json!(v
            .as_array()
            .unwrap()
            .iter()
            .map(|vhost| vhost["name"].clone())
            .collect::<Vec<_>>()))
    };
    assert_eq!(names(&output["vhosts"]), names(&input["vhosts"]));
    for key in [
        "users",
        "permissions",
        "topic_permissions",
        "policies",
        "queues",
        "exchanges",
        "bindings",
    ] {
        assert_eq!(sorted(&output[key]), sorted(&input[key]), "{key}");
    }
    // RabbitMQ's own hash of svc's password logs in; svc may not open `/` (530 at open).
    let port = broker.local_addr().port();
    connect_url(&format!("amqp://ops:opspass@127.0.0.1:{port}/staging"))
        .await
        .expect("ops logs in with the hash RabbitMQ wrote");
    let refused = connect_url(&format!("amqp://svc:svcpass@127.0.0.1:{port}/%2f"))
        .await
        .expect_err("svc has no permissions in /");
    assert_eq!(
        amqp_error(&refused),
        (
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'svc'".into()
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_vhost_is_created_over_http_and_opened_over_amqp() {
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    let reply = put(addr, "/api/vhosts/tenant-a", GUEST, json!({})).await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let again = put(addr, "/api/vhosts/tenant-a", GUEST, json!({})).await;
    assert_eq!(again.status, 204);
    let listed = get(addr, "/api/vhosts", GUEST).await.json();
    assert!(listed
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == "tenant-a"));
    let reply = put(
        addr,
        "/api/permissions/tenant-a/guest",
        GUEST,
        json!({"configure": ".*", "write": ".*", "read": ".*"}),
    )
    .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let port = broker.local_addr().port();
    let conn = connect_url(&format!("amqp://guest:guest@127.0.0.1:{port}/tenant-a"))
        .await
        .expect("the new vhost opens");
    round_trip(&conn, "in-tenant-a").await;
    broker.shutdown().await;
}

/// A vhost added at runtime is stored with a data directory: after a restart it exists again,
/// with its durable queue.
#[tokio::test]
async fn a_vhost_added_at_runtime_survives_a_restart() {
    let dir = std::env::temp_dir().join(format!("dwellmq-vhost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = BrokerConfig {
        data_dir: Some(dir.clone()),
        ..BrokerConfig::ephemeral()
    };
    let (broker, addr) = start_http(config).await;
    assert_eq!(
        put(addr, "/api/vhosts/tenant-b", GUEST, json!({}))
            .await
            .status,
        201
    );
    let granted = put(
        addr,
        "/api/permissions/tenant-b/guest",
        GUEST,
        json!({"configure": ".*", "write": ".*", "read": ".*"}),
    )
    .await;
    assert_eq!(granted.status, 201, "{}", granted.text());
    let declared = put(
        addr,
        "/api/queues/tenant-b/jobs",
        GUEST,
        json!({"durable": true}),
    )
    .await;
    assert_eq!(declared.status, 201, "{}", declared.text());

    let broker = broker.restart().await.expect("restarts");
    assert_eq!(broker.http_addr(), Some(addr));
    // The permission granted in the runtime vhost came back with it.
    let kept = get(addr, "/api/permissions/tenant-b/guest", GUEST).await;
    assert_eq!(kept.status, 200, "{}", kept.text());
    assert_eq!(kept.json()["configure"], ".*");
    assert_eq!(get(addr, "/api/vhosts/tenant-b", GUEST).await.status, 200);
    let queue = get(addr, "/api/queues/tenant-b/jobs", GUEST).await;
    assert_eq!(queue.status, 200, "{}", queue.text());
    assert_eq!(queue.json()["durable"], true);
    broker.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
