//! Server-generated names through a real client: `amq.gen-` queues, `amq.ctag-` consumer tags
//! and direct reply-to addresses are random (unguessable, RabbitMQ's form), and reproducible
//! when the broker is given `name_seed`.

use std::collections::HashSet;

use crate::common::*;
use dwellmq::BrokerConfig;
use lapin::options::*;
use lapin::types::FieldTable;
use lapin::BasicProperties;

const REPLY_TO: &str = "amq.rabbitmq.reply-to";

/// The names one scripted session gets: two server-named queues, two generated consumer tags
/// and a direct reply-to address.
async fn names_of_a_session(config: BrokerConfig) -> Vec<String> {
    let t = start_with(config).await;
    let ch = t.channel().await;
    let mut names = Vec::new();
    for _ in 0..2 {
        let q = ch
            .queue_declare(
                "".into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        names.push(q.name().to_string());
    }
    for _ in 0..2 {
        let consumer = ch
            .basic_consume(
                names[0].as_str().into(),
                "".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        names.push(consumer.tag().to_string());
    }
    // The reply address shows in the request as the server delivers it.
    let client = t.channel().await;
    let _replies = client
        .basic_consume(
            REPLY_TO.into(),
            "replies".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    declare_queue(&ch, "rpc").await;
    let mut requests = consume_no_ack(&ch, "rpc").await;
    client
        .basic_publish(
            "".into(),
            "rpc".into(),
            BasicPublishOptions::default(),
            b"ping",
            BasicProperties::default().with_reply_to(REPLY_TO.into()),
        )
        .await
        .unwrap();
    let request = next_delivery(&mut requests).await;
    names.push(request.properties.reply_to().clone().unwrap().to_string());
    drop(t); // shuts the broker down
    names
}

/// `prefix` and 22 URL-safe base64 characters encoding 128 bits, as RabbitMQ's names.
fn assert_rabbit_form(name: &str, prefix: &str) {
    let random = name
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{name} lacks {prefix}"));
    assert_eq!(random.len(), 22, "{name}");
    assert!(
        random
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'),
        "{name}"
    );
    // The 22nd character carries the last 2 of the 128 bits, then padding zeros.
    assert!(random.ends_with(['A', 'Q', 'g', 'w']), "{name}");
}

fn assert_session_form(names: &[String]) {
    assert_rabbit_form(&names[0], "amq.gen-");
    assert_rabbit_form(&names[1], "amq.gen-");
    assert_rabbit_form(&names[2], "amq.ctag-");
    assert_rabbit_form(&names[3], "amq.ctag-");
    assert_rabbit_form(&names[4], "amq.rabbitmq.reply-to.");
}

#[tokio::test]
async fn generated_names_are_random_and_in_rabbitmqs_form() {
    let first = names_of_a_session(BrokerConfig::ephemeral()).await;
    let second = names_of_a_session(BrokerConfig::ephemeral()).await;
    assert_session_form(&first);
    assert_session_form(&second);
    // Two brokers running the same session share no name: nothing is derived from a counter
    // or the start time.
    let all: HashSet<&String> = first.iter().chain(&second).collect();
    assert_eq!(all.len(), 10, "{first:?} {second:?}");
}

#[tokio::test]
async fn a_name_seed_reproduces_every_generated_name() {
    let seeded = || BrokerConfig::ephemeral().with_name_seed(20_260_101);
    let first = names_of_a_session(seeded()).await;
    assert_session_form(&first);
    assert_eq!(names_of_a_session(seeded()).await, first);
    let other = names_of_a_session(BrokerConfig::ephemeral().with_name_seed(7)).await;
    assert!(
        other.iter().all(|name| !first.contains(name)),
        "{first:?} {other:?}"
    );
}
