//! The store handle: open, submit, read.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::alarm::{weight, Alarms};
use crate::error::{Result, StoreError};
use crate::lag::{HeldView, Lag, LagKeys};
use crate::open::{lock_dir, DbSlot, Opener, StoreOptions};
use crate::ops::{Completion, Op};
use crate::read::Snapshot;
use crate::writer::{Counters, Submission, Writer};
use dwellmq_core::schedule::DeadlineId;

/// What the writer has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Durable commits.
    pub commits: u64,
    /// Batches that failed, in their commit or in reopening the file after an earlier
    /// failure (every submission in them got the error).
    pub failed_commits: u64,
    /// Submissions taken in.
    pub submissions: u64,
    /// Ops written.
    pub ops_written: u64,
    /// Ops dropped because a later op in the same batch undid them.
    pub ops_elided: u64,
}

/// A store on a data directory. Share it (`Arc<Store>`): every method takes `&self`.
pub struct Store {
    dir: PathBuf,
    path: PathBuf,
    db: Arc<DbSlot>,
    counters: Arc<Counters>,
    alarms: Arc<Alarms>,
    /// Held (shared) by [`Store::group`]s, taken (exclusively) by the writer while it
    /// gathers a batch: what a group submits goes into one commit.
    gate: Arc<parking_lot::RwLock<()>>,
    /// Holds and releases submitted and not committed yet (see [`Store::held_view`]).
    lag: Arc<Lag>,
    // Behind locks so that a shared store can be shut down (`Store::shutdown`) by whoever
    // holds it last in mind, while other `Arc`s to it may linger.
    sender: parking_lot::RwLock<Option<Sender<Submission>>>,
    writer: parking_lot::Mutex<Option<JoinHandle<()>>>,
    writer_id: std::thread::ThreadId,
    // Held for the store's lifetime; released last, after the database is closed.
    lock: parking_lot::Mutex<Option<File>>,
    /// The format this open upgraded the file from, if it did.
    upgraded_from: Option<u32>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens the store in `dir`, creating both if absent, with default options.
    pub fn open(dir: impl AsRef<Path>) -> Result<Store> {
        Store::open_with(dir, StoreOptions::default())
    }

