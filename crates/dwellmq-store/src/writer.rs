//! The group-commit writer: one thread, one write transaction and one durable commit for
//! everything that arrived while the previous commit ran.
//!
//! Nobody waits for a batch to fill: the writer commits whatever is queued the moment the last
//! commit ends, so under light load a submission commits alone and at once, and under heavy load
//! the batches grow by themselves.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use redb::{CommitError, Durability, StorageError, TransactionError};

use crate::alarm::{Alarms, StoreAlarm};
use crate::apply::Tables;
use crate::carry::Carry;
use crate::error::StoreError;
use crate::id_hash::IdHashMap;
use crate::lag::{Lag, LagKeys};
use crate::open::{panic_message, DbSlot, Opener};
use crate::ops::{Completion, Done, Op, Receipt};

/// The first probe after a failed commit comes this soon; later ones back off.
const FIRST_RETRY: Duration = Duration::from_millis(10);

/// One submission: ops and who to tell.
pub(crate) struct Submission {
    pub(crate) ops: Vec<Op>,
    /// What it counts for in the backlog (see [`crate::alarm::weight`]), taken when queued.
    pub(crate) weight: u64,
    pub(crate) done: Option<Done>,
    /// The [`crate::Store::group`] it was sent under (numbered from 1): it must commit with
    /// the rest of its group, and is retried with it.
    pub(crate) group: Option<u64>,
}

/// What the writer counts (see [`crate::StoreStats`]).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) commits: AtomicU64,
    pub(crate) failed_commits: AtomicU64,
    pub(crate) submissions: AtomicU64,
    pub(crate) ops_written: AtomicU64,
    pub(crate) ops_elided: AtomicU64,
    /// Submissions sent under a group so far (counted after they are in the channel).
    pub(crate) grouped_sent: AtomicU64,
    /// The next queue id the store must cover, raised by [`crate::Store::allocate_queue_id`]
    /// and written with the next commit.
    pub(crate) next_queue_id: AtomicU64,
    /// Numbers the groups (see [`Submission::group`]).
    pub(crate) next_group: AtomicU64,
    /// A snapshot found the handle refusing reads after a failed read: the writer reopens the
    /// file before its next batch (see [`crate::Store::snapshot`]).
    pub(crate) reopen_wanted: std::sync::atomic::AtomicBool,
    /// Commits carrying a message write still to fail on purpose
    /// ([`crate::Store::fail_next_commits`]).
    pub(crate) commits_to_fail: AtomicU64,
}

pub(crate) struct Writer {
    pub(crate) opener: Opener,
    pub(crate) db: Arc<DbSlot>,
    pub(crate) counters: Arc<Counters>,
    alarms: Arc<Alarms>,
    /// Taken while a batch is gathered (see [`crate::Store::group`]).
    gate: Arc<parking_lot::RwLock<()>>,
    /// What failed commits must still write, retried first in the next commit (see
    /// [`Carry::keep`]).
    carry: Carry,
    /// A commit (or a reopen) failed since the file was last opened: the next open verifies
    /// the file (every reopen first drops the file's cached pages, so that the writer never
    /// goes on from pages the disk may not hold: after a failed fsync the kernel may keep
    /// them, marked clean).
    verify_on_open: std::cell::Cell<bool>,
    /// The commit lag list of the held index ([`crate::Store::held_view`]).
    lag: Arc<Lag>,
    /// Releases of a failed batch that are not retried (a hold and its release that met in
    /// the batch), forgotten once its completions ran: until then a view still hides them,
    /// so a completion can tell that its failed hold had been released.
    releases_after_completions: LagKeys,
}

impl Writer {
    pub(crate) fn new(
        opener: Opener,
        db: Arc<DbSlot>,
        counters: Arc<Counters>,
        alarms: Arc<Alarms>,
        gate: Arc<parking_lot::RwLock<()>>,
        lag: Arc<Lag>,
    ) -> Self {
        Writer {
            opener,
            db,
            counters,
            alarms,
            gate,
            carry: Carry::default(),
            verify_on_open: std::cell::Cell::new(false),
            lag,
            releases_after_completions: LagKeys::default(),
        }
    }

