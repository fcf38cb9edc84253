//! A confirm-mode channel's outstanding confirms, shared with the store's writer thread.
//!
//! Publishes are numbered in order; most are confirmed as soon as they are routed, but a
//! persistent message that reached a durable queue is confirmed only once its commit is on
//! disk, and one whose write failed (or that a queue refused) gets `basic.nack`. Acks and nacks
//! leave in tag order: an ack with `multiple` never covers a tag still waiting for its commit
//! or one to be nacked, so a publish after a waiting one waits with it.

use crate::broker::persist::SettledBy;
use std::collections::BTreeSet;
use std::sync::Arc;

use dwellmq_codec::methods::{BasicAck, BasicNack};
use dwellmq_codec::Method;
use parking_lot::Mutex;

use crate::server::outbound::Outbound;

#[derive(Default)]
struct State {
    /// Every publish up to this tag was routed.
    routed_to: u64,
    /// Acked or nacked up to here.
    sent_to: u64,
    /// Waiting for their commit.
    waiting: BTreeSet<u64>,
    /// To be nacked.
    failed: BTreeSet<u64>,
    /// The channel is gone: nothing more is sent.
    closed: bool,
}

thread_local! {
    /// Channels with confirms settled by the batch the store's writer thread is completing
    /// (only that thread adds to it).
    static SETTLED: std::cell::RefCell<Vec<Arc<Confirms>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Sends what the batch just settled (the store's after-batch callback).
pub(crate) fn send_settled() {
    let settled = SETTLED.with(|settled| std::mem::take(&mut *settled.borrow_mut()));
    for confirms in settled {
        let mut state = confirms.state.lock();
        confirms.send(&mut state);
    }
}

/// One channel's confirms.
pub(crate) struct Confirms {
    channel: u16,
    outbound: Arc<Outbound>,
    state: Mutex<State>,
}

impl Confirms {
    pub(crate) fn new(channel: u16, outbound: Arc<Outbound>) -> Arc<Self> {
        Arc::new(Confirms {
            channel,
            outbound,
            state: Mutex::new(State::default()),
        })
    }

    /// Every publish up to `tag` was routed: sends what may go.
    pub(crate) fn routed(&self, tag: u64) {
        let mut state = self.state.lock();
        state.routed_to = state.routed_to.max(tag);
        self.send(&mut state);
    }

    /// `tag` waits for its commit (registered before the commit can end).
    pub(crate) fn wait_for(&self, tag: u64) {
        self.state.lock().waiting.insert(tag);
    }

    /// `tag` is settled: committed (`ok`), or to be nacked. Settled by a commit, what may go is
    /// sent once the writer's whole batch is settled ([`send_settled`]): one frame for a
    /// batch's confirms on a channel, not one per message.
    pub(crate) fn settled(self: &Arc<Self>, tag: u64, ok: bool, by: SettledBy) {
        let mut state = self.state.lock();
        state.waiting.remove(&tag);
        if !ok {
            state.failed.insert(tag);
        }
        if by == SettledBy::Commit {
            drop(state);
            SETTLED.with(|settled| {
                let mut settled = settled.borrow_mut();
                if !settled.iter().any(|c| Arc::ptr_eq(c, self)) {
                    settled.push(Arc::clone(self));
                }
            });
        } else {
            self.send(&mut state);
        }
    }

    /// `tag` (routed, like every publish before it) is nacked.
    pub(crate) fn nack(&self, tag: u64) {
        let mut state = self.state.lock();
        state.failed.insert(tag);
        state.routed_to = state.routed_to.max(tag);
        self.send(&mut state);
    }

    /// The channel closed: later commits send nothing.
    pub(crate) fn close(&self) {
        self.state.lock().closed = true;
    }

    fn send(&self, state: &mut State) {
        if state.closed {
            return;
        }
        let limit = match state.waiting.first() {
            Some(&first) => state.routed_to.min(first - 1),
            None => state.routed_to,
        };
        while let Some(&failed) = state.failed.first() {
            if failed > limit {
                break;
            }
            state.failed.pop_first();
            self.ack_to(state, failed - 1);
            self.outbound.send_method(
                self.channel,
                &Method::BasicNack(BasicNack {
                    delivery_tag: failed,
                    multiple: false,
                    requeue: false,
                }),
            );
            state.sent_to = failed;
        }
        self.ack_to(state, limit);
    }

    fn ack_to(&self, state: &mut State, tag: u64) {
        if tag > state.sent_to {
            self.outbound.send_method(
                self.channel,
                &Method::BasicAck(BasicAck {
                    delivery_tag: tag,
                    multiple: tag - state.sent_to > 1,
                }),
            );
            state.sent_to = tag;
        }
    }
}
