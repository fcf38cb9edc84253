//! Carrying out a command's effects under the queue's lock: deliveries, store writes, counts;
//! what only the owner can do is gathered in the command's [`Aftermath`].

use std::sync::Arc;

use dwellmq_core::queue::{DeathReason, Effect, Effects, QueueState};
use dwellmq_core::{Message, QueueEntry, SpilledMessage};

use super::consumer::Consumer;
use super::owner::{Aftermath, Died, QueueOwner};
use super::store_writes::{self, StoreWrites};
use super::Queue;
use crate::broker::rates::QueueCounters;
use crate::broker::stats::DeliveryTotals;
use crate::broker::tickets::{self, PublishTicket};

/// One command's context while its effects are carried out.
pub(super) struct Command<'a> {
    pub(super) owner: &'a dyn QueueOwner,
    /// What its persists count on (a publish's confirm).
    ticket: Option<&'a Arc<PublishTicket>>,
    /// Store writes gathered, submitted at the command's end.
    pub(super) writes: StoreWrites,
    /// What is left for the owner.
    pub(super) after: Aftermath<'a>,
    /// Deliveries made (and those to no-ack consumers), counted once per command.
    delivered: u64,
    delivered_auto_ack: u64,
}

impl<'a> Command<'a> {
    pub(super) fn new(owner: &'a dyn QueueOwner, ticket: Option<&'a Arc<PublishTicket>>) -> Self {
        Command {
            owner,
            ticket,
            writes: StoreWrites::default(),
            after: Aftermath::default(),
            delivered: 0,
            delivered_auto_ack: 0,
        }
    }
}

impl Queue {
    /// Carries out `effects` in their order.
    pub(super) fn apply(
        self: &Arc<Self>,
        state: &mut QueueState<Arc<Consumer>>,
        effects: &mut Effects<Arc<Consumer>>,
        cmd: &mut Command<'_>,
    ) {
        let at_least_once = state.settings().dead_letter_at_least_once;
        // A dead-lettered message's forget comes just before its dead-letter effect.
        let mut just_forgot = None;
        for effect in effects.drain() {
            let forgotten = just_forgot.take();
            match effect {
                Effect::Deliver {
                    consumer,
                    entry,
                    forget,
                } => self.deliver(state, consumer, entry, forget, cmd),
                Effect::DeadLetter { message, reason } => {
                    if cmd.after.dead_letter_target.is_none() {
                        cmd.after.dead_letter_target = state.settings().dead_letter.clone();
                        cmd.after.at_least_once = at_least_once;
                    }
                    let kept = at_least_once.then_some(forgotten).flatten();
                    self.died(message, reason, kept, cmd);
                }
                Effect::Dropped { reason } => self.services.deaths.dropped(reason),
                Effect::Arm { at_ms } => cmd.after.arm(at_ms),
                Effect::Expire => cmd.after.expire = true,
                // Submitted under the queue's lock, so that the store sees a message's
                // persist before its forget.
                Effect::Persist {
                    seq,
                    message,
                    expires_at,
                    delivered,
                } => self.persist(seq, message, expires_at, delivered, cmd),
                Effect::Forget { seq } => {
                    self.store_op(&mut cmd.writes, |queue| dwellmq_store::Op::Forget {
                        queue,
                        seq,
                    });
                    just_forgot = Some(seq);
                }
                hook => self.store_hook(hook, &mut cmd.writes),
            }
        }
        if cmd.delivered > 0 {
            QueueCounters::add(&self.counters.deliver, cmd.delivered);
            self.totals.delivered(cmd.delivered, cmd.delivered_auto_ack);
            (cmd.delivered, cmd.delivered_auto_ack) = (0, 0);
        }
    }

