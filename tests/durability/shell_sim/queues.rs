//! The simulation's queues and exchanges: what each one is (its TTL and what expiry does
//! there, for the model), and declaring and binding them.

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::ExchangeKind;

use super::model::OnExpiry;
use super::{Sim, DLX3, LATER, SCRATCH};
use crate::common::{declare_delayed, long_str, table};

/// Queues the simulation uses:
/// - `q0` (classic, bound to the delayed exchange);
/// - `q1` (quorum, bound to it too; a message whose delivery failed more than 3 times, as at
///   a crash with it unacked, is dead-lettered into `dead`);
/// - `q2` (classic, dead-letters rejected and expired messages into `dead`; messages expire
///   5 s after they enter it; at 30 messages it refuses publishes);
/// - `dead`;
/// - `q3` (quorum, dead-letters rejected and expired messages at least once through the
///   exchange `dlx3` into `dead3`, which is sometimes unbound and refuses publishes at 4
///   messages: what it does not take stays kept in `q3`; messages expire 8 s after they enter
///   `q3`, which refuses publishes at 25, kept ones included);
/// - `dead3`;
/// - `retry` (classic, the retry-queue pattern: messages expire 3 s after they enter it into
///   `retried`; nobody consumes from it, and bursts make it far longer than its window, so
///   most of what expires there is paged out or spilled);
/// - `retried`.
pub const QUEUES: [&str; 8] = ["q0", "q1", "q2", "dead", "q3", "dead3", "retry", "retried"];
/// The queues a client takes from (every one but `retry`, which nobody consumes).
pub const CONSUMED: [&str; 7] = ["q0", "q1", "q2", "dead", "q3", "dead3", "retried"];
/// The queues a step may delete and declare again (not `q3`, whose deletion would take what
/// it keeps with it, nor its target, nor `retry`).
pub const RENEWABLE: [&str; 5] = ["q0", "q1", "q2", "dead", "retried"];
/// The classic queues (all durable): they page beyond their window, and, memory being
/// always under pressure, spill their transient messages; a restart loses those.
pub const PAGING: [&str; 6] = ["q0", "q2", "dead", "dead3", "retry", "retried"];

/// What the model needs of a queue.
pub struct QueueSpec {
    /// `x-message-ttl`.
    pub ttl_ms: Option<u64>,
    /// What a message's expiry does there.
    pub on_expiry: OnExpiry,
}

pub fn spec(queue: &str) -> QueueSpec {
    let (ttl_ms, on_expiry) = match queue {
        "q2" => (Some(Q2_TTL_MS), OnExpiry::DeadLetter("dead".into())),
        "q3" => (Some(Q3_TTL_MS), OnExpiry::AtLeastOnce),
        "retry" => (Some(RETRY_TTL_MS), OnExpiry::DeadLetter("retried".into())),
        _ => (None, OnExpiry::Drop),
    };
    QueueSpec { ttl_ms, on_expiry }
}

const Q2_TTL_MS: u64 = 5_000;
const Q3_TTL_MS: u64 = 8_000;
pub const RETRY_TTL_MS: u64 = 3_000;

fn arguments(queue: &str) -> FieldTable {
    let ttl = |ms: u64| ("x-message-ttl", AMQPValue::LongInt(ms as i32));
    match queue {
        "q1" => table(&[
            ("x-queue-type", long_str("quorum")),
            ("x-delivery-limit", AMQPValue::LongInt(3)),
            ("x-dead-letter-exchange", long_str("")),
            ("x-dead-letter-routing-key", long_str("dead")),
        ]),
        "q3" => table(&[
            ("x-queue-type", long_str("quorum")),
            ("x-dead-letter-exchange", long_str(DLX3)),
            ("x-dead-letter-routing-key", long_str("q3")),
            ("x-dead-letter-strategy", long_str("at-least-once")),
            ("x-overflow", long_str("reject-publish")),
            ttl(Q3_TTL_MS),
            ("x-max-length", AMQPValue::LongInt(25)),
        ]),
        "dead3" => table(&[
            ("x-max-length", AMQPValue::LongInt(4)),
            ("x-overflow", long_str("reject-publish")),
        ]),
        "q2" => table(&[
            ("x-dead-letter-exchange", long_str("")),
            ("x-dead-letter-routing-key", long_str("dead")),
            ttl(Q2_TTL_MS),
            ("x-max-length", AMQPValue::LongInt(30)),
            ("x-overflow", long_str("reject-publish")),
        ]),
        "retry" => table(&[
            ("x-dead-letter-exchange", long_str("")),
            ("x-dead-letter-routing-key", long_str("retried")),
            ttl(RETRY_TTL_MS),
        ]),
        _ => FieldTable::default(),
    }
}

impl Sim {
    /// Declares every queue and the delayed exchange (passively after a restart: a definition
    /// that did not survive fails instead of being created again), and binds them when new.
    pub(super) async fn declare_all(&mut self, passive: bool) {
        for queue in QUEUES.iter().chain([&SCRATCH]) {
            self.declare_queue(queue, passive).await;
        }
        self.declare_later(passive).await;
        self.declare_dlx3(passive).await;
        if !passive {
            self.bind("q0").await;
            self.bind("q1").await;
            self.bind_dead3(true).await;
        }
    }

    async fn declare_dlx3(&mut self, passive: bool) {
        let options = ExchangeDeclareOptions {
            passive,
            durable: true,
            ..Default::default()
        };
        if let Err(e) = self
            .ch()
            .exchange_declare(
                DLX3.into(),
                ExchangeKind::Direct,
                options,
                FieldTable::default(),
            )
            .await
        {
            self.fail(&format!(
                "declaring {DLX3} (passive: {passive}) failed: {e}"
            ));
        }
    }

    pub(super) async fn declare_queue(&mut self, queue: &str, passive: bool) {
        let options = QueueDeclareOptions {
            passive,
            durable: true,
            ..Default::default()
        };
        if let Err(e) = self
            .ch()
            .queue_declare(queue.into(), options, arguments(queue))
            .await
        {
            self.fail(&format!(
                "declaring queue {queue} (passive: {passive}) failed: {e}"
            ));
        }
    }

    pub(super) async fn declare_later(&mut self, passive: bool) {
        if passive {
            let options = ExchangeDeclareOptions {
                passive: true,
                durable: true,
                ..Default::default()
            };
            let kind = ExchangeKind::Custom("x-delayed-message".into());
            let args = table(&[("x-delayed-type", long_str("topic"))]);
            if let Err(e) = self
                .ch()
                .exchange_declare(LATER.into(), kind, options, args)
                .await
            {
                self.fail(&format!("the delayed exchange did not survive: {e}"));
            }
        } else {
            declare_delayed(self.ch(), LATER, "topic", true).await;
        }
    }

    pub(super) async fn bind(&mut self, queue: &str) {
        let pattern = format!("{queue}.#");
        if let Err(e) = self
            .ch()
            .queue_bind(
                queue.into(),
                LATER.into(),
                pattern.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
        {
            self.fail(&format!("binding {queue} failed: {e}"));
        }
    }
}
