//! Policies through a real client: applied to existing queues at once, combined with queue
//! arguments as RabbitMQ does, and RabbitMQ 4.3's delayed-retry example.

use std::time::Duration;

use crate::common::*;
use dwellmq::{ApplyTo, BrokerConfig, Policy, PolicyConfig, PolicyDefinition, PolicyValue};
use lapin::options::*;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};

fn definition(entries: &[(&'static str, PolicyValue)]) -> PolicyDefinition {
    PolicyDefinition::from_entries(entries.iter().cloned()).expect("valid definition")
}

fn policy(name: &str, pattern: &str, apply_to: ApplyTo, d: PolicyDefinition) -> Policy {
    Policy {
        name: name.into(),
        pattern: pattern.into(),
        apply_to,
        priority: 0,
        definition: d,
    }
}

fn int(n: i64) -> PolicyValue {
    PolicyValue::Integer(n)
}

fn text(s: &str) -> PolicyValue {
    PolicyValue::Text(s.into())
}

async fn publish(ch: &Channel, exchange: &str, key: &str, body: &str) {
    ch.basic_publish(
        exchange.into(),
        key.into(),
        BasicPublishOptions::default(),
        body.as_bytes(),
        BasicProperties::default(),
    )
    .await
    .expect("published");
    sync(ch).await;
}

async fn ready(ch: &Channel, queue: &str) -> u32 {
    passive_declare(ch, queue).await.unwrap().message_count()
}

/// The example from RabbitMQ 4.3's documentation, configured as a broker would be at start.
#[tokio::test]
async fn rabbitmq_4_3_delayed_retry_policy_example() {
    let config = BrokerConfig {
        policies: vec![PolicyConfig {
            vhost: "/".into(),
            policy: policy(
                "delayed-retry",
                "^orders\\.",
                ApplyTo::QuorumQueues,
                definition(&[
                    ("delivery-limit", int(20)),
                    ("delayed-retry-type", text("failed")),
                    ("delayed-retry-min", int(30_000)),
                    ("delayed-retry-max", int(120_000)),
                ]),
            ),
        }],
        ..BrokerConfig::ephemeral().with_manual_clock(T0_MS)
    };
    let t = start_with(config).await;
    let ch = t.channel().await;
    let mut quorum = FieldTable::default();
    quorum.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    for queue in ["orders.created", "billing"] {
        ch.queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            quorum.clone(),
        )
        .await
        .unwrap();
        publish(&ch, "", queue, "m").await;
    }
    let mut waits = Vec::new();
    for _ in 0..20 {
        let m = ch
            .basic_get("orders.created".into(), BasicGetOptions::default())
            .await
            .unwrap()
            .expect("ready again");
        m.delivery
            .reject(BasicRejectOptions { requeue: true })
            .await
            .unwrap();
        sync(&ch).await;
        let info = t.broker.queue_info("/", "orders.created").unwrap();
        let at = info.next_retry_at.expect("waiting for a retry");
        waits.push((at - t.broker.now_ms()) / 1000);
        t.broker.set_now(at);
    }
    assert_eq!(&waits[..5], [30, 60, 90, 120, 120]);
    assert!(waits[5..].iter().all(|&w| w == 120));
    // The 21st failure exceeds the delivery limit: dropped (no dead-letter exchange).
    let last = ch
        .basic_get("orders.created".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .unwrap();
    last.delivery
        .reject(BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    sync(&ch).await;
    let info = t.broker.queue_info("/", "orders.created").unwrap();
    assert_eq!((info.messages, info.retrying), (0, 0));
    // A queue the pattern does not match redelivers at once.
    let other = ch
        .basic_get("billing".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .unwrap();
    other
        .delivery
        .reject(BasicRejectOptions { requeue: true })
        .await
        .unwrap();
    assert_eq!(ready(&ch, "billing").await, 1);
}

#[tokio::test]
async fn a_policy_applies_to_existing_queues_at_once_and_stops_when_cleared() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "logs.app").await;
    for body in ["a", "b", "c"] {
        publish(&ch, "", "logs.app", body).await;
    }
    t.broker
        .set_policy(
            "/",
            policy(
                "cap",
                "^logs\\.",
                ApplyTo::Queues,
                definition(&[("max-length", int(1)), ("message-ttl", int(1_000))]),
            ),
        )
        .unwrap();
    assert_eq!(ready(&ch, "logs.app").await, 1);
    publish(&ch, "", "logs.app", "d").await;
    t.broker.advance(Duration::from_millis(1_000));
    assert_eq!(ready(&ch, "logs.app").await, 0);
    assert!(t.broker.clear_policy("/", "cap"));
    for body in ["e", "f"] {
        publish(&ch, "", "logs.app", body).await;
    }
    t.broker.advance(Duration::from_secs(10));
    assert_eq!(ready(&ch, "logs.app").await, 2);
    assert!(t.broker.policies("/").is_empty());
}

#[tokio::test]
async fn arguments_win_over_a_policy_where_rabbitmq_says_so() {
    let t = start_manual().await;
    let ch = t.channel().await;
    for queue in ["from-argument", "from-policy"] {
        declare_queue(&ch, queue).await;
    }
    t.broker
        .set_policy(
            "/",
            policy(
                "dlx",
                "^work$",
                ApplyTo::All,
                definition(&[
                    ("dead-letter-exchange", text("")),
                    ("dead-letter-routing-key", text("from-policy")),
                    ("message-ttl", int(500)),
                ]),
            ),
        )
        .unwrap();
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    args.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString("from-argument".into()),
    );
    // The argument's TTL is higher: the lower one, the policy's, applies.
    args.insert("x-message-ttl".into(), AMQPValue::LongInt(60_000));
    ch.queue_declare("work".into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    publish(&ch, "", "work", "m").await;
    t.broker.advance(Duration::from_millis(500));
    assert_eq!(ready(&ch, "from-argument").await, 1);
    assert_eq!(ready(&ch, "from-policy").await, 0);
}

#[tokio::test]
async fn an_alternate_exchange_from_a_policy() {
    let t = start_manual().await;
    let ch = t.channel().await;
    ch.exchange_declare(
        "events".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    declare_queue(&ch, "unrouted").await;
    ch.queue_bind(
        "unrouted".into(),
        "amq.fanout".into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    t.broker
        .set_policy(
            "/",
            policy(
                "ae",
                "^events$",
                ApplyTo::Exchanges,
                definition(&[("alternate-exchange", text("amq.fanout"))]),
            ),
        )
        .unwrap();
    publish(&ch, "events", "nobody", "lost?").await;
    assert_eq!(ready(&ch, "unrouted").await, 1);
}

#[tokio::test]
async fn invalid_policies_are_refused_with_a_reason() {
    let t = start_manual().await;
    let bad_pattern = policy("p", "(", ApplyTo::All, PolicyDefinition::default());
    let err = t.broker.set_policy("/", bad_pattern).unwrap_err();
    assert!(err
        .to_string()
        .starts_with("Validation failed: '(' is not a valid regular expression"));
    let err = t
        .broker
        .set_policy(
            "nope",
            policy("p", ".*", ApplyTo::All, PolicyDefinition::default()),
        )
        .unwrap_err();
    assert_eq!(err.to_string(), "Validation failed: no vhost 'nope'");
    let err = PolicyDefinition::from_entries([("delayed-retry-min", int(0))]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Validation failed: 0 is not a valid delayed-retry-min"
    );
}

/// `max-length` from a policy named `name` at `priority` for queues `^tie\.`.
fn length_cap(name: &str, priority: i64, max_length: i64) -> Policy {
    Policy {
        priority,
        ..policy(
            name,
            "^tie\\.",
            ApplyTo::Queues,
            definition(&[("max-length", int(max_length))]),
        )
    }
}

/// Publishes three more messages to `queue` and returns how many the applying cap keeps.
async fn kept_of_three(ch: &Channel, queue: &str) -> u32 {
    for body in ["1", "2", "3"] {
        publish(ch, "", queue, body).await;
    }
    ready(ch, queue).await
}

#[tokio::test]
async fn equal_priorities_go_to_the_policy_first_by_name_whatever_the_order_they_were_set_in() {
    let t = start_manual().await;
    let ch = t.channel().await;
    declare_queue(&ch, "tie.q").await;
    // Set in reverse name order: the later one wins the tie by its name, not by being later.
    t.broker
        .set_policy("/", length_cap("b-keeps-two", 5, 2))
        .unwrap();
    t.broker
        .set_policy("/", length_cap("a-keeps-one", 5, 1))
        .unwrap();
    assert_eq!(kept_of_three(&ch, "tie.q").await, 1);
    // Redefining the winner does not move it behind the other (it is still first by name).
    t.broker
        .set_policy("/", length_cap("a-keeps-one", 5, 1))
        .unwrap();
    assert_eq!(kept_of_three(&ch, "tie.q").await, 1);
    // Priority decides before the name does.
    t.broker
        .set_policy("/", length_cap("a-keeps-one", 4, 1))
        .unwrap();
    assert_eq!(kept_of_three(&ch, "tie.q").await, 2);
    // A tie set later, last by name, does not take over either.
    t.broker
        .set_policy("/", length_cap("c-keeps-three", 5, 3))
        .unwrap();
    assert_eq!(kept_of_three(&ch, "tie.q").await, 2);
    // With the winner gone, the other policy of the highest priority applies.
    assert!(t.broker.clear_policy("/", "b-keeps-two"));
    assert_eq!(kept_of_three(&ch, "tie.q").await, 3);
    // A queue declared after the policies gets the same answer.
    declare_queue(&ch, "tie.later").await;
    assert_eq!(kept_of_three(&ch, "tie.later").await, 3);
}