    /// Opens the store in `dir`. Refused if another store holds the directory; a file that is
    /// not a dwellmq store, or is damaged, is an error naming it and is left as it is.
    pub fn open_with(dir: impl AsRef<Path>, options: StoreOptions) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        let dir_is_new = !dir.exists();
        let lock = lock_dir(&dir)?;
        let opener = Opener::new(&dir, options);
        let path = opener.path.clone();
        // A start reads what the disk holds, not pages a failed fsync left in the kernel's
        // cache (an earlier store in this process, or a process that died before its writer
        // reopened the file, may have left some).
        crate::backend::forget_cached_pages(&opener.options, &path);
        let (db, upgraded_from) = opener.open_upgrading()?;
        // The file (and the lock file) may have just been created: their entries reach the
        // disk with the directory's fsync, before anything is acknowledged.
        sync_dirs(&opener.options, &dir, dir_is_new)?;
        crate::open::drop_spilled(&db, &path)?;
        let db = Arc::new(db);
        let counters = Arc::new(Counters::default());
        let slot: Arc<DbSlot> = Arc::new(parking_lot::RwLock::new(Some(db)));
        let store_read = Snapshot::new(&slot, &path)?;
        counters
            .next_queue_id
            .store(store_read.next_queue_id()?, Ordering::Release);
        drop(store_read);
        let alarms = Arc::new(Alarms::new(
            opener.options.on_alarm.clone(),
            opener.options.backlog_high,
            opener.options.backlog_low,
        ));
        let gate = Arc::new(parking_lot::RwLock::new(()));
        let lag = Arc::new(Lag::default());
        let (sender, receiver) = mpsc::channel();
        let writer = Writer::new(
            opener,
            slot.clone(),
            counters.clone(),
            alarms.clone(),
            gate.clone(),
            lag.clone(),
        );
        let handle = std::thread::Builder::new()
            .name("dwellmq-store".into())
            .spawn(move || writer.run(receiver))
            .map_err(|e| StoreError::io(&path, "starting the writer thread", e))?;
        tracing::info!(path = %path.display(), "store open");
        Ok(Store {
            dir,
            path,
            db: slot,
            counters,
            alarms,
            gate,
            lag,
            sender: parking_lot::RwLock::new(Some(sender)),
            writer_id: handle.thread().id(),
            writer: parking_lot::Mutex::new(Some(handle)),
            lock: parking_lot::Mutex::new(Some(lock)),
            upgraded_from,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The store format this open upgraded the file from (in one commit, before anything
    /// else was written), or `None` if it was of this build's format already or new.
    pub fn upgraded_from(&self) -> Option<u32> {
        self.upgraded_from
    }

    /// Queues `ops` for the next commit; `done` is called on the writer thread once the commit
    /// holding them is durable, or failed. A failed commit stores nothing of them, except that
    /// a submission holding a removal is retried whole with the next commit, and with it every
    /// submission of the [`Store::group`] it was sent in: a failure never turns into a partial
    /// commit of what must survive together. Never blocks.
    pub fn submit(&self, ops: Vec<Op>, done: impl FnOnce(Completion) + Send + 'static) {
        self.send(Submission {
            weight: weight(&ops),
            ops,
            done: Some(Box::new(done)),
            group: None,
        });
    }

    /// Queues `ops` without asking to hear back (removals: forgets, releases).
    pub fn submit_detached(&self, ops: Vec<Op>) {
        self.send(Submission {
            weight: weight(&ops),
            ops,
            done: None,
            group: None,
        });
    }

    /// Submits `ops` and waits for their commit (definitions, start-up, tests). Not from a
    /// completion (the writer would wait for itself): that gets `Closed`.
    pub fn write(&self, ops: Vec<Op>) -> Completion {
        if self.on_writer_thread() {
            return Err(StoreError::Closed);
        }
        let (tx, rx) = mpsc::sync_channel(1);
        self.submit(ops, move |outcome| {
            let _ = tx.send(outcome);
        });
        rx.recv().unwrap_or(Err(StoreError::Closed))
    }

    fn send(&self, mut submission: Submission) {
        let sender = self.sender.read();
        let Some(sender) = sender.as_ref() else {
            fail(submission);
            return;
        };
        // Listed before the writer can see it, so that its commit finds it to forget.
        self.lag.submitted(&submission.ops);
        let group = GROUP.with(|g| {
            let (key, depth, id) = g.get();
            (key == self.group_key() && depth > 0).then_some(id)
        });
        let grouped = group.is_some();
        submission.group = group;
        let weight = submission.weight;
        self.alarms.queued(weight);
        if let Err(mpsc::SendError(submission)) = sender.send(submission) {
            self.alarms.drained(weight);
            self.lag.settled(&LagKeys::of(&submission.ops));
            fail(submission);
        } else if grouped {
            // After the send: the writer takes every submission counted here.
            self.counters.grouped_sent.fetch_add(1, Ordering::Release);
        }
    }

    /// Tells this store's groups from another store's on the same thread.
    fn group_key(&self) -> usize {
        Arc::as_ptr(&self.gate) as usize
    }

    /// While the returned guard lives, the writer does not gather a batch, and what this
    /// thread submits meanwhile goes into one commit, however far it exceeds the batch limits
    /// (`StoreOptions::max_batch` / `max_batch_ops`; other threads' submissions join it as
    /// far as the limits allow). A delayed release's `Persist`s and its `Release` are submitted
    /// under one group, so that a crash cannot leave the message both in its queue and held.
    /// Hold it briefly: commits wait for it.
    pub fn group(&self) -> Group<'_> {
        let gate = self.gate.read_recursive();
        let key = self.group_key();
        GROUP.with(|g| {
            let (current, depth, id) = g.get();
            g.set(if current == key && depth > 0 {
                (key, depth + 1, id)
            } else {
                let id = self.counters.next_group.fetch_add(1, Ordering::Relaxed) + 1;
                (key, 1, id)
            });
        });
        Group { _gate: gate }
    }

    /// Octets queued for the writer and not yet committed (what the backlog alarm watches).
    pub fn backlog_bytes(&self) -> u64 {
        self.alarms.backlog()
    }

    /// Whether the last commit failed (the write alarm is on).
    pub fn writes_failing(&self) -> bool {
        self.alarms.failing()
    }

    /// Fails the next `n` commits that carry a message write (a persist or a hold) as a failed
    /// write would: nothing of the batch is written, its submitters get
    /// [`StoreError::Injected`], and what it must retry is retried (see [`Store::submit`]).
    /// The disk works, so no alarm is raised. 0 clears it. The test double's fault.
    pub fn fail_next_commits(&self, n: u64) {
        self.counters.commits_to_fail.store(n, Ordering::Relaxed);
    }

    /// Commits still to fail on purpose (see [`Store::fail_next_commits`]).
    pub fn commits_to_fail(&self) -> u64 {
        self.counters.commits_to_fail.load(Ordering::Relaxed)
    }

    /// A fresh id for a durable queue (ids are never reused, even after a restart).
    pub fn allocate_queue_id(&self) -> u64 {
        self.counters.next_queue_id.fetch_add(1, Ordering::AcqRel)
    }

    /// A consistent view of what is committed (recovery, refilling the far tier, reading a
    /// body). Hold it briefly: the writer waits for open snapshots before reopening the file
    /// after an I/O error. While the writer has the file closed after a failure (it reopens
    /// and verifies it with its next probe) this is `Closed` at once: it never waits for the
    /// writer, whose completions may need the caller's locks.
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.open_snapshot()
    }

    /// A snapshot; when the open handle refuses it (a read failed, and redb refuses every
    /// later operation on a handle that saw an I/O error), the writer is asked to reopen the
    /// file, so that reads work again without waiting for a write to fail first.
    fn open_snapshot(&self) -> Result<Snapshot> {
        let snapshot = Snapshot::new(&self.db, &self.path);
        if matches!(snapshot, Err(StoreError::Closed)) && self.db.read().is_some() {
            self.counters.reopen_wanted.store(true, Ordering::Release);
            // Straight into the channel, taking no other lock: `held_view` calls this under
            // the commit lag's mutex.
            if let Some(sender) = self.sender.read().as_ref() {
                let _ = sender.send(Submission {
                    ops: Vec::new(),
                    weight: 0,
                    done: None,
                    group: None,
                });
            }
        }
        snapshot
    }

    /// The held-message index as submitted: [`Store::snapshot`] with the holds submitted and
    /// not committed yet shown, and the releases submitted and not committed yet hidden (a
    /// far tier reads this, so it need not track its own writes until they commit). A failed
    /// hold leaves it (its submitter heard of the failure); a failed release stays hidden, as
    /// the writer retries it until it commits. Never waits for the writer, as `snapshot`.
    pub fn held_view(&self) -> Result<HeldView> {
        self.lag.view(|| self.open_snapshot())
    }

    /// Whether a hold of `id` is submitted and not settled: not committed yet, or carried into
    /// the next commit by a failed one (a hold in a group the writer retries). A completion of
    /// a failed hold asks this to know whether the writer still writes it.
    pub fn hold_submitted(&self, id: DeadlineId) -> bool {
        self.lag.holds(id)
    }

    /// Whether a release of `id` is submitted and not committed yet (a failed batch's
    /// releases that the writer does not retry, a hold and its release that met in it, count
    /// until its completions ran). Needs no snapshot, so it answers while the file is closed.
    pub fn release_submitted(&self, id: DeadlineId) -> bool {
        self.lag.releases(id)
    }

    /// How many (holds, releases) are submitted and not settled yet: for tests.
    pub fn lag_len(&self) -> (usize, usize) {
        self.lag.len()
    }

    fn on_writer_thread(&self) -> bool {
        self.writer_id == std::thread::current().id()
    }

    /// The writer's counters.
    pub fn stats(&self) -> StoreStats {
        let c = &self.counters;
        StoreStats {
            commits: c.commits.load(Ordering::Relaxed),
            failed_commits: c.failed_commits.load(Ordering::Relaxed),
            submissions: c.submissions.load(Ordering::Relaxed),
            ops_written: c.ops_written.load(Ordering::Relaxed),
            ops_elided: c.ops_elided.load(Ordering::Relaxed),
        }
    }

    /// Commits what is queued, stops the writer and closes the file.
    pub fn close(self) {
        self.shutdown();
    }

    /// As [`Store::close`], through a shared handle: commits what is queued, stops the writer,
    /// closes the file and releases the directory's lock. Later submissions fail with
    /// `Closed`. A broker calls this at shutdown, whatever else still holds the store.
    pub fn shutdown(&self) {
        self.sender.write().take();
        let writer = self.writer.lock().take();
        if let Some(writer) = writer {
            // The last handle may go in a completion, on the writer thread itself: that thread
            // finishes the queue and stops on its own.
            if writer.thread().id() == std::thread::current().id() {
                return;
            }
            if writer.join().is_err() {
                tracing::error!("the store writer thread panicked");
            }
            let stats = self.stats();
            tracing::info!(
                path = %self.path.display(),
                commits = stats.commits,
                failed_commits = stats.failed_commits,
                submissions = stats.submissions,
                ops_written = stats.ops_written,
                ops_elided = stats.ops_elided,
                "store writer stopped"
            );
        }
        self.db.write().take();
        self.lock.lock().take();
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Makes the data directory's entries durable, and the directory's own entry in its parent if
/// this start created it.
fn sync_dirs(options: &StoreOptions, dir: &Path, dir_is_new: bool) -> Result<()> {
    crate::backend::sync_dir(options, dir)
        .map_err(|e| StoreError::io(dir, "syncing the data directory", e))?;
    let parent = dir.parent().map(|p| match p.as_os_str().is_empty() {
        true => Path::new("."),
        false => p,
    });
    if let Some(parent) = parent.filter(|_| dir_is_new) {
        // The directory was just created: its own entry is durable with its parent's fsync.
        // Best effort: the parent may not be ours to open.
        if let Err(e) = crate::backend::sync_dir(options, parent) {
            tracing::warn!(dir = %parent.display(), error = %e, "syncing the data directory's parent");
        }
    }
    Ok(())
}

fn fail(submission: Submission) {
    if let Some(done) = submission.done {
        done(Err(StoreError::Closed));
    }
}

thread_local! {
    /// The store whose group this thread holds (by [`Store::group_key`]), how deep, and the
    /// group's number.
    static GROUP: std::cell::Cell<(usize, u32, u64)> = const { std::cell::Cell::new((0, 0, 0)) };
}

/// A store group (see [`Store::group`]): what this thread submits while it lives commits
/// together.
pub struct Group<'a> {
    _gate: parking_lot::RwLockReadGuard<'a, ()>,
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        GROUP.with(|g| {
            let (key, depth, id) = g.get();
            g.set(match depth {
                0 | 1 => (0, 0, 0),
                deeper => (key, deeper - 1, id),
            });
        });
    }
}
