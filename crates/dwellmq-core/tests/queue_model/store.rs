//! A store as the queue's owner sees one: submissions committed in order, a whole commit at
//! a time, a failed commit carrying its removals into the next one (the real writer's rule),
//! and reads from a snapshot of what was committed.

use std::collections::{BTreeMap, VecDeque};

use dwellmq_core::paging::{assemble_page, Page, PageRequest, StoredEntry};
use dwellmq_core::PackedMessage;

/// A stored message.
#[derive(Debug, Clone)]
pub struct Record {
    pub message: PackedMessage,
    pub expires_at: Option<u64>,
    pub redelivered: bool,
}

/// One write.
#[derive(Debug, Clone)]
pub enum Write {
    Persist { seq: u64, record: Record },
    Spill { seq: u64, record: Record },
    Forget { seq: u64 },
    Redelivered { seq: u64 },
    Unspill { from: u64, end: u64 },
    ForgetRange { from: u64, end: u64 },
}

impl Write {
    /// What a failed commit carries into the next one (the real `Op::is_retried`).
    fn is_retried(&self) -> bool {
        !matches!(self, Write::Persist { .. } | Write::Spill { .. })
    }
}

/// Who hears of a submission's commit.
pub type Done = Box<dyn FnOnce(bool)>;

struct Submission {
    writes: Vec<Write>,
    done: Option<Done>,
}

/// The committed tables.
#[derive(Debug, Clone, Default)]
pub struct Tables {
    pub persisted: BTreeMap<u64, Record>,
    pub spilled: BTreeMap<u64, Record>,
}

/// The store.
#[derive(Default)]
pub struct FakeStore {
    pub committed: Tables,
    pending: VecDeque<Submission>,
    carry: Vec<Write>,
    pub commits: u64,
    pub failed_commits: u64,
}

impl FakeStore {
    pub fn submit(&mut self, writes: Vec<Write>, done: Option<Done>) {
        if writes.is_empty() && done.is_none() {
            return;
        }
        self.pending.push_back(Submission { writes, done });
    }

    pub fn pending(&self) -> usize {
        self.pending.len() + usize::from(!self.carry.is_empty())
    }

    /// Commits the first `n` submissions as one commit, or fails it.
    pub fn commit(&mut self, n: usize, ok: bool) {
        let n = n.min(self.pending.len());
        let batch: Vec<Submission> = self.pending.drain(..n).collect();
        if ok {
            for write in std::mem::take(&mut self.carry) {
                self.apply(write);
            }
            for submission in &batch {
                for write in &submission.writes {
                    self.apply(write.clone());
                }
            }
            self.commits += 1;
        } else {
            self.failed_commits += 1;
            for submission in &batch {
                if submission.writes.iter().any(Write::is_retried) {
                    self.carry.extend(submission.writes.iter().cloned());
                }
            }
        }
        for submission in batch {
            if let Some(done) = submission.done {
                done(ok);
            }
        }
    }

    fn apply(&mut self, write: Write) {
        let t = &mut self.committed;
        match write {
            Write::Persist { seq, record } => {
                t.persisted.insert(seq, record);
            }
            Write::Spill { seq, record } => {
                t.spilled.insert(seq, record);
            }
            Write::Forget { seq } => {
                t.persisted.remove(&seq);
            }
            Write::Redelivered { seq } => {
                if let Some(record) = t.persisted.get_mut(&seq) {
                    record.redelivered = true;
                }
            }
            Write::Unspill { from, end } => {
                let keys: Vec<u64> = t.spilled.range(from..end).map(|(&k, _)| k).collect();
                for key in keys {
                    t.spilled.remove(&key);
                }
            }
            Write::ForgetRange { from, end } => {
                let keys: Vec<u64> = t.persisted.range(from..end).map(|(&k, _)| k).collect();
                for key in keys {
                    t.persisted.remove(&key);
                }
            }
        }
    }
}

/// The page `request` asks for, read from `tables` as the broker's page reader reads it:
/// both tables merged by position, then cut at the request's end, limit and byte budget.
pub fn read(tables: &Tables, request: PageRequest, max_bytes: u64) -> Page {
    let entry = |(&seq, record): (&u64, &Record), spilled: bool| StoredEntry {
        seq,
        message: record.message.clone(),
        expires_at: record.expires_at,
        redelivered: record.redelivered,
        spilled,
    };
    let mut merged: Vec<StoredEntry> = tables
        .persisted
        .range(request.from_seq..)
        .take(request.limit)
        .map(|r| entry(r, false))
        .chain(
            tables
                .spilled
                .range(request.from_seq..)
                .take(request.limit)
                .map(|r| entry(r, true)),
        )
        .collect();
    merged.sort_by_key(|e| e.seq);
    merged.truncate(request.limit);
    assemble_page(merged, request, max_bytes)
}
