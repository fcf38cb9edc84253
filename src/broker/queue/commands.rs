//! A queue's operations: each runs one command (or a few) on its state with its owner, who
//! carries out what the queue hands up.

use std::sync::Arc;

use dwellmq_core::policy::PolicyDefinition;
use dwellmq_core::queue::{Cancelled, ConsumeRefused, ConsumerSlot, PublishOutcome, ReturnCause};
use dwellmq_core::{BrokerError, BrokerResult, Message, QueueEntry};

use super::consumer::Consumer;
use super::owner::QueueOwner;
use super::run::Time;
use super::{settings_for, Inner, Queue};
use crate::broker::rates::QueueCounters;
use crate::broker::stats::DeliveryTotals;
use crate::broker::tickets::PublishTicket;

/// Pages a `basic.get` reads at most before it answers: a run whose first pages hold only
/// expired messages answers get-empty rather than hold the channel for long.
const PAGES_PER_GET: usize = 16;

impl Queue {
    /// Enqueues a routed message and delivers what consumers can take.
    pub(crate) fn publish(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        message: Arc<Message>,
    ) -> PublishOutcome {
        self.publish_confirmed(owner, message, None)
    }

    /// As `publish`; if the message is persisted here, its commit counts on `ticket`.
    pub(crate) fn publish_confirmed(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        message: Arc<Message>,
        ticket: Option<&Arc<PublishTicket>>,
    ) -> PublishOutcome {
        let time = if message.properties.expiration.is_some() {
            Time::Now
        } else {
            Time::IfUsed
        };
        let outcome = self.run_with(owner, time, ticket, |state, now, fx| {
            state.publish(message, now, fx)
        });
        QueueCounters::add(&self.counters.publish, 1);
        outcome
    }

    /// Puts back the messages the store held for this queue (at start), each with the time
    /// its delayed retry is due, if it waits for one.
    pub(crate) fn restore(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        entries: Vec<(QueueEntry, Option<u64>)>,
        next_seq: u64,
    ) {
        // What was stored before is committed: it may be left in the store again.
        if let Some(progress) = &self.progress {
            progress.stored_below(next_seq);
        }
        self.run(owner, |state, now, fx| {
            state.restore(entries, next_seq, now, fx)
        });
    }

    /// Delivers what consumers can take (after a qos or flow change, or a drained socket).
    pub(crate) fn drain(self: &Arc<Self>, owner: &dyn QueueOwner) {
        self.run_at(owner, Time::IfUsed, |state, now, fx| state.drain(now, fx));
    }

    /// It is time for this queue's next deadline (or its kept dead letters' retry).
    pub(crate) fn tick(self: &Arc<Self>, owner: &dyn QueueOwner) {
        self.run(owner, |state, now, fx| state.tick(now, fx));
        self.retry_dead_letters(owner, false);
    }