    /// Writes a delivery to its consumer's channel (handed back if the channel closed).
    fn deliver(
        self: &Arc<Self>,
        state: &mut QueueState<Arc<Consumer>>,
        consumer: Arc<Consumer>,
        entry: QueueEntry,
        forget: bool,
        cmd: &mut Command<'_>,
    ) {
        let redelivered = entry.redelivered;
        let seq = entry.seq;
        self.charge_unpacked(&entry.message);
        match consumer.sink.deliver(self, &consumer, entry) {
            Ok(()) => {
                cmd.delivered += 1;
                cmd.delivered_auto_ack += u64::from(consumer.credit.no_ack);
                // A no-ack delivery settles the message: it leaves the store now that it
                // went out (one handed back stays stored).
                if forget {
                    self.store_op(&mut cmd.writes, |queue| dwellmq_store::Op::Forget {
                        queue,
                        seq,
                    });
                }
                if redelivered {
                    QueueCounters::add(&self.counters.redeliver, 1);
                    DeliveryTotals::add(&self.totals.redelivered, 1);
                    self.services
                        .hooks
                        .redelivered
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Err(entry) => state.undelivered(&consumer.credit, entry),
        }
    }

    /// A message died: dead-lettered once the lock is released. With at-least-once
    /// dead-lettering its store record (`forgotten` by the command just before) stays until
    /// its copies are written, in their commit.
    fn died(
        &self,
        message: Arc<Message>,
        reason: DeathReason,
        forgotten: Option<u64>,
        cmd: &mut Command<'_>,
    ) {
        if forgotten.is_some() && self.store_id.get().is_some() {
            cmd.writes.detached.pop();
        }
        cmd.after.dead.push(Died {
            message,
            reason,
            seq: forgotten,
        });
    }

    /// Gathers `op` for the queue's store id, if it is in the store.
    fn store_op(&self, writes: &mut StoreWrites, op: impl FnOnce(u64) -> dwellmq_store::Op) {
        if let Some(&queue) = self.store_id.get() {
            writes.detached.push(op(queue));
        }
    }

    /// The store hooks gathered for the command's one submission at its end.
    fn store_hook(&self, hook: Effect<Arc<Consumer>>, writes: &mut StoreWrites) {
        match hook {
            Effect::SetState { seq, state } => {
                self.store_op(writes, |queue| dwellmq_store::Op::SetState {
                    queue,
                    seq,
                    state: dwellmq_store::DeliveryState {
                        redelivered: state.redelivered,
                        delivery_count: state.delivery_count,
                        acquired_count: state.acquired_count,
                        ready_at_ms: state.ready_at.unwrap_or(0),
                        dead_letter_reason: None,
                    },
                })
            }
            Effect::Spill {
                seq,
                message,
                expires_at,
            } => {
                writes.written_seqs.push(seq);
                writes.writes.push(dwellmq_store::Op::Spill {
                    spill: self.spill_id,
                    seq,
                    expires_at_ms: expires_at.unwrap_or(0),
                    message: match message {
                        SpilledMessage::Packed(packed) => dwellmq_store::Payload::Packed(packed),
                        SpilledMessage::Shared(message) => dwellmq_store::Payload::Message(message),
                    },
                });
            }
            Effect::Rewrite {
                seq,
                message,
                expires_at,
            } => {
                if let Some(&queue) = self.store_id.get() {
                    writes.rewritten_seqs.push(seq);
                    writes.writes.push(dwellmq_store::Op::Persist {
                        queue,
                        seq,
                        expires_at_ms: expires_at.unwrap_or(0),
                        delivered: false,
                        message: dwellmq_store::Payload::Message(message),
                    });
                }
            }
            Effect::RemovalsMark { mark } => writes.removals_mark = Some(mark),
            Effect::Unspill { from_seq, end_seq } => {
                writes.detached.push(dwellmq_store::Op::Unspill {
                    spill: self.spill_id,
                    from_seq,
                    end_seq,
                });
            }
            Effect::ForgetRun { from_seq, end_seq } => {
                self.store_op(writes, |queue| dwellmq_store::Op::ForgetRange {
                    queue,
                    from_seq,
                    end_seq,
                })
            }
            // The others are carried out by `apply` itself.
            _ => {}
        }
    }

    /// Submits a command's store writes (under the queue's lock).
    pub(super) fn submit(self: &Arc<Self>, writes: StoreWrites, owner: &dyn QueueOwner) {
        let Some(store) = &self.services.store else {
            return;
        };
        writes.submit(store_writes::Reporting {
            store,
            progress: self.progress.as_ref(),
            queue: Arc::downgrade(self),
            owner,
        });
    }

    /// A message unpacked from the ready list is charged again on its own from its delivery:
    /// it may stay unacknowledged for long, and the queue's bulk charge no longer counts it.
    pub(super) fn charge_unpacked(&self, message: &Message) {
        if message.is_uncharged() {
            let charge = self.services.memory.charge_message(message.body_len());
            message.charge_late(Box::new(charge));
        }
    }

    /// Submits a persistent message's write at once, counted on the command's ticket. A
    /// paging queue learns of its commit (and is nudged, see `Queue::request_nudge`).
    fn persist(
        self: &Arc<Self>,
        seq: u64,
        message: Arc<Message>,
        expires_at: Option<u64>,
        delivered: bool,
        cmd: &Command<'_>,
    ) {
        let (Some(&queue), Some(store)) = (self.store_id.get(), &self.services.store) else {
            return;
        };
        let op = dwellmq_store::Op::Persist {
            queue,
            seq,
            expires_at_ms: expires_at.unwrap_or(0),
            delivered,
            message: dwellmq_store::Payload::Message(message),
        };
        // Only a paging queue hears of the commit; it is reached through the queue (which the
        // nudge upgrades anyway), so that a completion holds two weak handles, no more.
        let report = self
            .progress
            .is_some()
            .then(|| (Arc::downgrade(self), cmd.owner.weak()));
        tickets::submit_counted(store, vec![op], cmd.ticket, move |outcome| {
            if let Err(e) = outcome {
                tracing::warn!(error = %e, "persisting a message failed; it is persisted again");
            }
            let Some((queue, owner)) = report else {
                return;
            };
            let Some(queue) = queue.upgrade() else {
                return;
            };
            if let Some(progress) = &queue.progress {
                progress.completed(seq, outcome.is_ok());
            }
            // What is committed may leave memory even if no command comes (a burst of
            // publishes handled before its first commit, then silence); a failed one,
            // which holds back everything behind it, is written again. One nudge is
            // pending per queue at a time, so a commit of many costs one.
            queue.request_nudge(owner, outcome.is_err());
        });
    }
}