    pub(crate) fn run(mut self, rx: Receiver<Submission>) {
        let max_batch = self.opener.options.max_batch.max(1);
        let max_ops = self.opener.options.max_batch_ops.max(1);
        let max_retry = self.opener.options.retry_interval.max(FIRST_RETRY);
        let mut retry = FIRST_RETRY;
        let mut batch: Vec<Submission> = Vec::new();
        // Grouped submissions taken from the channel so far.
        let mut grouped_taken = 0u64;
        loop {
            // While writes fail, nobody may submit again (the broker blocks publishers): probe
            // with an empty commit now and then, so that the alarm clears once the disk works.
            // What a failed commit left to retry is written the same way, without waiting for
            // someone to submit.
            let first = if self.alarms.failing() || !self.carry.is_empty() {
                match rx.recv_timeout(retry) {
                    Ok(first) => Some(first),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            } else {
                match rx.recv() {
                    Ok(first) => Some(first),
                    Err(_) => break,
                }
            };
            let Some(first) = first else {
                self.probe();
                retry = (retry * 2).min(max_retry);
                continue;
            };
            retry = FIRST_RETRY;
            let mut ops = first.ops.len();
            grouped_taken += u64::from(first.group.is_some());
            batch.push(first);
            // An open group (`Store::group`) is waited for: the rest of it joins this batch.
            let gate = self.gate.write();
            // Every group is closed now, and all it sent is in the channel and counted.
            let grouped_sent = self.counters.grouped_sent.load(Ordering::Acquire);
            // A transaction's dirty pages stay in memory until it commits: bulk submissions
            // split over several commits rather than make one huge one. A group is never
            // split, whatever its size (nor is a single submission).
            while (batch.len() < max_batch && ops < max_ops) || grouped_taken < grouped_sent {
                match rx.try_recv() {
                    Ok(next) => {
                        ops += next.ops.len();
                        grouped_taken += u64::from(next.group.is_some());
                        batch.push(next);
                    }
                    Err(_) => break,
                }
            }
            drop(gate);
            self.counters
                .submissions
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            let result = self.commit(&mut batch, false);
            let weight: u64 = batch.iter().map(|s| s.weight).sum();
            for submission in batch.drain(..) {
                if let Some(done) = submission.done {
                    let outcome: Completion = result.clone();
                    // A panicking callback must not take the writer (and every later confirm)
                    // down with it.
                    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| done(outcome))) {
                        tracing::error!(
                            panic = %panic_message(&panic),
                            "a store completion callback panicked"
                        );
                    }
                }
            }
            self.lag
                .settled(&std::mem::take(&mut self.releases_after_completions));
            self.after_batch();
            // After the completions: a publisher unblocked by this sees its confirms first.
            self.alarms.drained(weight);
        }
        if !self.carry.is_empty() {
            // Closing: what a failed commit left to retry gets its last chance.
            self.probe();
        }
        tracing::debug!("store writer stopped");
    }

    /// An empty commit (with what failed ones carried), to learn whether writes work again.
    fn probe(&mut self) {
        tracing::debug!("probing the store after a failed commit");
        let _ = self.commit(&mut [], true);
        self.lag
            .settled(&std::mem::take(&mut self.releases_after_completions));
        self.after_batch();
    }

    fn after_batch(&self) {
        if let Some(after) = &self.opener.options.after_batch {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| after())) {
                tracing::error!(
                    panic = %panic_message(&panic),
                    "the store's after-batch callback panicked"
                );
            }
        }
    }

    /// Commits `batch` (see [`Writer::commit_batch`]), then settles its holds and releases in
    /// the commit lag list before the completions run: once committed, all of them and what
    /// was carried; once failed, what is not carried into the next commit (its holds now, so
    /// that no read shows a hold that failed; its releases after the completions).
    fn commit(&mut self, batch: &mut [Submission], probe: bool) -> Completion {
        // Before the batch is elided: a hold and its release that meet in it are settled too.
        let in_batch = LagKeys::of(batch.iter().flat_map(|s| &s.ops));
        let in_carry = LagKeys::of(self.carry.ops());
        let result = self.commit_batch(batch, probe);
        match &result {
            Ok(_) => {
                self.lag.settled(&in_batch);
                self.lag.settled(&in_carry);
            }
            Err(_) => {
                // What the carry no longer holds: the batch's ops it did not keep, and those
                // it dropped as superseded (a release carried twice is settled once).
                let kept = LagKeys::of(self.carry.ops());
                let mut failed = in_carry.and(in_batch).without(&kept);
                self.releases_after_completions = failed.take_releases();
                self.lag.settled(&failed);
            }
        }
        result
    }

    /// Commits `batch`; a `probe` commits even with nothing to write (redb writes its header
    /// and syncs all the same), so that its outcome says whether the disk works.
    fn commit_batch(&mut self, batch: &mut [Submission], probe: bool) -> Completion {
        // Elision may empty a submission of the removal that makes it (and its group) retried.
        let retried = crate::carry::retry_marks(batch);
        let elided = elide(batch);
        self.counters
            .ops_elided
            .fetch_add(elided as u64, Ordering::Relaxed);
        let writes = batch.iter().map(|s| s.ops.len()).sum::<usize>() + self.carry.len();
        if writes == 0 && !probe {
            // Nothing to write; an empty submission still gets the file reopened after a
            // failure (`Store::snapshot` asks for that). A file that cannot be reopened is a
            // failing disk: the alarm's probes try again until it can.
            let reopened = self.database().map(|_| Receipt { commit: None });
            if reopened.is_err() {
                self.alarms.set(StoreAlarm::WritesFailing, true);
            }
            return reopened;
        }
        let db = match self.database() {
            Ok(db) => db,
            Err(e) => {
                self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "store reopen failed");
                self.carry.keep(batch, &retried);
                self.alarms.set(StoreAlarm::WritesFailing, true);
                return Err(e);
            }
        };
        if self.injected_failure(batch) {
            drop(db);
            self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("a store commit failed (injected by a test)");
            // Nothing was written, as for a real failure; the disk works, so no alarm.
            self.carry.keep(batch, &retried);
            return Err(StoreError::Injected {
                path: self.opener.path.clone(),
            });
        }
        match self.write_batch(db, batch) {
            Ok(()) => {
                self.carry.clear();
                self.alarms.set(StoreAlarm::WritesFailing, false);
                let commit = self.counters.commits.fetch_add(1, Ordering::Relaxed) + 1;
                self.counters
                    .ops_written
                    .fetch_add(writes as u64, Ordering::Relaxed);
                Ok(Receipt {
                    commit: Some(commit),
                })
            }
            Err(e) => {
                self.counters.failed_commits.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, "store commit failed");
                self.carry.keep(batch, &retried);
                self.alarms.set(StoreAlarm::WritesFailing, true);
                self.verify_on_open.set(true);
                // redb refuses every later operation on a handle that saw an I/O error: reopen
                // now, so that reads work again; if that fails too, the next batch tries again.
                self.close_database();
                if let Err(reopen) = self.database() {
                    tracing::warn!(error = %reopen, "store reopen failed; retried with the next batch");
                }
                Err(e)
            }
        }
    }

    /// Writes and commits `batch` on `db`. A handle that a failed read elsewhere (a
    /// snapshot's) left refusing every operation refuses the transaction before anything is
    /// written: the file is reopened and the batch written on the new handle, instead of
    /// failing it for a fault that was not its own.
    fn write_batch(&self, db: Arc<redb::Database>, batch: &[Submission]) -> Result<(), StoreError> {
        let written = self.write_caught(&db, batch);
        drop(db);
        match written {
            Err(Written::Refused(e)) => {
                tracing::info!(error = %e, "the store handle refused a write after a failed read; reopening it");
                self.close_database();
                let db = self.database()?;
                let written = self.write_caught(&db, batch);
                written.map_err(Written::into_error)
            }
            other => other.map_err(Written::into_error),
        }
    }

    fn write_caught(&self, db: &redb::Database, batch: &[Submission]) -> Result<(), Written> {
        match catch_unwind(AssertUnwindSafe(|| self.write(db, batch))) {
            Ok(result) => result,
            Err(panic) => Err(Written::Failed(StoreError::Database {
                path: self.opener.path.clone(),
                reason: format!("the commit panicked: {}", panic_message(&panic)),
            })),
        }
    }

    fn write(&self, db: &redb::Database, batch: &[Submission]) -> Result<(), Written> {
        let path = &self.opener.path;
        let mut tx = match db.begin_write() {
            Ok(tx) => tx,
            Err(TransactionError::Storage(StorageError::PreviousIo)) => {
                return Err(Written::Refused(StoreError::Closed))
            }
            Err(e) => return Err(Written::Failed(tx_error(path, e))),
        };
        self.fill(&mut tx, batch)
            .and_then(|()| tx.commit().map_err(|e| commit_error(path, e)))
            .map_err(Written::Failed)
    }

    /// Applies the carry and `batch` in `tx`, with the counters and indexes they change.
    fn fill(
        &self,
        tx: &mut redb::WriteTransaction,
        batch: &[Submission],
    ) -> Result<(), StoreError> {
        let path = &self.opener.path;
        tx.set_durability(Durability::Immediate)
            .map_err(|e| database_error(path, &e))?;
        tx.set_quick_repair(self.opener.options.quick_repair);
        {
            let mut tables = Tables::open(tx).map_err(|e| database_error(path, &e))?;
            let all = self
                .carry
                .ops()
                .iter()
                .chain(batch.iter().flat_map(|s| &s.ops));
            let mut forgets = Vec::new();
            for op in all {
                match op {
                    Op::Forget { queue, seq } => forgets.push((*queue, *seq)),
                    op => tables.apply(op).map_err(|e| storage_error(path, e))?,
                }
            }
            tables
                .forget_all(&mut forgets)
                .map_err(|e| storage_error(path, e))?;
            tables
                .write_queue_counts()
                .map_err(|e| storage_error(path, e))?;
            let next_delayed_seq = batch
                .iter()
                .flat_map(|s| &s.ops)
                .filter_map(|op| match op {
                    Op::Hold { id, .. } => id.seq.checked_add(1),
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            tables
                .finish_delayed()
                .map_err(|e| storage_error(path, e))?;
            tables
                .finish_streams()
                .map_err(|e| storage_error(path, e))?;
            tables
                .raise_counters(
                    next_delayed_seq,
                    self.counters.next_queue_id.load(Ordering::Acquire),
                )
                .map_err(|e| storage_error(path, e))?;
        }
        Ok(())
    }

    /// Whether this commit is one a test asked to fail: the next ones carrying a message write.
    fn injected_failure(&self, batch: &[Submission]) -> bool {
        let to_fail = &self.counters.commits_to_fail;
        to_fail.load(Ordering::Relaxed) != 0
            && batch.iter().flat_map(|s| &s.ops).any(|op| {
                matches!(
                    op,
                    Op::Persist { .. }
                        | Op::Hold { .. }
                        | Op::Spill { .. }
                        | Op::StreamAppend { .. }
                )
            })
            && to_fail
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }

    /// The open database, reopening it if a failure closed it: after a failed commit, from
    /// what the disk holds (the file's cached pages dropped first) and verified, or not at all
    /// (the alarm stays on, and the next probe tries again).
    fn database(&self) -> Result<Arc<redb::Database>, StoreError> {
        if self.counters.reopen_wanted.swap(false, Ordering::AcqRel) {
            tracing::info!("reopening the store file after a failed read");
            self.close_database();
        }
        if let Some(db) = self.db.read().as_ref() {
            return Ok(db.clone());
        }
        let path = &self.opener.path;
        let verify = self.verify_on_open.get();
        // Every reopen reads what the disk holds, whatever closed the file: closing it (redb
        // writes its header then) or a reopen that failed may have failed an fsync too, and
        // neither tells.
        crate::backend::forget_cached_pages(&self.opener.options, path);
        let mut db = self.opener.open().inspect_err(|_| {
            // It may have failed in an fsync (of its repair): verify the next one.
            self.verify_on_open.set(true);
        })?;
        if verify {
            match db.check_integrity() {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(path = %path.display(), "store file repaired on reopen")
                }
                Err(e) => {
                    return Err(StoreError::Damaged {
                        path: path.clone(),
                        reason: format!("verifying it after a failed commit: {e}"),
                    })
                }
            }
            self.verify_on_open.set(false);
        }
        let db = Arc::new(db);
        tracing::info!(path = %path.display(), verified = verify, "store reopened after a failure");
        *self.db.write() = Some(db.clone());
        Ok(db)
    }

    fn close_database(&self) {
        let Some(mut db) = self.db.write().take() else {
            return;
        };
        // Readers hold the handle briefly; the file can only be opened again once it is closed.
        for _ in 0..1000 {
            match Arc::try_unwrap(db) {
                Ok(db) => {
                    drop(db);
                    return;
                }
                Err(shared) => {
                    db = shared;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
        tracing::warn!("store readers kept the failed handle open; reopening may be refused");
    }
}

/// How a write went wrong.
enum Written {
    /// The handle refused it before anything was written (a failed read poisoned it).
    Refused(StoreError),
    /// It failed (maybe after some of it reached the disk).
    Failed(StoreError),
}

impl Written {
    fn into_error(self) -> StoreError {
        match self {
            Written::Refused(e) | Written::Failed(e) => e,
        }
    }
}

/// Drops a persist and a forget of the same message (and a hold and a release of the same
/// delayed message) that meet in one batch: nothing of it reached the disk, and nothing need.
/// A state write followed by a forget of its message in the batch is dropped too (the forget
/// stays unless its persist is dropped). Returns how many ops were dropped.
pub(crate) fn elide(batch: &mut [Submission]) -> usize {
    #[derive(PartialEq, Eq, Hash, Clone, Copy)]
    enum Key {
        Message(u64, u64),
        Delayed(u64),
    }
    // Where each not-yet-forgotten write of this batch sits.
    let mut written: IdHashMap<Key, (usize, usize)> = IdHashMap::default();
    // State writes not yet overtaken by a forget (a message may change state several times).
    let mut states: IdHashMap<(u64, u64), Vec<(usize, usize)>> = IdHashMap::default();
    let mut dead: Vec<(usize, usize)> = Vec::new();
    for (s, submission) in batch.iter().enumerate() {
        for (o, op) in submission.ops.iter().enumerate() {
            match op {
                Op::Persist { queue, seq, .. } => {
                    written.insert(Key::Message(*queue, *seq), (s, o));
                }
                Op::Hold { id, .. } => {
                    written.insert(Key::Delayed(id.seq), (s, o));
                }
                Op::SetState { queue, seq, .. } => {
                    states.entry((*queue, *seq)).or_default().push((s, o));
                }
                Op::Forget { queue, seq } => {
                    // The forget removes any state record: a state written just before it in
                    // the same commit is useless (the hot path persist, deliver, ack writes
                    // nothing at all).
                    if let Some(at) = states.remove(&(*queue, *seq)) {
                        dead.extend(at);
                    }
                    if let Some(at) = written.remove(&Key::Message(*queue, *seq)) {
                        dead.extend([at, (s, o)]);
                    }
                }
                Op::Release { id } => {
                    if let Some(at) = written.remove(&Key::Delayed(id.seq)) {
                        dead.extend([at, (s, o)]);
                    }
                }
                // A purge or a queue deletion removes what it finds; an elided persist before
                // it simply is not there.
                _ => {}
            }
        }
    }
    if dead.is_empty() {
        return 0;
    }
    dead.sort_unstable();
    // One pass over the batch, whatever the number of dropped ops.
    let mut next = dead.iter().peekable();
    for (s, submission) in batch.iter_mut().enumerate() {
        let mut o = 0;
        submission.ops.retain(|_| {
            let drop_it = next.next_if(|&&at| at == (s, o)).is_some();
            o += 1;
            !drop_it
        });
    }
    dead.len()
}

fn database_error(path: &std::path::Path, e: &dyn std::fmt::Display) -> StoreError {
    StoreError::Database {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn storage_error(path: &std::path::Path, e: StorageError) -> StoreError {
    match e {
        StorageError::Io(io) => StoreError::io(path, "writing", io),
        other => database_error(path, &other),
    }
}

fn tx_error(path: &std::path::Path, e: TransactionError) -> StoreError {
    match e {
        TransactionError::Storage(s) => storage_error(path, s),
        other => database_error(path, &other),
    }
}

fn commit_error(path: &std::path::Path, e: CommitError) -> StoreError {
    match e {
        CommitError::Storage(s) => storage_error(path, s),
        other => database_error(path, &other),
    }
}