    /// Delivered messages were acked (or were no-ack and are done).
    pub(crate) fn ack<'a>(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        entries: impl IntoIterator<Item = &'a QueueEntry>,
    ) {
        let mut acked = 0;
        let entries = entries.into_iter().inspect(|_| acked += 1);
        self.run_at(owner, Time::IfUsed, |state, now, fx| {
            state.ack(entries, now, fx)
        });
        QueueCounters::add(&self.counters.ack, acked);
        DeliveryTotals::add(&self.totals.acknowledged, acked);
    }

    /// Delivered messages were rejected without requeue: dead-lettered or dropped.
    pub(crate) fn reject(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        entries: impl IntoIterator<Item = QueueEntry>,
    ) {
        self.run_at(owner, Time::IfUsed, |state, now, fx| {
            state.reject(entries, now, fx)
        });
    }

    /// Puts delivered messages back, marked redelivered, at their original positions (or, in
    /// a quorum queue, past its delivery limit or into a delayed retry).
    pub(crate) fn requeue(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        entries: impl IntoIterator<Item = QueueEntry>,
        cause: ReturnCause,
    ) {
        self.run(owner, |state, now, fx| {
            state.requeue(entries, cause, now, fx)
        });
    }

    /// Adds a consumer; `ACCESS_REFUSED` if exclusivity forbids it. `on_added` runs once the
    /// consumer is accepted and before anything is delivered to it (to send `consume-ok`).
    pub(crate) fn add_consumer(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        consumer: Arc<Consumer>,
        priority: i64,
        exclusive: bool,
        on_added: impl FnOnce(),
    ) -> BrokerResult<()> {
        let slot = ConsumerSlot {
            id: consumer.id,
            credit: Arc::clone(&consumer.credit),
            handle: consumer,
            priority,
            exclusive,
        };
        let refused = self.run(owner, |state, now, fx| {
            state.can_consume(slot.exclusive)?;
            // consume-ok goes out before the first delivery.
            on_added();
            state.consume(slot, now, fx)
        });
        match refused {
            Ok(()) => Ok(()),
            Err(ConsumeRefused::Deleted) => Err(BrokerError::NotFound(format!(
                "no queue '{}' in vhost '{}'",
                self.name, self.vhost
            ))),
            Err(ConsumeRefused::ExclusiveInUse) => Err(BrokerError::AccessRefused(format!(
                "queue '{}' in vhost '{}' in exclusive use",
                self.name, self.vhost
            ))),
        }
    }

    /// Removes consumer `id`.
    pub(crate) fn remove_consumer(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        id: u64,
    ) -> Cancelled<Arc<Consumer>> {
        self.run(owner, |state, now, fx| state.cancel(id, now, fx))
    }

    /// `basic.get`: the head message and how many remain, or `None` when none is ready.
    pub(crate) fn get(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        no_ack: bool,
    ) -> Option<(QueueEntry, usize)> {
        let mut got = None;
        // Nothing in memory while a run waits in the store: its first page is read here (a
        // short read), then the get is tried again; a page that brings no live message (all
        // expired) leads to the next one.
        for _ in 0..PAGES_PER_GET {
            let (taken, request) = self.run(owner, |state, now, fx| {
                let taken = state.get(no_ack, now, fx);
                let request = if taken.is_none() {
                    state.page_for(1)
                } else {
                    None
                };
                (taken, request)
            });
            got = taken;
            let Some(request) = request else { break };
            let page = self.read_page(request, &[]);
            self.page_in(owner, request, page);
        }
        if let Some((entry, _)) = &got {
            self.charge_unpacked(&entry.message);
        }
        self.totals
            .got(got.as_ref().map(|(entry, _)| entry), no_ack);
        if let Some((entry, _)) = &got {
            QueueCounters::add(&self.counters.get, 1);
            if entry.redelivered {
                QueueCounters::add(&self.counters.redeliver, 1);
            }
        }
        got
    }

    /// The management API's get: takes up to `count` ready messages from the head, each with
    /// the number of ready messages left behind it, and with `requeue` puts them all back
    /// afterwards, marked redelivered, at their places (what RabbitMQ does: `basic.get` then
    /// `basic.reject` with requeue), or else acknowledges them. Consumers are not involved and
    /// nothing stays unacked.
    pub(crate) fn take_for_inspection(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        count: usize,
        requeue: bool,
    ) -> Vec<(QueueEntry, usize)> {
        // What it takes is read from the store first if it is not in memory.
        for _ in 0..PAGES_PER_GET {
            if !self.read_for(owner, count) {
                break;
            }
        }
        self.run(owner, |state, now, fx| {
            let mut taken = Vec::new();
            while taken.len() < count {
                let Some(got) = state.get(false, now, fx) else {
                    break;
                };
                taken.push(got);
            }
            let entries = taken.iter().map(|(entry, _)| entry);
            if requeue {
                state.requeue(entries.cloned(), ReturnCause::Nacked, now, fx);
            } else {
                state.ack(entries, now, fx);
            }
            taken
        })
    }

    /// Drops every ready message; returns how many.
    pub(crate) fn purge(self: &Arc<Self>, owner: &dyn QueueOwner) -> usize {
        self.run(owner, |state, now, fx| {
            state.tick(now, fx);
            state.purge(fx)
        })
    }

    /// The queue was redeclared (it counts as used for `x-expires`).
    pub(crate) fn redeclared(self: &Arc<Self>, owner: &dyn QueueOwner) {
        self.run(owner, |state, now, fx| state.redeclared(now, fx));
    }

    /// Makes every message waiting for a retry ready now; returns how many.
    pub(crate) fn release_retries(self: &Arc<Self>, owner: &dyn QueueOwner) -> usize {
        self.run(owner, |state, now, fx| state.release_retries(now, fx))
    }

    /// The policy that applies changed (or none applies any more).
    pub(crate) fn apply_policy(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        policy: Option<&PolicyDefinition>,
    ) {
        let settings = settings_for(
            &self.config,
            &self.arguments,
            self.durable,
            &self.services,
            policy,
        );
        let (was_at_least_once, old_target) = {
            let inner = self.inner.lock();
            let old = inner.state.settings();
            (old.dead_letter_at_least_once, old.dead_letter.clone())
        };
        let (at_least_once, target) = (
            settings.dead_letter_at_least_once,
            settings.dead_letter.clone(),
        );
        self.run(owner, |state, now, fx| {
            state.set_settings(settings, now, fx)
        });
        self.dead_letter_strategy_changed(
            owner,
            was_at_least_once,
            at_least_once,
            old_target != target,
        );
    }

    /// Marks the queue deleted, drops its messages, and returns its consumers (to notify them).
    pub(crate) fn mark_deleted(&self) -> (usize, Vec<Arc<Consumer>>) {
        let mut guard = self.inner.lock();
        let Inner {
            state,
            effects,
            packed,
        } = &mut *guard;
        let result = state.delete(effects);
        packed.set(state.packed_footprint());
        // Only store hooks can come out of a delete; the store drops the queue's messages
        // with the queue, and its spilled ones go here.
        effects.drain();
        if let (true, Some(store)) = (state.has_spilled(), &self.services.store) {
            store.submit_detached(vec![dwellmq_store::Op::Unspill {
                spill: self.spill_id,
                from_seq: 0,
                end_seq: u64::MAX,
            }]);
        }
        self.pending_dead_letters.clear();
        // The broker's totals keep what it counted.
        self.services
            .queue_totals
            .of(self.config.queue_type)
            .absorb(&self.totals);
        result
    }
}
