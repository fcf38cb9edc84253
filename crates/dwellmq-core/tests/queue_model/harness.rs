//! The queue driven as the broker's shell drives it (`src/broker/queue.rs`): after every
//! command its effects are carried out, what stayed is settled, missing writes go to the
//! store, and the read it asks for is issued. The store and the page reads are fakes whose
//! completions the script delivers late, out of order, or failed. Every event is checked
//! against the reference as it happens.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::{BasicProperties, ShortStr};
use dwellmq_core::paging::{Page, PageRequest};
use dwellmq_core::queue::{
    ChannelCredit, Congestion, ConsumerCredit, ConsumerSlot, DeathReason, Effect, Effects,
    PublishOutcome, QueueSettings, QueueState, ReturnCause, StoreProgress, READ_RETRY_MS,
};
use dwellmq_core::{Message, PackedMessage, QueueEntry, SpilledMessage};

use super::reference::{Consumer, Holder, Msg, Reference, Verdict};
use super::script::Config;
use super::store::{self, FakeStore, Record, Tables, Write};

/// A read asked for and not handed back yet.
struct PendingRead {
    request: PageRequest,
    /// The store as the read saw it, once it started.
    snapshot: Option<Tables>,
}

/// A message handed out and not settled: the entry the queue gave, and its holder's credit.
struct Outstanding {
    entry: QueueEntry,
    credit: Option<Arc<ConsumerCredit>>,
}

pub struct Harness {
    pub config: Config,
    pub q: QueueState<u32>,
    fx: Effects<u32>,
    pub now: u64,
    pub store: FakeStore,
    pub progress: Arc<StoreProgress>,
    pub pressed: bool,
    reads: Vec<PendingRead>,
    /// Ticks asked for.
    armed: BTreeSet<u64>,
    pub reference: Reference,
    outstanding: BTreeMap<u64, Outstanding>,
    credits: BTreeMap<u32, Arc<ConsumerCredit>>,
    channel: Arc<ChannelCredit>,
    next_consumer: u32,
    next_id: u64,
    /// A read failed: the queue asks again after `READ_RETRY_MS`, so deadlines in the run
    /// may be served that much later (until this time).
    pub retry_until: u64,
    /// The store writes of the command being run, submitted at its end.
    detached: Vec<Write>,
    writes: Vec<(Write, u64, bool)>,
    removals_mark: Option<u64>,
    /// Ids a reject of the command being run dead-letters.
    rejecting: BTreeSet<u64>,
    /// Commands run (for messages).
    pub steps: u64,
}

const START: u64 = 1_000;

fn id_of(message: &Message) -> u64 {
    message
        .properties
        .message_id
        .as_ref()
        .and_then(|s| s.parse().ok())
        .expect("model messages carry their id")
}

fn body_of(message: &Message) -> Bytes {
    let mut body = Vec::new();
    for chunk in message.body.chunks() {
        body.extend_from_slice(chunk);
    }
    Bytes::from(body)
}

impl Harness {
    pub fn new(config: Config) -> Harness {
        let settings = QueueSettings {
            durable: config.stores_persistent,
            message_ttl: config.message_ttl,
            max_length: config.max_length,
            max_length_bytes: config.max_length_bytes,
            overflow: config.overflow,
            expiry_mode: config.expiry_mode,
            dead_letter: Some(dwellmq_core::queue::DeadLetterTarget {
                exchange: "dlx".into(),
                routing_key: None,
            }),
            ..Default::default()
        };
        let mut q = QueueState::new(settings, false, START);
        if config.paging {
            if config.stores_persistent {
                q.enable_paging(config.window);
            } else {
                q.enable_spill_paging(config.window);
            }
        }
        Harness {
            config,
            q,
            fx: Effects::new(),
            now: START,
            store: FakeStore::default(),
            progress: Arc::new(StoreProgress::default()),
            pressed: false,
            reads: Vec::new(),
            armed: BTreeSet::new(),
            reference: Reference::default(),
            outstanding: BTreeMap::new(),
            credits: BTreeMap::new(),
            channel: Arc::new(ChannelCredit::new(Arc::new(Congestion::default()))),
            next_consumer: 0,
            next_id: 0,
            retry_until: 0,
            detached: Vec::new(),
            writes: Vec::new(),
            removals_mark: None,
            rejecting: BTreeSet::new(),
            steps: 0,
        }
    }

