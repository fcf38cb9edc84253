//! RabbitMQ's access model through a real client: each operation checked where
//! rabbit_channel checks it (configure / write / read), with RabbitMQ's 403 texts.

use crate::common::*;
use dwellmq::{Broker, BrokerConfig, BrokerHandle, PermissionConfig, UserConfig};
use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, ExchangeBindOptions, ExchangeDeclareOptions,
    ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
    QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};

/// base64(salt ++ sha256(salt ++ "guest")) for the salt 908DC60A: RabbitMQ's
/// `rabbit_password_hashing_sha256` form, computed apart from dwellmq.
const GUEST_HASH: &str = "kI3GCrswBLNZQzHJJ95QLoyfAVooYhnvf7jbqiW9BjOYUloe";

fn user(name: &str) -> UserConfig {
    UserConfig {
        name: name.into(),
        password: "pw".into(),
        ..UserConfig::default()
    }
}

/// guest (everything); alice: configure and read `^alice-`, write `^alice-` and the default
/// exchange; bob: write only `^alice-x$`, nothing else; svc: permissions in `staging` only;
/// hashed: a password given as RabbitMQ's hash.
async fn broker() -> BrokerHandle {
    let mut config = BrokerConfig::ephemeral();
    config.vhosts = vec!["staging".into()];
    config
        .users
        .extend([user("alice"), user("bob"), user("svc")]);
    config.users.push(UserConfig {
        password_hash: Some(GUEST_HASH.into()),
        vhosts: vec!["/".into()],
        ..user("hashed")
    });
    config.permissions = vec![
        PermissionConfig {
            user: "alice".into(),
            vhost: "/".into(),
            configure: "^alice-".into(),
            write: "^alice-|^amq\\.default$".into(),
            read: "^alice-".into(),
        },
        PermissionConfig {
            user: "bob".into(),
            vhost: "/".into(),
            configure: "".into(),
            write: "^alice-x$".into(),
            read: "".into(),
        },
        PermissionConfig::full("svc", "staging"),
    ];
    let broker = Broker::start(config).await.expect("broker starts");
    // What the refused users try to touch, declared by guest.
    let guest = connect(&broker).await;
    let ch = guest.create_channel().await.unwrap();
    declare_queue(&ch, "shared").await;
    declare_queue(&ch, "alice-q").await;
    for name in ["shared-x", "alice-x"] {
        ch.exchange_declare(
            name.into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    broker
}

async fn login(broker: &BrokerHandle, user: &str, password: &str) -> Connection {
    let port = broker.local_addr().port();
    connect_url(&format!("amqp://{user}:{password}@127.0.0.1:{port}/%2f"))
        .await
        .expect("logs in")
}

async fn channel_of(broker: &BrokerHandle, user: &str) -> (Connection, Channel) {
    let connection = login(broker, user, "pw").await;
    let ch = connection.create_channel().await.unwrap();
    (connection, ch)
}

fn refused(kind: &str, name: &str, user: &str) -> (u16, String) {
    (
        403,
        format!(
            "ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user '{user}'"
        ),
    )
}

async fn declare_exchange(ch: &Channel, name: &str) -> lapin::Result<()> {
    ch.exchange_declare(
        name.into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
}

#[tokio::test]
async fn declaring_and_deleting_need_configure() {
    let broker = broker().await;
    let (_c, ch) = channel_of(&broker, "alice").await;
    declare_queue(&ch, "alice-new").await;
    declare_exchange(&ch, "alice-y")
        .await
        .expect("configure matches");
    // A passive declare needs no permission.
    passive_declare(&ch, "shared")
        .await
        .expect("passive is free");
    ch.exchange_declare(
        "shared-x".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("passive exchange declare is free");
    ch.queue_delete("alice-new".into(), QueueDeleteOptions::default())
        .await
        .expect("configure allows delete");

    let err = declare_with(
        &ch,
        "other",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await;
    assert_eq!(channel_error(err), refused("queue", "other", "alice"));

    let (_c, ch) = channel_of(&broker, "alice").await;
    assert_eq!(
        channel_error(declare_exchange(&ch, "bob-x").await),
        refused("exchange", "bob-x", "alice")
    );
    let (_c, ch) = channel_of(&broker, "alice").await;
    let err = ch
        .queue_delete("shared".into(), QueueDeleteOptions::default())
        .await;
    assert_eq!(channel_error(err), refused("queue", "shared", "alice"));
    let (_c, ch) = channel_of(&broker, "alice").await;
    let err = ch
        .exchange_delete("shared-x".into(), ExchangeDeleteOptions::default())
        .await;
    assert_eq!(channel_error(err), refused("exchange", "shared-x", "alice"));
    assert!(broker.queue_names("/").contains(&"shared".to_string()));
    broker.shutdown().await;
}

#[tokio::test]
async fn server_named_queues_are_checked_too() {
    let broker = broker().await;
    let (_c, ch) = channel_of(&broker, "alice").await;
    let (code, text) = channel_error(
        declare_with(
            &ch,
            "",
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await,
    );
    assert_eq!(code, 403);
    assert!(
        text.starts_with("ACCESS_REFUSED - access to queue 'amq.gen-")
            && text.ends_with("' in vhost '/' refused for user 'alice'"),
        "{text}"
    );
    // guest may.
    let guest = connect(&broker).await;
    let ch = guest.create_channel().await.unwrap();
    let q = declare_with(
        &ch,
        "",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    assert!(q.name().as_str().starts_with("amq.gen-"));
    broker.shutdown().await;
}

#[tokio::test]
async fn publishing_needs_write_on_the_exchange() {
    let broker = broker().await;
    let (_c, ch) = channel_of(&broker, "alice").await;
    // The default exchange is checked as amq.default.
    publish(&ch, "", "alice-q", "one").await;
    publish(&ch, "alice-x", "k", "two").await;
    sync(&ch).await;
    assert_eq!(
        publish_error(&ch, "shared-x", "k", BasicProperties::default()).await,
        refused("exchange", "shared-x", "alice")
    );
    let (_c, ch) = channel_of(&broker, "bob").await;
    publish(&ch, "alice-x", "k", "from bob").await;
    assert_eq!(
        publish_error(&ch, "", "alice-q", BasicProperties::default()).await,
        refused("exchange", "amq.default", "bob")
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn consuming_getting_and_purging_need_read_on_the_queue() {
    let broker = broker().await;
    let (_c, ch) = channel_of(&broker, "alice").await;
    publish(&ch, "", "alice-q", "mine").await;
    let got = ch
        .basic_get("alice-q".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(got.delivery.data, b"mine");
    ch.queue_purge("alice-q".into(), QueuePurgeOptions::default())
        .await
        .unwrap();
    consume_no_ack(&ch, "alice-q").await;

    let (_c, ch) = channel_of(&broker, "alice").await;
    let err = ch
        .basic_consume(
            "shared".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_eq!(channel_error(err), refused("queue", "shared", "alice"));
    let (_c, ch) = channel_of(&broker, "alice").await;
    let err = ch
        .basic_get("shared".into(), BasicGetOptions::default())
        .await;
    assert_eq!(channel_error(err), refused("queue", "shared", "alice"));
    let (_c, ch) = channel_of(&broker, "alice").await;
    let err = ch
        .queue_purge("shared".into(), QueuePurgeOptions::default())
        .await;
    assert_eq!(channel_error(err), refused("queue", "shared", "alice"));
    broker.shutdown().await;
}

#[tokio::test]
async fn binding_needs_write_on_the_destination_and_read_on_the_source() {
    let broker = broker().await;
    let (_c, ch) = channel_of(&broker, "alice").await;
    let bind = |ch: &Channel, queue: &str, exchange: &str| {
        let ch = ch.clone();
        let (queue, exchange) = (queue.to_string(), exchange.to_string());
        async move {
            ch.queue_bind(
                queue.as_str().into(),
                exchange.as_str().into(),
                "k".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
        }
    };
    bind(&ch, "alice-q", "alice-x").await.expect("both allowed");
    ch.queue_unbind(
        "alice-q".into(),
        "alice-x".into(),
        "k".into(),
        FieldTable::default(),
    )
    .await
    .expect("unbind allowed");
    // Read on the source exchange is missing.
    assert_eq!(
        channel_error(bind(&ch, "alice-q", "shared-x").await),
        refused("exchange", "shared-x", "alice")
    );
    // Write on the destination queue is missing (checked first).
    let (_c, ch) = channel_of(&broker, "alice").await;
    assert_eq!(
        channel_error(bind(&ch, "shared", "shared-x").await),
        refused("queue", "shared", "alice")
    );
    let (_c, ch) = channel_of(&broker, "alice").await;
    let err = ch
        .queue_unbind(
            "shared".into(),
            "alice-x".into(),
            "k".into(),
            FieldTable::default(),
        )
        .await;
    assert_eq!(channel_error(err), refused("queue", "shared", "alice"));

    // Exchange to exchange: write on the destination, read on the source.
    let (_c, ch) = channel_of(&broker, "alice").await;
    let e2e = |destination: &str, source: &str| {
        let ch = ch.clone();
        let (destination, source) = (destination.to_string(), source.to_string());
        async move {
            ch.exchange_bind(
                destination.as_str().into(),
                source.as_str().into(),
                "k".into(),
                ExchangeBindOptions::default(),
                FieldTable::default(),
            )
            .await
        }
    };
    declare_exchange(&ch, "alice-y").await.unwrap();
    e2e("alice-y", "alice-x").await.expect("allowed");
    assert_eq!(
        channel_error(e2e("shared-x", "alice-x").await),
        refused("exchange", "shared-x", "alice")
    );
    let (_c, ch) = channel_of(&broker, "alice").await;
    let err = ch
        .exchange_unbind(
            "alice-y".into(),
            "shared-x".into(),
            "k".into(),
            lapin::options::ExchangeUnbindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_eq!(channel_error(err), refused("exchange", "shared-x", "alice"));
    broker.shutdown().await;
}

#[tokio::test]
async fn direct_reply_to_needs_no_permission() {
    let broker = broker().await;
    // bob may read nothing, yet may consume from the pseudo-queue, as in RabbitMQ.
    let (_c, ch) = channel_of(&broker, "bob").await;
    ch.basic_consume(
        "amq.rabbitmq.reply-to".into(),
        "".into(),
        BasicConsumeOptions {
            no_ack: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("direct reply-to is exempt");
    broker.shutdown().await;
}

#[tokio::test]
async fn vhost_access_and_hashed_passwords() {
    let broker = broker().await;
    let port = broker.local_addr().port();
    let err = connect_url(&format!("amqp://svc:pw@127.0.0.1:{port}/%2f"))
        .await
        .expect_err("svc has no permissions in /");
    assert_eq!(
        amqp_error(&err),
        (
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'svc'".into()
        )
    );
    connect_url(&format!("amqp://svc:pw@127.0.0.1:{port}/staging"))
        .await
        .expect("svc may open staging");
    // A user whose password was given as RabbitMQ's hash logs in with the password.
    round_trip(&login(&broker, "hashed", "guest").await, "hashed-q").await;
    let err = connect_url(&format!("amqp://hashed:Guest@127.0.0.1:{port}/%2f"))
        .await
        .expect_err("wrong password");
    assert_eq!(
        amqp_error(&err),
        (
            403,
            "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. \
             For details see the broker logfile."
                .into()
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn a_bad_pattern_or_an_unknown_user_stops_the_start() {
    let mut config = BrokerConfig::ephemeral();
    config.permissions = vec![PermissionConfig {
        read: "(".into(),
        ..PermissionConfig::full("guest", "/")
    }];
    let err = Broker::start(config).await.err().expect("refused");
    assert!(
        err.to_string().contains("invalid read pattern '('"),
        "{err}"
    );
    let mut config = BrokerConfig::ephemeral();
    config.permissions = vec![PermissionConfig::full("nobody", "/")];
    let err = Broker::start(config).await.err().expect("refused");
    assert!(err.to_string().contains("'nobody'"), "{err}");
}
