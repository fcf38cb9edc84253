//! Reads the pages of paging queues from the store, off their locks and off the async runtime's
//! workers: one thread per broker, started at the first request and ended after a while
//! without one.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use dwellmq_core::paging::{assemble_page, Page, PageRequest, StoredEntry};
use dwellmq_store::{Snapshot, Store, StoreError, StoredMessage};
use parking_lot::Mutex;

use super::owner::QueueOwner;
use super::Queue;

/// The reader thread ends after this long without a request (a broker that pages nothing
/// keeps no thread).
const IDLE: Duration = Duration::from_secs(5);

/// Reads that fail (the store is reopening after a failed commit) are tried again after
/// these pauses, then given up: the queue asks again at its next command.
const RETRY_PAUSES: [Duration; 3] = [
    Duration::from_millis(20),
    Duration::from_millis(100),
    Duration::from_millis(500),
];

struct Job {
    queue: Weak<Queue>,
    /// Who carries out what the queue hands up after the job's command.
    owner: Weak<dyn QueueOwner>,
    task: Task,
}

enum Task {
    /// Read a page and hand it to the queue.
    Read(PageRequest),
    /// Run the queue's paging steps again at `at` (its spills completed: see
    /// [`PageReader::nudge`]).
    Nudge(Instant),
}

/// How long after a failed spill the queue writes it again.
const NUDGE_AFTER: Duration = Duration::from_millis(50);

/// The broker's page reader.
#[derive(Default)]
pub(crate) struct PageReader {
    inner: Arc<ReaderInner>,
}

#[derive(Default)]
struct ReaderInner {
    /// The running thread's queue of jobs; `None` while no thread runs.
    sender: Mutex<Option<mpsc::Sender<Job>>>,
}

impl PageReader {
    /// Reads `request` for `queue` and hands the page to `Queue::page_in`; false if no thread
    /// could be started (the caller gives the request back).
    pub(crate) fn request(
        &self,
        queue: &Arc<Queue>,
        owner: &dyn QueueOwner,
        request: PageRequest,
    ) -> bool {
        self.send(Job {
            queue: Arc::downgrade(queue),
            owner: owner.weak(),
            task: Task::Read(request),
        })
    }

    /// Has `queue` run its paging steps again: at once after its spills committed (what
    /// they wrote may leave memory even if no command comes, as when the memory alarm
    /// blocks its publishers), shortly after they failed (they are written again).
    pub(crate) fn nudge(&self, queue: Weak<Queue>, owner: Weak<dyn QueueOwner>, failed: bool) {
        let at = if failed {
            Instant::now() + NUDGE_AFTER
        } else {
            Instant::now()
        };
        let job = Job {
            queue,
            owner,
            task: Task::Nudge(at),
        };
        if !self.send(job) {
            tracing::warn!(
                "a queue whose spill failed cannot be nudged: its next command spills again"
            );
        }
    }

    fn send(&self, job: Job) -> bool {
        let mut sender = self.inner.sender.lock();
        let job = match sender.as_ref() {
            Some(running) => match running.send(job) {
                Ok(()) => return true,
                // The thread ended meanwhile: start another.
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (tx, rx) = mpsc::channel();
        let inner = Arc::downgrade(&self.inner);
        let spawned = std::thread::Builder::new()
            .name("dwellmq-pages".into())
            .spawn(move || serve(&rx, &inner));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "the page reader thread could not start");
            return false;
        }
        // The receiver lives until the thread ends: this send cannot fail.
        let _ = tx.send(job);
        *sender = Some(tx);
        true
    }
}

fn serve(jobs: &mpsc::Receiver<Job>, reader: &Weak<ReaderInner>) {
    loop {
        let job = match jobs.recv_timeout(IDLE) {
            Ok(job) => job,
            Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let Some(reader) = reader.upgrade() else {
                    return;
                };
                // Under the lock no job can be sent: none is lost between the last look and
                // the end of the thread.
                let mut sender = reader.sender.lock();
                match jobs.try_recv() {
                    Ok(job) => job,
                    Err(_) => {
                        *sender = None;
                        return;
                    }
                }
            }
        };
        let (Some(queue), Some(owner)) = (job.queue.upgrade(), job.owner.upgrade()) else {
            continue;
        };
        match job.task {
            Task::Read(request) => {
                // A read for deadlines waits while memory is over the watermark (what it
                // dead-letters stays in memory until written): put off, asked again shortly.
                if request.due && !queue.room_to_expire(Duration::ZERO) {
                    if let Some(next) = queue.defer_read(&*owner, request) {
                        queue.read(&*owner, next);
                    }
                    continue;
                }
                let page = queue.read_page(request, &RETRY_PAUSES);
                // A test may hold the page here: in flight, read and not yet handed over.
                queue.services.hooks.page_reads.pass();
                queue.page_in(&*owner, request, page);
            }
            Task::Nudge(at) => {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                queue.nudge(&*owner);
            }
        }
    }
}

/// Where a queue's stored messages are: its persisted ones under its store id (a durable
/// queue), its spilled ones under its spill id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source {
    pub(crate) queue: Option<u64>,
    pub(crate) spill: u64,
}

/// Up to `limit` of a queue's stored messages from position `from_seq` on, persisted and
/// spilled merged in position order, each with whether it was spilled.
pub(crate) fn read_merged(
    snapshot: &Snapshot,
    source: Source,
    from_seq: u64,
    limit: usize,
) -> Result<Vec<(StoredMessage, bool)>, StoreError> {
    let persisted = match source.queue {
        Some(id) => snapshot.queue_messages(id, from_seq, limit)?,
        None => Vec::new(),
    };
    let spilled = snapshot.spilled_messages(source.spill, from_seq, limit)?;
    if spilled.is_empty() {
        return Ok(persisted.into_iter().map(|m| (m, false)).collect());
    }
    let mut merged = Vec::with_capacity(limit.min(persisted.len() + spilled.len()));
    let (mut persisted, mut spilled) = (
        persisted.into_iter().peekable(),
        spilled.into_iter().peekable(),
    );
    while merged.len() < limit {
        let from_spill = match (persisted.peek(), spilled.peek()) {
            (None, None) => break,
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some(p), Some(s)) => s.seq < p.seq,
        };
        let next = if from_spill {
            spilled.next()
        } else {
            persisted.next()
        };
        if let Some(message) = next {
            merged.push((message, from_spill));
        }
    }
    Ok(merged)
}

/// Reads the page `request` asks for of the queue stored under `source`, stopping early
/// once `max_bytes` of bodies are read (at least one message).
pub(crate) fn read_page(
    store: &Store,
    source: Source,
    request: PageRequest,
    max_bytes: u64,
) -> Result<Page, StoreError> {
    let snapshot: Snapshot = store.snapshot()?;
    let stored = read_merged(&snapshot, source, request.from_seq, request.limit)?;
    let stored = stored
        .into_iter()
        .map(|(message, spilled)| StoredEntry {
            seq: message.seq,
            expires_at: (message.expires_at_ms != 0).then_some(message.expires_at_ms),
            redelivered: message.state.redelivered,
            spilled,
            message: message.message,
        })
        .collect();
    Ok(assemble_page(stored, request, max_bytes))
}
