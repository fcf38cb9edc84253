//! A reply that waits for a store commit: `tx.commit-ok` goes out only once the persistent
//! messages the transaction put on durable queues (and the messages it gave to durable delayed
//! exchanges) are on disk; a declare-ok (bind-ok, delete-ok...) once the definition it wrote is.
//!
//! While a reply waits, its connection reads and handles nothing more (what the client
//! pipelined stays in the buffer), so that replies keep the order of the requests; the
//! connection task sends the reply itself when the writer reports the commit (never the writer
//! thread: a failure closes the channel, which only the connection task may do).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use dwellmq_codec::Method;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// What the connection does once the commit ended.
pub(crate) struct Waiting {
    /// The channel the reply goes to.
    pub(crate) channel: u16,
    /// The reply, sent if the commit succeeded.
    pub(crate) reply: Method,
    /// The method that waits (for the `channel.close` if the commit failed).
    pub(crate) class_id: u16,
    pub(crate) method_id: u16,
    /// The `channel.close` text (506 RESOURCE_ERROR) if the commit failed.
    pub(crate) failure: &'static str,
    /// Which wait this is (a late report of an earlier, unawaited commit is ignored).
    token: u64,
    /// Set when the commit ended: whether it succeeded.
    pub(crate) committed: Option<bool>,
}

/// One connection's reply waiting for a commit (at most one at a time: nothing more is read
/// meanwhile).
#[derive(Default)]
pub(crate) struct CommitWait {
    next_token: AtomicU64,
    pending: AtomicBool,
    waiting: Mutex<Option<Waiting>>,
    ended: Notify,
}

impl CommitWait {
    pub(crate) fn new() -> Arc<Self> {
        Arc::default()
    }

    /// A token for a wait that may start: what reports its commit passes it to
    /// [`CommitWait::finish`].
    pub(crate) fn token(&self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }

    /// `reply` waits for the commit that `token`'s [`CommitWait::finish`] will report (not
    /// reported yet: the caller holds a count of what reports it).
    pub(crate) fn start(
        &self,
        token: u64,
        channel: u16,
        reply: Method,
        ids: (u16, u16),
        failure: &'static str,
    ) {
        *self.waiting.lock() = Some(Waiting {
            channel,
            reply,
            class_id: ids.0,
            method_id: ids.1,
            failure,
            token,
            committed: None,
        });
        self.pending.store(true, Ordering::Release);
    }

    /// The commit of `token` ended (on the store's writer thread): wakes the connection task
    /// if its reply waits.
    pub(crate) fn finish(&self, token: u64, committed: bool) {
        let mut waiting = self.waiting.lock();
        match waiting.as_mut() {
            Some(waiting) if waiting.token == token => waiting.committed = Some(committed),
            _ => return,
        }
        drop(waiting);
        self.ended.notify_one();
    }

    /// Whether a reply waits (the connection reads nothing meanwhile).
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Resolves once a commit ended (a wake-up may come for nothing: check [`CommitWait::take`]).
    pub(crate) async fn ended(&self) {
        self.ended.notified().await;
    }

    /// The reply whose commit ended, if it did.
    pub(crate) fn take(&self) -> Option<(Waiting, bool)> {
        let mut waiting = self.waiting.lock();
        let committed = waiting.as_ref()?.committed?;
        self.pending.store(false, Ordering::Release);
        waiting.take().map(|w| (w, committed))
    }
}
