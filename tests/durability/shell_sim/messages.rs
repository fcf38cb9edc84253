//! The simulation's message steps: publishes with confirms, gets with ack, requeue or
//! reject, clock advances, cancels, purges, deletes and redeclares.

use std::time::Duration;

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions,
    ExchangeDeleteOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::AMQPValue;
use lapin::{BasicProperties, PublisherConfirm};

use super::model::Place;
use super::{bounded, held_id, id_of, persistent, Sim, LATER, QUEUES, RENEWABLE};
use crate::common::table;

impl Sim {
    /// Sends one publish; the model hears of it as unconfirmed until its confirm comes.
    pub(super) async fn send(
        &mut self,
        exchange: &str,
        key: &str,
        id: u64,
        properties: BasicProperties,
    ) -> PublisherConfirm {
        self.model.unconfirmed(id);
        let body = id.to_string();
        match self
            .ch()
            .basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                properties,
            )
            .await
        {
            Ok(confirm) => confirm,
            Err(e) => self.fail(&format!("publishing {id} failed: {e}")),
        }
    }

    /// Waits for confirms; acked ones are confirmed in `places`. Returns (acked, nacked).
    pub(super) async fn settle_confirms(
        &mut self,
        confirms: Vec<(u64, Vec<Place>, PublisherConfirm)>,
    ) -> (usize, usize) {
        let (mut acked, mut nacked) = (0, 0);
        for (id, places, confirm) in confirms {
            match bounded("a confirm", confirm).await {
                Ok(c) if c.is_ack() => {
                    self.model.confirmed(id, places);
                    acked += 1;
                }
                Ok(_) => nacked += 1,
                Err(e) => self.fail(&format!("the confirm of {id} failed: {e}")),
            }
        }
        self.report.confirmed += acked as u64;
        self.report.nacked += nacked as u64;
        (acked, nacked)
    }

    /// Publishes 1-8 messages straight to a queue, a third of them transient.
    pub(super) async fn publish_batch(&mut self) -> String {
        let queue = self.rng.pick(&QUEUES);
        let n = 1 + self.rng.below(8);
        let mut confirms = Vec::new();
        for _ in 0..n {
            let id = self.next_id();
            // Transient ones to the quorum queue (which keeps them all the same) and to the
            // classic queues (which spill them under memory pressure; a restart loses them).
            let classic = matches!(queue, "q0" | "q2" | "dead");
            let transient = (queue == "q1" || classic) && self.rng.below(3) == 0;
            if transient {
                self.log.push(format!("  ({id} transient)"));
                if classic {
                    self.transient.push(id);
                }
            }
            let properties = if transient {
                BasicProperties::default()
            } else {
                persistent()
            };
            let confirm = self.send("", queue, id, properties).await;
            confirms.push((id, Place::Queue(queue.into()).reachable(), confirm));
        }
        let first = self.next_id + 1 - n;
        let (acked, nacked) = self.settle_confirms(confirms).await;
        format!(
            "publish {first}..={} to {queue}: {acked} acked, {nacked} nacked",
            self.next_id
        )
    }

    /// Publishes 1-4 messages held 1 ms to 4 s (some beyond the scheduler's horizon).
    pub(super) async fn publish_delayed(&mut self) -> String {
        let n = 1 + self.rng.below(4);
        let mut confirms = Vec::new();
        for _ in 0..n {
            let id = self.next_id();
            let queue = self.rng.pick(&["q0", "q1"]);
            let delay = 1 + self.rng.below(4_000) as i32;
            let properties =
                persistent().with_headers(table(&[("x-delay", AMQPValue::LongInt(delay))]));
            let key = format!("{queue}.{id}");
            let confirm = self.send(LATER, &key, id, properties).await;
            let places = Place::Held(queue.into()).reachable();
            confirms.push((id, places, confirm));
        }
        let (acked, nacked) = self.settle_confirms(confirms).await;
        format!("hold {n} until up to 4 s later: {acked} acked, {nacked} nacked")
    }

    /// Gets one message (manual ack) from `queue`.
    /// Gets one message (manual ack) from `queue`: its id and delivery tag. A quorum queue's
    /// `x-acquired-count` must count every return the broker committed.
    pub(super) async fn get(&mut self, queue: &str) -> Option<(u64, u64)> {
        let got = bounded(
            "basic.get",
            self.ch()
                .basic_get(queue.into(), BasicGetOptions { no_ack: false }),
        )
        .await;
        let m = match got {
            Ok(m) => m?,
            Err(e) => self.fail(&format!("basic.get on {queue} failed: {e}")),
        };
        let id = id_of(&m.delivery.data);
        if queue == "q1" {
            let count = m
                .delivery
                .properties
                .headers()
                .as_ref()
                .and_then(|h| h.inner().get("x-acquired-count").cloned())
                .and_then(|v| match v {
                    AMQPValue::LongLongInt(n) => u64::try_from(n).ok(),
                    AMQPValue::LongInt(n) => u64::try_from(n).ok(),
                    AMQPValue::ShortInt(n) => u64::try_from(n).ok(),
                    AMQPValue::ShortShortInt(n) => u64::try_from(n).ok(),
                    AMQPValue::LongUInt(n) => Some(n.into()),
                    _ => None,
                })
                .unwrap_or(0);
            let returned = self.model.returns_committed(id);
            if count < returned {
                self.fail(&format!(
                    "message {id} came with x-acquired-count {count} after {returned} committed returns"
                ));
            }
        }
        Some((id, m.delivery.delivery_tag))
    }

    /// A round trip on the channel: what was sent before it (an ack, nack or reject, which
    /// have no reply) has been handled.
    pub(super) async fn round_trip(&mut self, queue: &str) {
        self.declare_queue(queue, true).await;
    }

    pub(super) async fn get_and_ack(&mut self) -> String {
        let queue = self.rng.pick(&QUEUES);
        let Some((id, tag)) = self.get(queue).await else {
            return format!("get {queue}: empty");
        };
        if let Err(e) = self.ch().basic_ack(tag, BasicAckOptions::default()).await {
            self.fail(&format!("ack failed: {e}"));
        }
        self.round_trip(queue).await;
        self.model.removed(id);
        format!("get {id} from {queue} and ack")
    }

    /// Requeues one (not on the quorum queue, whose delivery limit would drop it in the end).
    pub(super) async fn get_and_requeue(&mut self) -> String {
        let queue = self.rng.pick(&["q0", "q1", "q2", "dead"]);
        let Some((id, tag)) = self.get(queue).await else {
            return format!("get {queue}: empty");
        };
        let options = BasicNackOptions {
            requeue: true,
            multiple: false,
        };
        if queue == "q1" {
            // A nack returns it without failing it: `x-acquired-count` counts it, the delivery
            // limit (failed deliveries) does not.
            self.model.returned(id);
        }
        if let Err(e) = self.ch().basic_nack(tag, options).await {
            self.fail(&format!("nack failed: {e}"));
        }
        self.round_trip(queue).await;
        format!("get {id} from {queue} and requeue")
    }

    pub(super) async fn reject_to_dead(&mut self) -> String {
        let Some((id, tag)) = self.get("q2").await else {
            return "get q2: empty".into();
        };
        self.model.may_move(id, Place::Queue("dead".into()));
        if let Err(e) = self
            .ch()
            .basic_reject(tag, BasicRejectOptions { requeue: false })
            .await
        {
            self.fail(&format!("reject failed: {e}"));
        }
        self.round_trip("dead").await;
        format!("get {id} from q2 and reject it into dead")
    }

    pub(super) fn advance(&mut self) -> String {
        let by = self.rng.below(6_000);
        let released = self.broker().advance(Duration::from_millis(by));
        let (expired, _) = self.broker().death_counts(dwellmq::DeathReason::Expired);
        self.report.expired += expired;
        format!("advance {by} ms: {released} released, {expired} expired since start")
    }

    pub(super) fn cancel_one(&mut self) -> String {
        let held = self.broker().delayed_messages("/", LATER, 10_000);
        if held.is_empty() {
            return "cancel: nothing held".into();
        }
        let info = &held[self.rng.below(held.len() as u64) as usize];
        let id = held_id(&info.routing_key).0;
        if self.broker().cancel_delayed(info.id) {
            self.model.removed(id);
            format!("cancel held {id}")
        } else {
            format!("cancel held {id}: already gone")
        }
    }

    /// Ids ready in `queue` now.
    pub(super) fn ready_in(&self, queue: &str) -> Vec<u64> {
        self.broker()
            .peek_messages("/", queue, usize::MAX)
            .iter()
            .map(|m| id_of(&m.body))
            .collect()
    }

    pub(super) async fn purge_queue(&mut self) -> String {
        let queue = self.rng.pick(&QUEUES);
        let ids = self.ready_in(queue);
        let purged = match self
            .ch()
            .queue_purge(queue.into(), QueuePurgeOptions::default())
            .await
        {
            Ok(n) => n,
            Err(e) => self.fail(&format!("purging {queue} failed: {e}")),
        };
        if purged as usize != ids.len() {
            self.fail(&format!(
                "purge of {queue} said {purged}, {} were ready",
                ids.len()
            ));
        }
        for id in &ids {
            self.model.removed(*id);
        }
        format!("purge {queue}: {purged}")
    }

    pub(super) async fn delete_and_redeclare_queue(&mut self) -> String {
        let queue = self.rng.pick(&RENEWABLE);
        let ids = self.ready_in(queue);
        let deleted = match self
            .ch()
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await
        {
            Ok(n) => n,
            Err(e) => self.fail(&format!("deleting {queue} failed: {e}")),
        };
        if deleted as usize != ids.len() {
            self.fail(&format!(
                "delete of {queue} said {deleted}, {} were ready",
                ids.len()
            ));
        }
        for id in &ids {
            self.model.removed(*id);
        }
        if queue == "q2" {
            self.definitions.unbind_all();
        }
        self.declare_queue(queue, false).await;
        if queue == "q0" || queue == "q1" {
            self.bind(queue).await;
        }
        format!("delete {queue} ({deleted}) and declare it again")
    }

    pub(super) fn held_ids(&self) -> Vec<u64> {
        self.broker()
            .delayed_messages("/", LATER, usize::MAX)
            .iter()
            .map(|info| held_id(&info.routing_key).0)
            .collect()
    }

    pub(super) fn purge_later(&mut self) -> String {
        let ids = self.held_ids();
        let purged = self.broker().purge_delayed("/", LATER);
        if purged != ids.len() {
            self.fail(&format!(
                "the delayed purge said {purged}, {} were held",
                ids.len()
            ));
        }
        for id in ids {
            self.model.removed(id);
        }
        format!("purge the delayed exchange: {purged}")
    }

    pub(super) async fn delete_and_redeclare_later(&mut self) -> String {
        let ids = self.held_ids();
        if let Err(e) = self
            .ch()
            .exchange_delete(LATER.into(), ExchangeDeleteOptions::default())
            .await
        {
            self.fail(&format!("deleting the delayed exchange failed: {e}"));
        }
        for &id in &ids {
            self.model.removed(id);
        }
        self.declare_later(false).await;
        self.bind("q0").await;
        self.bind("q1").await;
        format!(
            "delete the delayed exchange ({} held) and declare it again",
            ids.len()
        )
    }
}
