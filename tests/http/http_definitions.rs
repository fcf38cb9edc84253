//! Definitions export and import: over HTTP and at start.

use crate::http_client::*;
use dwellmq::{Broker, BrokerConfig, UserConfig};
use serde_json::{json, Value};

/// A definitions file as RabbitMQ 3.13 exports it (users and permissions included).
fn rabbitmq_export() -> Value {
    json!({
        "rabbit_version": "3.13.7",
        "rabbitmq_version": "3.13.7",
        "product_name": "RabbitMQ",
        "product_version": "3.13.7",
        "users": [{"name": "guest", "password_hash": "BMfxN8drrYcIqXZMr+pWTpDT0nMcOagMduLX0bjr4jwud/pN",
                   "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["administrator"],
                   "limits": {}}],
        "vhosts": [{"name": "/", "limits": [], "metadata": {"description": "Default virtual host", "tags": []}}],
        "permissions": [{"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}],
        "topic_permissions": [],
        "parameters": [],
        "global_parameters": [{"name": "cluster_name", "value": "rabbit@host"}],
        "policies": [],
        "queues": [
            {"name": "jobs", "vhost": "/", "durable": true, "auto_delete": false,
             "arguments": {"x-max-priority": 5, "x-queue-type": "classic"}},
            {"name": "replies", "vhost": "/", "durable": false, "auto_delete": true, "arguments": {}}
        ],
        "exchanges": [
            {"name": "events", "vhost": "/", "type": "topic", "durable": true, "auto_delete": false,
             "internal": false, "arguments": {}},
            {"name": "later", "vhost": "/", "type": "x-delayed-message", "durable": true,
             "auto_delete": false, "internal": false, "arguments": {"x-delayed-type": "direct"}}
        ],
        "bindings": [
            {"source": "events", "vhost": "/", "destination": "jobs", "destination_type": "queue",
             "routing_key": "job.#", "arguments": {}},
            {"source": "later", "vhost": "/", "destination": "events", "destination_type": "exchange",
             "routing_key": "job.retry", "arguments": {}}
        ]
    })
}

fn topology(defs: &Value) -> (Value, Value, Value) {
    (
        defs["exchanges"].clone(),
        defs["queues"].clone(),
        defs["bindings"].clone(),
    )
}

#[tokio::test]
async fn a_rabbitmq_export_imports_and_exports_back_the_same_topology() {
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    let input = rabbitmq_export();
    let reply = post(addr, "/api/definitions", GUEST, input.clone()).await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    assert!(broker.queue_info("/", "jobs").is_some());
    let output = get(addr, "/api/definitions", GUEST).await.json();
    assert_eq!(topology(&output), topology(&input));
    assert_eq!(output["vhosts"][0]["name"], "/");
    assert_eq!(output["users"][0]["name"], "guest");
    assert_eq!(output["users"][0]["tags"], json!(["administrator"]));
    assert_eq!(output["permissions"], input["permissions"]);
    // Importing again changes nothing: equivalent objects are left alone.
    assert_eq!(
        post(addr, "/api/definitions", GUEST, input).await.status,
        204
    );
    assert_eq!(
        topology(&get(addr, "/api/definitions", GUEST).await.json()),
        topology(&output)
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn export_leaves_out_predeclared_exchanges_and_implicit_bindings() {
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    let defs = get(addr, "/api/definitions", GUEST).await.json();
    assert_eq!(topology(&defs), (json!([]), json!([]), json!([])));
    for key in [
        "topic_permissions",
        "parameters",
        "global_parameters",
        "policies",
    ] {
        assert_eq!(defs[key], json!([]), "{key}");
    }
    broker.shutdown().await;
}

#[tokio::test]
async fn per_vhost_definitions_carry_no_vhost_members() {
    let mut config = BrokerConfig::ephemeral();
    config.vhosts = vec!["staging".into()];
    let (broker, addr) = start_http(config).await;
    let vhost_defs = json!({
        "queues": [{"name": "q", "durable": true, "auto_delete": false, "arguments": {}}],
        "exchanges": [{"name": "x", "type": "fanout", "durable": true, "auto_delete": false,
                       "internal": false, "arguments": {}}],
        "bindings": [{"source": "x", "destination": "q", "destination_type": "queue",
                      "routing_key": "", "arguments": {}}]
    });
    let reply = post(addr, "/api/definitions/staging", GUEST, vhost_defs.clone()).await;
    assert_eq!(reply.status, 204, "{}", reply.text());
    assert!(broker.queue_info("staging", "q").is_some());
    assert!(broker.queue_info("/", "q").is_none());
    let out = get(addr, "/api/definitions/staging", GUEST).await.json();
    assert_eq!(topology(&out), topology(&vhost_defs));
    get(addr, "/api/definitions/nope", GUEST).await.error(404);
    broker.shutdown().await;
}

#[tokio::test]
async fn imports_that_cannot_apply_are_refused() {
    let (broker, addr) = start_http(BrokerConfig::ephemeral()).await;
    // An unknown vhost: refused before anything is declared.
    let mut defs = rabbitmq_export();
    defs["queues"][1]["vhost"] = "elsewhere".into();
    let reply = post(addr, "/api/definitions", GUEST, defs).await;
    assert!(reply
        .error(400)
        .contains("vhost 'elsewhere' does not exist"));
    assert!(broker.queue_info("/", "jobs").is_none());
    // Inequivalent to what exists.
    put(
        addr,
        "/api/queues/%2F/jobs",
        GUEST,
        json!({"durable": false}),
    )
    .await;
    let reply = post(addr, "/api/definitions", GUEST, rabbitmq_export()).await;
    assert!(reply
        .error(400)
        .contains("inequivalent arg 'durable' for queue 'jobs'"));
    // Not JSON; wrong shapes; not an administrator.
    raw(addr, "POST", "/api/definitions", GUEST, Some(b"["))
        .await
        .error(400);
    post(
        addr,
        "/api/definitions",
        GUEST,
        json!({"queues": {"name": "q"}}),
    )
    .await
    .error(400);
    let reply = post(
        addr,
        "/api/definitions",
        GUEST,
        json!({"bindings": [{"source": "amq.direct", "vhost": "/", "destination": "jobs",
                             "destination_type": "stream"}]}),
    )
    .await;
    assert!(reply.error(400).contains("destination_type"));
    broker.shutdown().await;
}

#[tokio::test]
async fn only_administrators_see_or_change_definitions() {
    let mut config = BrokerConfig::ephemeral();
    config.users.push(UserConfig {
        name: "mon".into(),
        password: "pw".into(),
        password_hash: None,
        vhosts: vec!["*".into()],
        loopback_only: false,
        tags: vec!["monitoring".into()],
    });
    let (broker, addr) = start_http(config).await;
    let mon = As::User("mon", "pw");
    assert_eq!(
        get(addr, "/api/definitions", mon).await.error(401),
        "Not administrator user"
    );
    post(addr, "/api/definitions", mon, rabbitmq_export())
        .await
        .error(401);
    assert!(broker.queue_info("/", "jobs").is_none());
    broker.shutdown().await;
}

#[tokio::test]
async fn a_definitions_file_is_imported_at_start() {
    let dir = std::env::temp_dir().join(format!("dwellmq-defs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.json");
    std::fs::write(&good, rabbitmq_export().to_string()).unwrap();
    let mut config = BrokerConfig::ephemeral();
    config.definitions = Some(good);
    let broker = Broker::start(config)
        .await
        .expect("starts with definitions");
    assert!(broker.queue_info("/", "jobs").is_some());
    assert!(broker.exchange_names("/").contains(&"later".to_string()));
    broker.shutdown().await;

    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"queues\": 3}").unwrap();
    let mut config = BrokerConfig::ephemeral();
    config.definitions = Some(bad);
    match Broker::start(config).await {
        Err(dwellmq::StartError::Definitions(text)) => {
            assert!(text.contains("not a definitions file"), "{text}")
        }
        Err(other) => panic!("expected a definitions error, got {other:?}"),
        Ok(_) => panic!("a bad definitions file must stop the start"),
    }
    let mut config = BrokerConfig::ephemeral();
    config.definitions = Some(dir.join("missing.json"));
    assert!(matches!(
        Broker::start(config).await,
        Err(dwellmq::StartError::Definitions(_))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
