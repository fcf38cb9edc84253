//! The plain reference: a queue as a list in publish order, and what a RabbitMQ user may
//! expect of each thing the queue does. Every event the queue reports is checked here.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use dwellmq_core::arguments::Overflow;
use dwellmq_core::queue::{DeathReason, ExpiryMode};

use super::script::Config;

/// A message as the reference knows it.
#[derive(Debug, Clone)]
pub struct Msg {
    pub id: u64,
    pub body: Bytes,
    pub deadline: Option<u64>,
    /// Handed out before: it comes back redelivered.
    pub delivered: bool,
}

/// A consumer as the reference knows it.
#[derive(Debug, Clone)]
pub struct Consumer {
    pub prefetch: u32,
    pub no_ack: bool,
    pub holding: u32,
}

impl Consumer {
    pub fn can_take(&self) -> bool {
        self.no_ack || self.prefetch == 0 || self.holding < self.prefetch
    }
}

/// Who holds an unacknowledged message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    Consumer(u32),
    Get,
}

/// The reference queue.
#[derive(Debug, Default)]
pub struct Reference {
    /// Ready messages in queue order (publish order: ids grow with it).
    pub ready: BTreeMap<u64, Msg>,
    pub unacked: BTreeMap<u64, (Msg, Holder)>,
    pub consumers: BTreeMap<u32, Consumer>,
    /// Every message that died, with why.
    pub dead: BTreeMap<u64, DeathReason>,
    /// Every message that left for good.
    pub gone: BTreeSet<u64>,
    /// The highest id ever handed out (it may come back in front of the rest).
    pub taken_high: Option<u64>,
    /// The message published by the command being run, when its TTL is 0.
    pub fresh: Option<u64>,
    /// A message refused at publish (reject-publish-dlx dead-letters it).
    pub refused: Option<u64>,
}

/// A check failed: what and why.
pub type Verdict = Result<(), String>;

macro_rules! ensure {
    ($cond:expr, $($arg:tt)*) => {
        if !$cond {
            return Err(format!($($arg)*));
        }
    };
}

impl Reference {
    pub fn ready_bytes(&self) -> u64 {
        self.ready.values().map(|m| m.body.len() as u64).sum()
    }

    /// What a publish of `msg` must do: `Some(true)` refused, `Some(false)` dies at once
    /// (TTL 0 with nobody to take it), `None` enqueued.
    pub fn publish_outcome(&self, config: &Config, msg: &Msg, now: u64) -> Option<bool> {
        let len = self.ready.len() as u64;
        let bytes = self.ready_bytes();
        let over = config.max_length.is_some_and(|max| len + 1 > max)
            || config
                .max_length_bytes
                .is_some_and(|max| bytes + msg.body.len() as u64 > max);
        if config.overflow != Overflow::DropHead && over {
            return Some(true);
        }
        if msg.deadline == Some(now) {
            let taker = self.consumers.values().any(Consumer::can_take);
            if !self.ready.is_empty() || !taker {
                return Some(false);
            }
        }
        None
    }

    /// A message went out to `holder` (a delivery or a get) at `now`.
    pub fn handed_out(
        &mut self,
        id: u64,
        body: &Bytes,
        redelivered: bool,
        holder: Holder,
        no_ack: bool,
        now: u64,
    ) -> Verdict {
        let first = self.ready.keys().next().copied();
        ensure!(
            first == Some(id),
            "message {id} handed out, but the head is {first:?} (queue order)"
        );
        let msg = self.ready.remove(&id).expect("the head");
        ensure!(
            msg.body == body,
            "message {id} handed out with another body"
        );
        ensure!(
            redelivered == msg.delivered,
            "message {id} handed out with redelivered={redelivered}, expected {}",
            msg.delivered
        );
        let live = msg
            .deadline
            .is_none_or(|d| d > now || (d == now && self.fresh == Some(id)));
        ensure!(
            live,
            "message {id} handed out at {now}, past its deadline {:?}",
            msg.deadline
        );
        if let Holder::Consumer(c) = holder {
            let consumer = self.consumers.get_mut(&c);
            ensure!(
                consumer.is_some(),
                "delivered to consumer {c}, which is gone"
            );
            let consumer = consumer.expect("checked");
            ensure!(
                consumer.can_take(),
                "delivered to consumer {c}, which has no credit"
            );
            if !consumer.no_ack {
                consumer.holding += 1;
            }
        }
        self.taken_high = Some(self.taken_high.map_or(id, |t| t.max(id)));
        if no_ack {
            self.gone.insert(id);
        } else {
            let msg = Msg {
                delivered: true,
                ..msg
            };
            self.unacked.insert(id, (msg, holder));
        }
        Ok(())
    }

    /// A message died for `reason` at `now`.
    pub fn died(
        &mut self,
        config: &Config,
        id: u64,
        reason: DeathReason,
        now: u64,
        rejecting: &BTreeSet<u64>,
    ) -> Verdict {
        ensure!(
            !self.dead.contains_key(&id),
            "message {id} died twice ({reason:?}, before {:?})",
            self.dead.get(&id)
        );
        let head = self.ready.keys().next().copied();
        match reason {
            DeathReason::Expired => {
                if self.fresh == Some(id) && !self.ready.contains_key(&id) {
                    // TTL 0, nobody to take it: it dies at publish.
                } else {
                    let msg = self.ready.get(&id);
                    ensure!(msg.is_some(), "message {id} expired but was not ready");
                    let deadline = msg.and_then(|m| m.deadline);
                    ensure!(
                        deadline.is_some_and(|d| d <= now),
                        "message {id} expired at {now}, before its deadline {deadline:?}"
                    );
                    if config.expiry_mode == ExpiryMode::HeadOnly {
                        ensure!(
                            head == Some(id),
                            "message {id} expired behind the head {head:?} in head-only mode"
                        );
                    }
                    self.ready.remove(&id);
                }
            }
            DeathReason::Maxlen => {
                if self.refused == Some(id) {
                    ensure!(
                        config.overflow == Overflow::RejectPublishDlx,
                        "message {id} refused and dead-lettered without reject-publish-dlx"
                    );
                } else {
                    ensure!(
                        config.overflow == Overflow::DropHead && head == Some(id),
                        "message {id} dropped for length but the head is {head:?}"
                    );
                    self.ready.remove(&id);
                }
            }
            DeathReason::Rejected => {
                ensure!(rejecting.contains(&id), "message {id} rejected unasked");
            }
            DeathReason::DeliveryLimit => return Err(format!("message {id}: delivery limit")),
        }
        self.dead.insert(id, reason);
        self.gone.insert(id);
        Ok(())
    }

    /// Takes `id` from its holder (an ack, a reject, or a return).
    pub fn settle(&mut self, id: u64) -> Option<Msg> {
        let (msg, holder) = self.unacked.remove(&id)?;
        if let Holder::Consumer(c) = holder {
            if let Some(consumer) = self.consumers.get_mut(&c) {
                consumer.holding = consumer.holding.saturating_sub(1);
            }
        }
        Some(msg)
    }

    /// A message comes back to its place, redelivered from now on.
    pub fn put_back(&mut self, msg: Msg) {
        self.ready.insert(msg.id, msg);
    }
}
