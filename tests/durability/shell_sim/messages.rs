//! The simulation's message steps: publishes with confirms, gets with ack, requeue or
//! reject (each get checked against the queue's head and the message's expectations), clock
//! advances, cancels, purges, deletes and redeclares.

use std::time::Duration;

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions,
    ExchangeDeleteOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::{AMQPValue, ShortString};
use lapin::{BasicProperties, PublisherConfirm};

use super::body::{body_for, check_body, classic_filler, id_of, small_filler};
use super::check::{death_violation, Violation};
use super::look::{deaths_in_delivery, lapin_integer};
use super::model::{Delivery, Place, Publish};
use super::queues::{CONSUMED, PAGING, QUEUES, RENEWABLE};
use super::{held_id, Sim, LATER};
use crate::common::table;

/// Where a publish goes.
pub enum Route<'a> {
    /// Straight to a queue (the default exchange).
    Queue(&'a str),
    /// Through the delayed exchange to a queue, after `delay` ms.
    Later { queue: &'a str, delay: u32 },
}

impl Sim {
    /// Sends one publish of message `id`, its body `body_for(id, filler)`; the model hears of
    /// it as published, not yet confirmed.
    pub(super) async fn send(
        &mut self,
        route: Route<'_>,
        id: u64,
        persistent: bool,
        expiration: Option<u64>,
        filler: usize,
    ) -> PublisherConfirm {
        let now = self.broker().now_ms();
        let mut properties = BasicProperties::default();
        if persistent {
            properties = properties.with_delivery_mode(2);
        }
        if let Some(ms) = expiration {
            properties = properties.with_expiration(ShortString::from(ms.to_string()));
        }
        let (exchange, key, place, due) = match route {
            Route::Queue(queue) => (
                String::new(),
                queue.to_string(),
                Place::Queue(queue.into()),
                None,
            ),
            Route::Later { queue, delay } => {
                properties = properties
                    .with_headers(table(&[("x-delay", AMQPValue::LongInt(delay as i32))]));
                (
                    LATER.to_string(),
                    format!("{queue}.{id}"),
                    Place::Held(queue.into()),
                    Some(now + u64::from(delay)),
                )
            }
        };
        if let Place::Queue(queue) = &place {
            if !persistent && PAGING.contains(&queue.as_str()) {
                self.transient.push(id);
            }
        }
        self.model.published(
            id,
            Publish {
                place,
                exchange: exchange.clone(),
                routing_key: key.clone(),
                expiration,
                due,
                now,
                filler,
            },
        );
        let body = body_for(id, filler);
        // A client the broker blocked (`connection.blocked`) sends nothing until unblocked.
        let publish = self.ch().basic_publish(
            exchange.as_str().into(),
            key.as_str().into(),
            BasicPublishOptions::default(),
            &body,
            properties,
        );
        match self.bounded("a publish", publish).await {
            Ok(confirm) => confirm,
            Err(e) => self.fail(&format!("publishing {id} failed: {e}")),
        }
    }

    /// Waits for confirms. Returns (acked, nacked).
    pub(super) async fn settle_confirms(
        &mut self,
        confirms: Vec<(u64, PublisherConfirm)>,
    ) -> (usize, usize) {
        let (mut acked, mut nacked) = (0, 0);
        for (id, confirm) in confirms {
            match self.bounded("a confirm", confirm).await {
                Ok(c) if c.is_ack() => {
                    self.model.confirmed(id);
                    acked += 1;
                }
                Ok(_) => {
                    self.model.nacked(id);
                    nacked += 1;
                }
                Err(e) => self.fail(&format!("the confirm of {id} failed: {e}")),
            }
        }
        self.report.confirmed += acked as u64;
        self.report.nacked += nacked as u64;
        (acked, nacked)
    }

    /// A per-message `expiration` for one message in four to a classic queue (1 ms to 6 s:
    /// below and above the queues' TTLs).
    pub(super) fn maybe_expiration(&mut self, queue: &str) -> Option<u64> {
        (PAGING.contains(&queue) && self.rng.below(4) == 0).then(|| 1 + self.rng.below(6_000))
    }

    /// Publishes 1-8 messages straight to a queue, a third of them transient (to the quorum
    /// queue, which keeps them all the same, and to the classic queues, which spill them
    /// under memory pressure and lose them at a restart).
    pub(super) async fn publish_batch(&mut self) -> String {
        let queue = self.rng.pick(&QUEUES);
        let n = 1 + self.rng.below(8);
        let mut confirms = Vec::new();
        for _ in 0..n {
            let id = self.next_id();
            let transient = (queue == "q1" || PAGING.contains(&queue)) && self.rng.below(3) == 0;
            let expiration = self.maybe_expiration(queue);
            if transient || expiration.is_some() {
                self.log.push(format!(
                    "  ({id}: transient {transient}, expiration {expiration:?})"
                ));
            }
            let filler = self.filler_for(queue);
            let confirm = self
                .send(Route::Queue(queue), id, !transient, expiration, filler)
                .await;
            confirms.push((id, confirm));
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
            let delay = 1 + self.rng.below(4_000) as u32;
            let filler = small_filler(self.rng.next());
            let route = Route::Later { queue, delay };
            let confirm = self.send(route, id, true, None, filler).await;
            confirms.push((id, confirm));
        }
        let (acked, nacked) = self.settle_confirms(confirms).await;
        format!("hold {n} until up to 4 s later: {acked} acked, {nacked} nacked")
    }

    /// A body length for a message to `queue`: classic queues get a few large ones; the
    /// quorum queues, which keep everything in memory, none.
    pub(super) fn filler_for(&mut self, queue: &str) -> usize {
        if PAGING.contains(&queue) {
            classic_filler(self.rng.next())
        } else {
            small_filler(self.rng.next())
        }
    }

    pub(super) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Whether message `id` is past its deadline in `queue`.
    fn overdue_in(&self, id: u64, queue: &str, now: u64) -> bool {
        self.model.msgs.get(&id).is_some_and(|m| {
            m.ttl_queue() == Some(queue) && m.expiry.as_ref().is_some_and(|e| e.0 <= now)
        })
    }

    /// The message a `basic.get` on `queue` must return now: of those ready (in the broker's
    /// order), not expired, the first by the model's positions.
    fn expected_head(&self, queue: &str) -> Option<u64> {
        let now = self.broker().now_ms();
        let live: Vec<u64> = self
            .ready_in(queue)
            .into_iter()
            .filter(|&id| !self.overdue_in(id, queue, now))
            .collect();
        let position = |id: &u64| {
            self.model
                .msgs
                .get(id)
                .and_then(|m| m.positions.get(queue))
                .map(|p| p.0)
        };
        if live.iter().all(|id| position(id).is_some()) {
            live.iter().copied().min_by_key(|id| position(id))
        } else {
            live.first().copied()
        }
    }

    /// Gets one message (manual ack) from `queue`: its id and delivery tag. It must be the
    /// queue's head, not expired, its body, redelivered flag, `x-death` and `expiration` as
    /// the model expects; a quorum queue's `x-acquired-count` counts every return the broker
    /// committed.
    pub(super) async fn get(&mut self, queue: &str) -> Option<(u64, u64)> {
        let expected = self.expected_head(queue);
        let got = self
            .bounded(
                "basic.get",
                self.ch()
                    .basic_get(queue.into(), BasicGetOptions { no_ack: false }),
            )
            .await;
        let m = match got {
            Ok(Some(m)) => m,
            Ok(None) => {
                if let Some(head) = expected {
                    self.fail_get(
                        queue,
                        format!("basic.get found nothing, {head} was ready"),
                        head,
                    );
                }
                return None;
            }
            Err(e) => self.fail(&format!("basic.get on {queue} failed: {e}")),
        };
        let d = &m.delivery;
        let id = id_of(&d.data);
        let now = self.broker().now_ms();
        let mut wrong = Vec::new();
        if Some(id) != expected {
            wrong.push(format!("FIFO: got {id}, the head was {expected:?}"));
        }
        match check_body(id, &d.data) {
            Err(e) => wrong.push(e),
            Ok(filler) => {
                let published = self.model.msgs.get(&id).map_or(0, |m| m.filler);
                if filler != published {
                    wrong.push(format!(
                        "{filler} octets after the id, {published} published"
                    ));
                }
            }
        }
        if self.overdue_in(id, queue, now) {
            wrong.push(format!("delivered {id} after its deadline (now {now})"));
        }
        let Some(msg) = self.model.msgs.get(&id) else {
            self.fail(&format!(
                "basic.get on {queue} returned {id}, never published"
            ));
        };
        let redelivered = match msg.delivery {
            Delivery::Never => Some(false),
            Delivery::Delivered { .. } => Some(true),
            Delivery::Unknown => None,
        };
        if redelivered.is_some_and(|r| r != d.redelivered) {
            wrong.push(format!(
                "redelivered {}, expected {redelivered:?}",
                d.redelivered
            ));
        }
        let headers = d.properties.headers().as_ref();
        let expiration = d.properties.expiration().as_ref().map(|e| e.to_string());
        if let Some(e) = death_violation(
            msg,
            queue,
            &deaths_in_delivery(headers),
            expiration.as_deref(),
        ) {
            wrong.push(e);
        }
        if queue == "q1" {
            let count = headers
                .and_then(|h| h.inner().get("x-acquired-count"))
                .and_then(lapin_integer)
                .unwrap_or(0);
            let returned = self.model.returns_committed(id);
            if count < returned as i64 {
                wrong.push(format!(
                    "x-acquired-count {count} after {returned} committed returns"
                ));
            }
        }
        if !wrong.is_empty() {
            self.fail_get(queue, wrong.join("; "), id);
        }
        self.report.gets += 1;
        self.report.redelivered_gets += u64::from(d.redelivered);
        self.model.delivered(id, queue);
        Some((id, d.delivery_tag))
    }

    fn fail_get(&self, queue: &str, what: String, id: u64) -> ! {
        self.fail_with(
            &format!("basic.get on {queue}"),
            &[Violation {
                text: what,
                ids: vec![id],
            }],
        )
    }

    /// A round trip on the channel: what was sent before it (an ack, nack or reject, which
    /// have no reply) has been handled.
    pub(super) async fn round_trip(&mut self, queue: &str) {
        self.declare_queue(queue, true).await;
    }

    /// One of `queues`, a non-empty one if there is any.
    fn pick_ready<'a>(&mut self, queues: &[&'a str]) -> &'a str {
        let ready: Vec<&str> = queues
            .iter()
            .copied()
            .filter(|q| !self.broker().peek_messages("/", q, 1).is_empty())
            .collect();
        if ready.is_empty() {
            self.rng.pick(queues)
        } else {
            self.rng.pick(&ready)
        }
    }

    pub(super) async fn get_and_ack(&mut self) -> String {
        let queue = self.pick_ready(&CONSUMED);
        let Some((id, tag)) = self.get(queue).await else {
            return format!("get {queue}: empty");
        };
        if let Err(e) = self.ch().basic_ack(tag, BasicAckOptions::default()).await {
            self.fail(&format!("ack failed: {e}"));
        }
        self.round_trip(queue).await;
        self.model.removed(id, &format!("acked from {queue}"));
        format!("get {id} from {queue} and ack")
    }

    /// Requeues one: it goes back to its place, redelivered.
    pub(super) async fn get_and_requeue(&mut self) -> String {
        let queue = self.pick_ready(&["q0", "q1", "q2", "dead", "dead3", "retried"]);
        let Some((id, tag)) = self.get(queue).await else {
            return format!("get {queue}: empty");
        };
        let options = BasicNackOptions {
            requeue: true,
            multiple: false,
        };
        // On the quorum queue a nack returns it without failing it: `x-acquired-count`
        // counts it, the delivery limit (failed deliveries) does not.
        self.model.requeued(id, queue == "q1");
        if let Err(e) = self.ch().basic_nack(tag, options).await {
            self.fail(&format!("nack failed: {e}"));
        }
        self.round_trip(queue).await;
        format!("get {id} from {queue} and requeue")
    }

    /// Takes 2-8 messages from a classic queue, then requeues them in a random order: each
    /// goes back to its own place, redelivered, and the queue's head grows past its window
    /// (read back from the store, perhaps spilled, then left beyond the window again).
    pub(super) async fn get_many_and_requeue(&mut self) -> String {
        let queue = self.pick_ready(&["q0", "dead", "retried", "dead3"]);
        let mut taken = Vec::new();
        for _ in 0..2 + self.rng.below(7) {
            match self.get(queue).await {
                Some(got) => taken.push(got),
                None => break,
            }
        }
        let mut order = Vec::new();
        while !taken.is_empty() {
            let (id, tag) = taken.swap_remove(self.rng.below(taken.len() as u64) as usize);
            let options = BasicNackOptions {
                requeue: true,
                multiple: false,
            };
            if let Err(e) = self.ch().basic_nack(tag, options).await {
                self.fail(&format!("nack failed: {e}"));
            }
            self.model.requeued(id, false);
            order.push(id);
        }
        self.round_trip(queue).await;
        format!(
            "get {} from {queue}, requeue them as {order:?}",
            order.len()
        )
    }

    pub(super) async fn reject_to_dead(&mut self) -> String {
        let Some((id, tag)) = self.get("q2").await else {
            return "get q2: empty".into();
        };
        if let Err(e) = self
            .ch()
            .basic_reject(tag, BasicRejectOptions { requeue: false })
            .await
        {
            self.fail(&format!("reject failed: {e}"));
        }
        self.round_trip("dead").await;
        let dead = vec![Place::Queue("dead".into())];
        self.model.dead_lettered(id, "q2", dead, "rejected");
        format!("get {id} from q2 and reject it into dead")
    }

    /// Moves the clock on: every deadline up to the target is served before `advance`
    /// returns; the check that follows gives the broker's own threads [`super::SETTLE_BOUND`].
    pub(super) async fn advance(&mut self) -> String {
        let by = self.rng.below(6_000);
        self.advance_by(by).await
    }

    pub(super) async fn advance_by(&mut self, by: u64) -> String {
        let released = self.broker().advance(Duration::from_millis(by));
        let now = self.broker().now_ms();
        let expired = self.model.advance(now);
        self.report.expired += expired.len() as u64;
        self.log.push(format!(
            "advance {by} ms to {now}: {released} released, {} expired {expired:?}",
            expired.len()
        ));
        self.check("after an advance", false).await;
        "  (checked)".into()
    }

    pub(super) fn cancel_one(&mut self) -> String {
        let held = self.broker().delayed_messages("/", LATER, 10_000);
        if held.is_empty() {
            return "cancel: nothing held".into();
        }
        let info = &held[self.rng.below(held.len() as u64) as usize];
        let id = held_id(&info.routing_key).0;
        if self.broker().cancel_delayed(info.id) {
            self.model.removed(id, "cancelled");
            format!("cancel held {id}")
        } else {
            format!("cancel held {id}: already gone")
        }
    }

    /// Ids ready in `queue` now, in the broker's order.
    pub(super) fn ready_in(&self, queue: &str) -> Vec<u64> {
        self.broker()
            .peek_messages("/", queue, usize::MAX)
            .iter()
            .map(|m| id_of(&m.body))
            .collect()
    }

    pub(super) async fn purge_queue(&mut self) -> String {
        let queue = self.rng.pick(&CONSUMED);
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
            self.model.removed(*id, &format!("purged from {queue}"));
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
            self.model.removed(*id, &format!("deleted with {queue}"));
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
            self.model.removed(id, "purged from the delayed exchange");
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
            self.model.removed(id, "deleted with the delayed exchange");
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