    fn stores(&self) -> bool {
        self.config.paging && self.config.stores_persistent
    }

    pub fn publish(&mut self, persistent: bool, ttl: Option<u64>, body_len: usize) -> Verdict {
        let id = self.next_id;
        self.next_id += 1;
        let body = Bytes::from(format!("{id:>width$}", width = body_len.max(1)));
        let message = Message::new(
            "".into(),
            "q".into(),
            BasicProperties {
                expiration: ttl.map(|t| ShortStr::from(t.to_string())),
                message_id: Some(ShortStr::from(id.to_string())),
                delivery_mode: persistent.then_some(2),
                ..Default::default()
            },
            body.clone().into(),
            None,
        );
        let ttl = match (ttl, self.config.message_ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let msg = Msg {
            id,
            body,
            deadline: ttl.map(|t| self.now + t),
            delivered: false,
        };
        let expected = self.reference.publish_outcome(&self.config, &msg, self.now);
        self.reference.fresh = (msg.deadline == Some(self.now)).then_some(id);
        match expected {
            Some(true) => self.reference.refused = Some(id),
            Some(false) => {}
            None => self.reference.put_back(msg),
        }
        let outcome = self.q.publish(message, self.now, &mut self.fx);
        let result = self.after_command();
        let refused = expected == Some(true);
        if (outcome == PublishOutcome::Rejected) != refused {
            return Err(format!(
                "message {id}: publish answered {outcome:?}, expected refused={refused}"
            ));
        }
        if refused && !self.reference.dead.contains_key(&id) {
            self.reference.gone.insert(id);
        }
        if expected == Some(false) && self.reference.dead.get(&id) != Some(&DeathReason::Expired) {
            return Err(format!(
                "message {id} with TTL 0 and no taker did not die at once"
            ));
        }
        self.reference.fresh = None;
        self.reference.refused = None;
        result
    }

    pub fn consume(&mut self, prefetch: u32, no_ack: bool) -> Verdict {
        let id = self.next_consumer;
        self.next_consumer += 1;
        let credit = Arc::new(ConsumerCredit::new(
            Arc::clone(&self.channel),
            prefetch,
            no_ack,
        ));
        self.reference.consumers.insert(
            id,
            Consumer {
                prefetch,
                no_ack,
                holding: 0,
            },
        );
        self.credits.insert(id, Arc::clone(&credit));
        let slot = ConsumerSlot {
            id: u64::from(id),
            handle: id,
            priority: 0,
            exclusive: false,
            credit,
        };
        if self.q.consume(slot, self.now, &mut self.fx).is_err() {
            return Err("a plain consumer was refused".into());
        }
        self.after_command()
    }

    pub fn cancel(&mut self, which: usize) -> Verdict {
        let Some(&id) = self.credits.keys().nth(which % self.credits.len().max(1)) else {
            return Ok(());
        };
        self.credits.remove(&id);
        self.reference.consumers.remove(&id);
        self.q.cancel(u64::from(id), self.now, &mut self.fx);
        self.after_command()
    }

    /// The channel closes: its consumers go, and what it holds comes back.
    pub fn close_channel(&mut self) -> Verdict {
        let ids: Vec<u32> = self.credits.keys().copied().collect();
        for id in ids {
            self.cancel(0)?;
            let _ = id;
        }
        let all: Vec<u64> = self.outstanding.keys().copied().collect();
        self.give_back(&all, ReturnCause::ConsumerGone)
    }

    pub fn get(&mut self, no_ack: bool) -> Verdict {
        // As the shell's get: nothing in memory while a run waits, its page is read on the
        // spot, a few times at most.
        for _ in 0..16 {
            let got = self.q.get(no_ack, self.now, &mut self.fx);
            let request = if got.is_none() {
                self.q.page_for(1)
            } else {
                None
            };
            self.effects()?;
            if let Some((entry, _left)) = got {
                let id = id_of(&entry.message);
                self.reference.handed_out(
                    id,
                    &body_of(&entry.message),
                    entry.redelivered,
                    Holder::Get,
                    no_ack,
                    self.now,
                )?;
                if !no_ack {
                    self.outstanding.insert(
                        id,
                        Outstanding {
                            entry,
                            credit: None,
                        },
                    );
                }
            }
            self.steps()?;
            let Some(request) = request else {
                return Ok(());
            };
            let page = Some(self.read_now(request));
            self.q.page_in(request, page, self.now, &mut self.fx);
            self.after_command()?;
        }
        Ok(())
    }

    fn pick(&self, which: usize) -> Option<u64> {
        let n = self.outstanding.len();
        (n > 0).then(|| *self.outstanding.keys().nth(which % n).expect("in range"))
    }

    fn take_outstanding(&mut self, id: u64) -> QueueEntry {
        let out = self.outstanding.remove(&id).expect("outstanding");
        if let Some(credit) = out.credit {
            credit.settled(1);
        }
        out.entry
    }

    pub fn ack(&mut self, which: usize) -> Verdict {
        let Some(id) = self.pick(which) else {
            return Ok(());
        };
        let entry = self.take_outstanding(id);
        self.reference.settle(id);
        self.reference.gone.insert(id);
        self.q.ack([&entry], self.now, &mut self.fx);
        self.after_command()
    }

    pub fn nack(&mut self, which: usize, requeue: bool) -> Verdict {
        let Some(id) = self.pick(which) else {
            return Ok(());
        };
        if requeue {
            return self.give_back(&[id], ReturnCause::Nacked);
        }
        let entry = self.take_outstanding(id);
        self.reference.settle(id);
        self.rejecting.insert(id);
        self.q.reject([entry], self.now, &mut self.fx);
        let result = self.after_command();
        self.rejecting.clear();
        result?;
        if !self.reference.dead.contains_key(&id) {
            return Err(format!("message {id} rejected without requeue did not die"));
        }
        Ok(())
    }

    fn give_back(&mut self, ids: &[u64], cause: ReturnCause) -> Verdict {
        let mut entries = Vec::new();
        for &id in ids {
            entries.push(self.take_outstanding(id));
            let msg = self.reference.settle(id).expect("held");
            self.reference.put_back(msg);
        }
        self.q.requeue(entries, cause, self.now, &mut self.fx);
        self.after_command()
    }

    pub fn purge(&mut self) -> Verdict {
        let purged = self.q.purge(&mut self.fx);
        let expected = self.reference.ready.len();
        let ids: Vec<u64> = self.reference.ready.keys().copied().collect();
        self.reference.ready.clear();
        self.reference.gone.extend(ids);
        self.after_command()?;
        if purged != expected {
            return Err(format!("purge took {purged}, {expected} were ready"));
        }
        Ok(())
    }

    /// Time moves to `now + ms`, the queue ticked at each time it asked for on the way.
    pub fn advance(&mut self, ms: u64) -> Verdict {
        let target = self.now + ms;
        let mut ticks_now = 0;
        while let Some(&at) = self.armed.first() {
            if at > target {
                break;
            }
            ticks_now = if at <= self.now { ticks_now + 1 } else { 0 };
            if ticks_now > 100 {
                return Err(format!("the queue keeps asking for a tick at {}", self.now));
            }
            self.armed.remove(&at);
            self.now = self.now.max(at);
            self.q.tick(self.now, &mut self.fx);
            self.after_command()?;
        }
        self.now = target;
        Ok(())
    }

    pub fn pressure(&mut self, on: bool) -> Verdict {
        self.pressed = on;
        self.nudge()
    }

    /// The paging steps with no command (the shell's nudge after write completions).
    pub fn nudge(&mut self) -> Verdict {
        self.after_command()
    }

    pub fn commit(&mut self, n: usize, ok: bool) -> Verdict {
        self.store.commit(n, ok);
        self.nudge()
    }

    pub fn snapshot(&mut self, which: usize) {
        let n = self.reads.len();
        if n == 0 {
            return;
        }
        let read = &mut self.reads[which % n];
        if read.snapshot.is_none() {
            read.snapshot = Some(self.store.committed.clone());
        }
    }

    pub fn read_back(&mut self, which: usize, ok: bool) -> Verdict {
        let n = self.reads.len();
        if n == 0 {
            return Ok(());
        }
        let read = self.reads.remove(which % n);
        let page = ok.then(|| {
            let tables = read.snapshot.as_ref().unwrap_or(&self.store.committed);
            store::read(tables, read.request, self.config.window.page_bytes())
        });
        if !ok {
            self.retry_until = self.now + READ_RETRY_MS;
        }
        self.q.page_in(read.request, page, self.now, &mut self.fx);
        self.after_command()
    }

    /// Everything settles: writes commit, reads come back, the steps run again, until
    /// nothing is left in flight.
    pub fn settle(&mut self) -> Verdict {
        for _ in 0..10_000 {
            // Ticks already due are served at once (the timer thread's work).
            self.advance(0)?;
            if self.store.pending() == 0 && self.reads.is_empty() {
                // A last nudge: what the completions made possible is done.
                self.nudge()?;
                if self.store.pending() == 0 && self.reads.is_empty() {
                    return Ok(());
                }
            }
            if self.store.pending() > 0 {
                let n = self.store.pending();
                self.commit(n, true)?;
            }
            // Bounded: a queue that asks for a read after every read fails the case here
            // instead of hanging it.
            let mut reads = 0;
            while !self.reads.is_empty() {
                reads += 1;
                if reads > 1_000 {
                    return Err("the queue never settles (a read after every read)".into());
                }
                self.read_back(0, true)?;
            }
        }
        Err("the queue never settles (writes or reads keep coming)".into())
    }

    fn read_now(&self, request: PageRequest) -> Page {
        store::read(
            &self.store.committed,
            request,
            self.config.window.page_bytes(),
        )
    }

    /// The shell's work after a command: effects, settling, missing writes, submissions,
    /// and the read asked for; then the counts are compared.
    fn after_command(&mut self) -> Verdict {
        self.effects()?;
        self.steps()
    }

    fn steps(&mut self) -> Verdict {
        self.steps += 1;
        self.q.settle(self.now, &mut self.fx);
        self.effects()?;
        let mut request = None;
        if self.config.paging {
            let in_flight = self.progress.spills_in_flight();
            let budget = self.config.write_budget.saturating_sub(in_flight);
            self.q
                .write_missing(self.pressed, &*self.progress, budget, &mut self.fx);
            self.effects()?;
            self.submit();
            request = self.q.page(&*self.progress, self.now);
        } else {
            self.submit();
        }
        self.check_counts()?;
        if let Some(request) = request {
            if request.due && self.config.due_reads_at_once {
                let page = Some(self.read_now(request));
                self.q.page_in(request, page, self.now, &mut self.fx);
                return self.after_command();
            }
            self.reads.push(PendingRead {
                request,
                snapshot: None,
            });
        }
        Ok(())
    }

    fn check_counts(&self) -> Verdict {
        let r = &self.reference;
        if self.q.ready() != r.ready.len() {
            return Err(format!(
                "the queue counts {} ready, the reference {} ({:?})",
                self.q.ready(),
                r.ready.len(),
                r.ready.keys().collect::<Vec<_>>()
            ));
        }
        if self.q.ready_bytes() != r.ready_bytes() {
            return Err(format!(
                "the queue counts {} ready octets, the reference {}",
                self.q.ready_bytes(),
                r.ready_bytes()
            ));
        }
        if self.q.unacked() != r.unacked.len() {
            return Err(format!(
                "the queue counts {} unacked, the reference {}",
                self.q.unacked(),
                r.unacked.len()
            ));
        }
        Ok(())
    }

    /// Carries out the effects of the command just run.
    fn effects(&mut self) -> Verdict {
        let effects: Vec<Effect<u32>> = self.fx.drain().collect();
        for effect in effects {
            self.effect(effect)?;
        }
        Ok(())
    }

    fn effect(&mut self, effect: Effect<u32>) -> Verdict {
        let stores = self.stores();
        match effect {
            Effect::Deliver {
                consumer,
                entry,
                forget,
            } => {
                let credit = self.credits.get(&consumer).cloned();
                let no_ack = credit.as_ref().is_some_and(|c| c.no_ack);
                let id = id_of(&entry.message);
                self.reference.handed_out(
                    id,
                    &body_of(&entry.message),
                    entry.redelivered,
                    Holder::Consumer(consumer),
                    no_ack,
                    self.now,
                )?;
                if !no_ack {
                    self.outstanding.insert(id, Outstanding { entry, credit });
                } else if forget && stores {
                    self.detached.push(Write::Forget { seq: entry.seq });
                }
            }
            Effect::DeadLetter { message, reason } => {
                let id = id_of(&message);
                self.reference
                    .died(&self.config, id, reason, self.now, &self.rejecting)?;
            }
            Effect::Dropped { reason } => {
                return Err(format!(
                    "a message dropped ({reason:?}) though a DLX is set"
                ));
            }
            Effect::Arm { at_ms } => {
                self.armed.insert(at_ms);
            }
            Effect::Expire => return Err("x-expires is not set".into()),
            Effect::Persist {
                seq,
                message,
                expires_at,
                delivered,
            } => {
                if stores {
                    let record = Record {
                        message: PackedMessage::pack(&message),
                        expires_at,
                        redelivered: delivered,
                    };
                    let progress = Arc::clone(&self.progress);
                    self.store.submit(
                        vec![Write::Persist { seq, record }],
                        Some(Box::new(move |ok| progress.completed(seq, ok))),
                    );
                }
            }
            Effect::SetState { seq, state } => {
                if stores && state.redelivered {
                    self.detached.push(Write::Redelivered { seq });
                }
            }
            Effect::Forget { seq } => {
                if stores {
                    self.detached.push(Write::Forget { seq });
                }
            }
            Effect::ForgetRun { from_seq, end_seq } => {
                if stores {
                    self.detached.push(Write::ForgetRange {
                        from: from_seq,
                        end: end_seq,
                    });
                }
            }
            Effect::Spill {
                seq,
                message,
                expires_at,
            } => {
                let message = match message {
                    SpilledMessage::Packed(packed) => packed,
                    SpilledMessage::Shared(message) => PackedMessage::pack(&message),
                };
                let record = Record {
                    message,
                    expires_at,
                    redelivered: false,
                };
                self.writes.push((Write::Spill { seq, record }, seq, false));
            }
            Effect::Unspill { from_seq, end_seq } => {
                self.detached.push(Write::Unspill {
                    from: from_seq,
                    end: end_seq,
                });
            }
            Effect::Rewrite {
                seq,
                message,
                expires_at,
            } => {
                if !stores {
                    return Err(format!(
                        "message at {seq} rewritten by a queue that does not store"
                    ));
                }
                let record = Record {
                    message: PackedMessage::pack(&message),
                    expires_at,
                    redelivered: false,
                };
                self.writes
                    .push((Write::Persist { seq, record }, seq, true));
            }
            Effect::RemovalsMark { mark } => self.removals_mark = Some(mark),
        }
        Ok(())
    }

    /// The command's removals in one submission (reporting their mark's commit), then its
    /// spills and rewrites in another (reporting each one's fate), as the shell submits them.
    fn submit(&mut self) {
        let detached = std::mem::take(&mut self.detached);
        let done: Option<store::Done> = self.removals_mark.take().map(|mark| {
            let progress = Arc::clone(&self.progress);
            Box::new(move |ok: bool| {
                if ok {
                    progress.removals_done(mark);
                }
            }) as store::Done
        });
        self.store.submit(detached, done);
        let writes = std::mem::take(&mut self.writes);
        if writes.is_empty() {
            return;
        }
        let mut seqs = Vec::new();
        let mut ops = Vec::new();
        for (write, seq, rewrite) in writes {
            if rewrite {
                self.progress.rewriting(seq);
            } else {
                self.progress.spilling(seq);
            }
            seqs.push(seq);
            ops.push(write);
        }
        let progress = Arc::clone(&self.progress);
        self.store.submit(
            ops,
            Some(Box::new(move |ok| {
                for seq in seqs {
                    progress.spilled(seq, ok);
                }
            })),
        );
    }

    /// In-memory ready messages the window allows after everything settled under memory
    /// pressure: the window, a page read back, and those handed out before (they come back in
    /// front of the run and cannot join it).
    pub fn memory_bound(&self) -> usize {
        let window = self.config.window;
        let taken = self.reference.taken_high;
        let came_back = self
            .reference
            .ready
            .keys()
            .filter(|&&id| taken.is_some_and(|t| id <= t))
            .count();
        window.window_messages + window.page_len() + came_back
    }

    pub fn in_memory(&self) -> usize {
        self.q.ready() - self.q.paged_out().0 as usize
    }
}
