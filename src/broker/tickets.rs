//! Who waits for what the broker writes to its store: a publisher's confirm (a
//! [`PublishTicket`] counting every persistent copy of its message), a reply that waits for
//! the definitions its method wrote ([`DefinitionWrites`]), an HTTP answer
//! ([`AwaitedWrites`]). Nothing here knows a queue, an exchange or a vhost: queues submit
//! their persists through [`submit_counted`], and `persist` its definitions.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use dwellmq_store::{Op, Store};
use parking_lot::Mutex;

/// Who hears of the commit of the definitions one operation writes: the reply that waits for
/// it (a declare-ok, bind-ok, delete-ok, an HTTP answer), or nobody (what the broker does on
/// its own: an auto-delete, an `x-expires`, a connection's exclusive queues, taking back a
/// failed declare, a restore). Passed down explicitly from the channel or the HTTP handler to
/// the writes, so that no caller can forget it.
#[derive(Clone, Copy)]
pub(crate) struct DefinitionWrites<'a>(Option<&'a Arc<PublishTicket>>);

impl DefinitionWrites<'static> {
    /// Nobody waits for these writes (a failure is still logged, and taken back where the
    /// write says how).
    pub(crate) const UNAWAITED: Self = DefinitionWrites(None);
}

impl<'a> DefinitionWrites<'a> {
    /// Every write is counted on `ticket`, which hears when they are all committed.
    pub(crate) fn reported_to(ticket: &'a Arc<PublishTicket>) -> Self {
        DefinitionWrites(Some(ticket))
    }

    /// The ticket the writes are counted on, if anyone waits.
    pub(crate) fn ticket(self) -> Option<&'a Arc<PublishTicket>> {
        self.0
    }
}

/// The definition writes an HTTP request makes, which its answer waits for: as RabbitMQ
/// answers after its metadata store, a 2xx means written.
pub(crate) struct AwaitedWrites {
    ticket: Arc<PublishTicket>,
    outcome: tokio::sync::oneshot::Receiver<bool>,
}

impl AwaitedWrites {
    pub(crate) fn new() -> Self {
        let (tx, outcome) = tokio::sync::oneshot::channel();
        let ticket = PublishTicket::new(move |committed, _| {
            let _ = tx.send(committed);
        });
        AwaitedWrites { ticket, outcome }
    }

    /// What the request's operations report their writes to.
    pub(crate) fn writes(&self) -> DefinitionWrites<'_> {
        DefinitionWrites::reported_to(&self.ticket)
    }

    /// Waits until every write reported so far is committed; `Err` says why one was not.
    pub(crate) async fn committed(self) -> Result<(), String> {
        // The request's own count: the outcome may be reported from now on.
        self.ticket.complete(true);
        if !self.ticket.is_used() {
            return Ok(());
        }
        match self.outcome.await {
            Ok(true) => Ok(()),
            Ok(false) => Err("the store could not write the definition".into()),
            Err(_) => Err("the store was closed".into()),
        }
    }
}

/// Submits `ops` counted on `ticket`, which hears once their commit ends (a confirm, or a
/// declare-ok, waits for it); `then` sees the outcome first, on the writer thread.
pub(crate) fn submit_counted(
    store: &Store,
    ops: Vec<Op>,
    ticket: Option<&Arc<PublishTicket>>,
    then: impl FnOnce(&dwellmq_store::Completion) + Send + 'static,
) {
    let ticket = ticket.cloned();
    if let Some(ticket) = &ticket {
        ticket.add();
    }
    store.submit(ops, move |outcome| {
        then(&outcome);
        if let Some(ticket) = ticket {
            ticket.commit_ended(outcome.is_ok());
        }
    });
}

/// Who settled a [`PublishTicket`]: the store's writer ending a commit (others settle in the
/// same batch: a channel's confirms are gathered and sent once per batch), or the publisher
/// letting go of its own count (after every copy was already committed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SettledBy {
    Commit,
    Publisher,
}

/// What a [`PublishTicket`] reports to: `true` once committed, `false` to nack, and who
/// settled it.
type Settle = Box<dyn FnOnce(bool, SettledBy) + Send>;

/// A publish whose confirm waits until every persistent copy of it (one per durable queue it
/// reached) is committed. The publisher holds one count until it has routed the message, so
/// the outcome cannot be reported before every copy was submitted.
pub(crate) struct PublishTicket {
    pending: AtomicUsize,
    used: AtomicBool,
    failed: AtomicBool,
    done: Mutex<Option<Settle>>,
}

impl PublishTicket {
    /// A ticket that calls `done(committed, by)` once its copies are committed (or one failed).
    pub(crate) fn new(done: impl FnOnce(bool, SettledBy) + Send + 'static) -> Arc<Self> {
        Arc::new(PublishTicket {
            pending: AtomicUsize::new(1),
            used: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            done: Mutex::new(Some(Box::new(done))),
        })
    }

    /// One more copy submitted.
    pub(crate) fn add(&self) {
        self.used.store(true, Ordering::Release);
        self.pending.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether any copy was submitted.
    pub(crate) fn is_used(&self) -> bool {
        self.used.load(Ordering::Acquire)
    }

    /// The publish failed anyway (a queue refused it): the outcome is a nack.
    pub(crate) fn fail(&self) {
        self.failed.store(true, Ordering::Release);
    }

    /// The publisher let go of its count (`ok`: it did not fail the publish itself).
    pub(crate) fn complete(&self, ok: bool) {
        self.count_down(ok, SettledBy::Publisher);
    }

    /// A copy's commit ended (`ok`: committed); called by the store's writer.
    pub(crate) fn commit_ended(&self, ok: bool) {
        self.count_down(ok, SettledBy::Commit);
    }

    fn count_down(&self, ok: bool, by: SettledBy) {
        if !ok {
            self.failed.store(true, Ordering::Release);
        }
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            let done = self.done.lock().take();
            // Without a copy there is nothing to report: the publisher confirms as usual.
            if let (Some(done), true) = (done, self.is_used()) {
                done(!self.failed.load(Ordering::Acquire), by);
            }
        }
    }
}
