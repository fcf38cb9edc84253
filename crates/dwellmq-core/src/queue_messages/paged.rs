//! A paging queue's ready list beyond its in-memory head: the run left in the store, the
//! messages behind it, what the store is asked to write for them, the pages read back, and
//! the run's messages that expire where they are.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::{give_back_slots, Kept, QueueMessages, SpilledMessage, Waiting};
use crate::paging::{Page, PageRequest, PagedRun, Paging, RunDeadlines, StoredEntry};

/// A paging queue's ready list beyond its in-memory head: the run of messages only the store
/// holds, then the messages that came in since it began, in memory until their store write
/// is committed and they join the run. `len` and `ready_bytes` count all of it.
#[derive(Debug)]
pub(super) struct Paged {
    pub(super) run: PagedRun,
    /// Behind the run, in queue order. A transient message, or one whose write failed, never
    /// joins the run: it stays here, and so does what came after it, until the run is read.
    pub(super) tail: VecDeque<Waiting>,
    pub(super) tail_bytes: u64,
    /// Positions of messages that left the run or the tail while the store may still hold
    /// their record, each with the mark its removal was submitted under (see
    /// [`QueueMessages::take_removals_mark`]): a page that finds one skips it.
    pub(super) holes: BTreeMap<u64, u64>,
    /// When the run's messages may expire, by stretch.
    pub(super) deadlines: RunDeadlines,
}

impl Paged {
    fn new(run: PagedRun, tail: VecDeque<Waiting>, tail_bytes: u64) -> Paged {
        Paged {
            run,
            tail,
            tail_bytes,
            holes: BTreeMap::new(),
            deadlines: RunDeadlines::default(),
        }
    }

    pub(super) fn is_stored(&self, seq: u64) -> bool {
        (self.run.first_seq..self.run.end_seq).contains(&seq) && !self.holes.contains_key(&seq)
    }
}

/// A message the store does not have (or lost), handed to the owner to write.
#[derive(Debug)]
pub(crate) struct MissingWrite {
    /// Its position.
    pub seq: u64,
    /// The message as the list keeps it.
    pub message: SpilledMessage,
    /// When it expires.
    pub expires_at: Option<u64>,
    /// Persisted again (a durable queue's persistent message whose persist failed), rather
    /// than spilled.
    pub persist: bool,
}

impl QueueMessages {
    /// A queue that comes back from the store with `run` not read (a restart): counted,
    /// not in memory, its deadlines unknown until its stretches are read. Only for a queue
    /// without priorities and without a run.
    pub fn restore_run(&mut self, run: PagedRun) {
        if run.count == 0 || self.levels.len() != 1 || self.paged.is_some() {
            return;
        }
        self.len += run.count as usize;
        self.ready_bytes += run.bytes;
        self.next_seq = self.next_seq.max(run.end_seq);
        let mut paged = Paged::new(run, VecDeque::new(), 0);
        paged.deadlines = RunDeadlines::unknown(run.first_seq);
        self.paged = Some(paged);
    }

    /// Leaves messages beyond the window in the store only: with no run yet, those behind
    /// the window's first messages from the first one `stored` says is committed (never a
    /// transient one); with a run, the committed ones behind it, in order. Each message
    /// with an expiry that leaves memory is reported to `unindexed` (seq, expires_at). Only
    /// for a queue without priorities (one level).
    pub fn page_out(
        &mut self,
        window: Paging,
        stored: impl Fn(u64) -> bool,
        mut unindexed: impl FnMut(u64, u64),
    ) {
        if self.levels.len() != 1 {
            return;
        }
        let pageable = |w: &Waiting| w.written && stored(w.seq);
        if self.paged.is_none() {
            let head = &mut self.levels[0];
            let Some(keep) = beyond_window(window, head.len(), self.ready_bytes) else {
                return;
            };
            // A run starts above every message handed out (they come back in front of it):
            // those that came back beyond the window stay in memory, not what follows them.
            let taken = self.taken_high;
            let above_taken = head.partition_point(|w| taken.is_some_and(|t| w.seq <= t));
            let start = keep.max(above_taken);
            let Some(first) = head.get(start) else {
                return;
            };
            if !pageable(first) {
                return;
            }
            let first_seq = first.seq;
            let tail = head.split_off(start);
            let tail_bytes = tail.iter().map(|w| w.body_len() as u64).sum();
            let run = PagedRun {
                first_seq,
                end_seq: first_seq,
                count: 0,
                bytes: 0,
            };
            let mut paged = Paged::new(run, tail, tail_bytes);
            paged.holes = std::mem::take(&mut self.loose_holes).split_off(&first_seq);
            self.paged = Some(paged);
        }
        let Some(paged) = self.paged.as_mut() else {
            return;
        };
        while paged.tail.front().is_some_and(&pageable) {
            let Some(waiting) = paged.tail.pop_front() else {
                break;
            };
            let body = waiting.body_len() as u64;
            paged.tail_bytes -= body;
            paged.run.end_seq = waiting.seq + 1;
            paged.run.count += 1;
            paged.run.bytes += body;
            self.packed_footprint -= waiting.packed_footprint();
            paged.deadlines.append(
                waiting.seq,
                waiting.expires_at(),
                body,
                window.stretch_limits(),
            );
            if let Some(at) = waiting.expires_at() {
                unindexed(waiting.seq, at);
            }
        }
        give_back_slots(&mut paged.tail);
    }

    /// Writes what lies beyond the window and the store does not have: under memory
    /// pressure (`pressed`) the messages never written, and always those whose write failed
    /// (`lost`, looked for only when `any_lost`), at most `budget` of them. A durable queue's
    /// persistent message whose persist failed is persisted again (the same record: a
    /// second write cannot make a second message); any other is spilled. Each is marked
    /// written and handed to `write`; once that write is committed,
    /// [`QueueMessages::page_out`] takes it into the run like any stored one. Only for a
    /// queue without priorities (one level).
    pub(crate) fn write_missing(
        &mut self,
        window: Paging,
        pressed: bool,
        lost: Option<&dyn Fn(u64) -> bool>,
        budget: usize,
        mut write: impl FnMut(MissingWrite),
    ) {
        if self.levels.len() != 1 || (!pressed && lost.is_none()) {
            return;
        }
        let has_run = self.paged.is_some();
        let bytes = self.ready_bytes;
        let stores_persistent = self.stores_persistent;
        let list = match &mut self.paged {
            Some(paged) => &mut paged.tail,
            None => &mut self.levels[0],
        };
        // Messages inside the window stay in memory: with no run, the window's first ones.
        let keep = if has_run {
            0
        } else {
            match beyond_window(window, list.len(), bytes) {
                Some(keep) => keep,
                None => return,
            }
        };
        let Some(first) = list.get(keep) else {
            return;
        };
        let is_lost = |w: &Waiting| lost.is_some_and(|lost| lost(w.seq));
        let missing = |w: &Waiting| (pressed && !w.written) || is_lost(w);
        // What holds paging up is looked at again, whatever was looked at before (a requeue
        // moves messages back behind the window); a lost write anywhere beyond the window.
        if missing(first) {
            self.spill_from = self.spill_from.min(first.seq);
        }
        let from = if lost.is_some() { 0 } else { self.spill_from };
        let start = list.partition_point(|w| w.seq < from).max(keep);
        let mut left = budget;
        for waiting in list.range_mut(start..) {
            if !missing(waiting) {
                continue;
            }
            if left == 0 {
                // The rest on a later command, once earlier writes have committed.
                self.spill_from = self.spill_from.min(waiting.seq);
                return;
            }
            left -= 1;
            let persist = stores_persistent && waiting.persistent && !waiting.spilled;
            waiting.written = true;
            if !persist {
                waiting.spilled = true;
                self.spilled_any = true;
            }
            let message = match &waiting.kept {
                Kept::Packed(packed) => SpilledMessage::Packed(packed.clone()),
                Kept::Shared(message) => SpilledMessage::Shared(Arc::clone(message)),
            };
            write(MissingWrite {
                seq: waiting.seq,
                message,
                expires_at: waiting.expires_at(),
                persist,
            });
        }
        if pressed {
            self.spill_from = self.next_seq;
        }
    }

    /// Whether anything was ever spilled.
    pub fn has_spilled(&self) -> bool {
        self.spilled_any
    }

    /// The ranges of spilled records no longer needed since the last call: (from, end) each.
    pub fn take_unspilled(&mut self) -> std::vec::Drain<'_, (u64, u64)> {
        self.unspilled.drain(..)
    }

    pub(super) fn unspill(&mut self, from: u64, end: u64) {
        match self.unspilled.last_mut() {
            Some(last) if last.1 == from => last.1 = end,
            _ => self.unspilled.push((from, end)),
        }
    }

    /// Takes a page of the run back into memory, behind the head, each message with an
    /// expiry reported to `indexed` (seq, expires_at). A page that does not start where the
    /// run does now (another read got there first) is dropped. Once the run is read whole,
    /// what came in behind it joins the head; a run the store held fewer messages of than it
    /// counted (malformed records skipped) leaves the counts.
    pub fn page_in(&mut self, page: Page, from_seq: u64, mut indexed: impl FnMut(u64, u64)) {
        let Some(paged) = self.paged.as_mut() else {
            return;
        };
        if from_seq != paged.run.first_seq {
            return;
        }
        if page.entries.iter().any(|entry| entry.spilled) {
            // Read back, a spilled message needs its record no more (nothing below the page's
            // end is in the run or the tail now); it is written again if it must leave memory.
            let end = page.next_seq;
            self.unspilled.push((from_seq, end));
        }
        for entry in page.entries {
            if !paged.is_stored(entry.seq) {
                continue;
            }
            let waiting = Waiting::stored(entry);
            paged.run.count = paged.run.count.saturating_sub(1);
            paged.run.bytes = paged.run.bytes.saturating_sub(waiting.body_len() as u64);
            self.packed_footprint += waiting.packed_footprint();
            if let Some(at) = waiting.expires_at() {
                indexed(waiting.seq, at);
            }
            self.levels[0].push_back(waiting);
        }
        paged.run.count = paged.run.count.saturating_sub(page.skipped);
        paged.run.first_seq = paged.run.first_seq.max(page.next_seq);
        let first = paged.run.first_seq;
        paged.holes = paged.holes.split_off(&first);
        paged.deadlines.front_moved(first);
        // `exhausted` speaks of the run as the request knew it: messages whose commit came
        // while the page was read may have joined it since, behind where the page ended.
        let exhausted = page.exhausted && page.next_seq >= paged.run.end_seq;
        if paged.run.count == 0 || exhausted || first >= paged.run.end_seq {
            self.end_run();
        }
    }

    /// A page read to expire what is due in a stretch of the run (`request`): the messages
    /// of the run it holds whose deadline is at or before `now_ms` leave the queue where
    /// they are, each handed to `expired` (its record's removal is the owner's: a spilled
    /// one's is queued here), and the stretch's earliest deadline becomes what the others
    /// say. The store may still show an expired one until its removal is committed: it is a
    /// hole until then.
    pub fn expire_in_run(
        &mut self,
        request: PageRequest,
        page: Page,
        now_ms: u64,
        mut expired: impl FnMut(StoredEntry),
    ) {
        let Some(paged) = self.paged.as_mut() else {
            return;
        };
        let from = request.from_seq.max(paged.run.first_seq);
        let end = page.next_seq;
        if end <= from {
            return;
        }
        let mark = self.removal_mark;
        let mut earliest: Option<u64> = None;
        let (mut expired_any, mut gone) = (false, Vec::new());
        for entry in page.entries {
            if entry.seq < from || !paged.is_stored(entry.seq) {
                continue;
            }
            match entry.expires_at {
                Some(at) if at <= now_ms => {
                    let body = entry.message.body_len() as u64;
                    paged.run.count = paged.run.count.saturating_sub(1);
                    paged.run.bytes = paged.run.bytes.saturating_sub(body);
                    self.len -= 1;
                    self.ready_bytes -= body;
                    paged.holes.insert(entry.seq, mark);
                    expired_any = true;
                    if entry.spilled {
                        gone.push(entry.seq);
                    }
                    expired(entry);
                }
                Some(at) => earliest = Some(earliest.map_or(at, |e: u64| e.min(at))),
                None => {}
            }
        }
        let end = (end < paged.run.end_seq).then_some(end);
        paged.deadlines.read_back(from, end, earliest);
        let run_over = paged.run.count == 0;
        self.marked |= expired_any;
        for seq in gone {
            self.unspill(seq, seq + 1);
        }
        if run_over {
            self.end_run();
        }
    }

    /// The run is read whole (or nothing of it is left): what came in behind it joins the
    /// head, and a run the store held fewer messages of than it counted leaves the counts.
    fn end_run(&mut self) {
        if let Some(paged) = self.paged.take() {
            // Removals not known committed: a later run may span them.
            self.loose_holes.extend(paged.holes);
            self.len -= paged.run.count as usize;
            self.ready_bytes -= paged.run.bytes;
            self.levels[0].extend(paged.tail);
        }
    }

    /// The store removals of messages in or behind the run asked for since the last call,
    /// numbered: `Some(mark)` when there were any. The owner reports their commit with
    /// [`QueueMessages::removals_committed`], and until then a page skips those messages.
    pub fn take_removals_mark(&mut self) -> Option<u64> {
        if !std::mem::take(&mut self.marked) {
            return None;
        }
        let mark = self.removal_mark;
        self.removal_mark += 1;
        Some(mark)
    }

    /// The removals numbered up to `mark` are committed: the store no longer shows those
    /// messages to a read that starts from now on (the caller makes sure none is in flight).
    pub fn removals_committed(&mut self, mark: u64) {
        if let Some(paged) = self.paged.as_mut() {
            paged.holes.retain(|_, &mut hole| hole > mark);
        }
        self.loose_holes.retain(|_, &mut hole| hole > mark);
    }

    /// The stretch of the run due first: (its earliest deadline, its first position, the
    /// first position after it if it is not the last).
    pub fn run_first_due(&self) -> Option<(u64, u64, Option<u64>)> {
        let paged = self.paged.as_ref()?;
        let (at, from, end) = paged.deadlines.first_due()?;
        Some((at, from.max(paged.run.first_seq), end))
    }

    /// The earliest deadline of the run's first stretch: what a head-only expiry waits for
    /// when nothing is in memory in front of the run.
    pub fn run_front_deadline(&self) -> Option<u64> {
        let paged = self.paged.as_ref()?;
        paged.deadlines.earliest_at(paged.run.first_seq)
    }

    /// Messages that left the run or the tail and whose removal is not known committed.
    pub fn holes(&self) -> usize {
        self.paged.as_ref().map_or(0, |paged| paged.holes.len())
    }

    /// Whether a message of the run may expire (some stretch has a deadline).
    pub fn run_may_expire(&self) -> bool {
        self.paged
            .as_ref()
            .is_some_and(|paged| !paged.deadlines.is_never())
    }

    /// The run's stretches (its memory besides the holes).
    pub fn run_stretches(&self) -> usize {
        self.paged.as_ref().map_or(0, |paged| paged.deadlines.len())
    }
}

/// With no run: how many of the `len` messages in memory (`bytes` of bodies) the window keeps,
/// the rest lying beyond it; `None` if all fit.
fn beyond_window(window: Paging, len: usize, bytes: u64) -> Option<usize> {
    if len <= window.window_messages && bytes <= window.window_bytes {
        return None;
    }
    let mut keep = window.window_messages.min(len);
    if bytes > window.window_bytes {
        // In proportion: exact enough, and no walk over the window at every command.
        let share = len as u128 * u128::from(window.window_bytes) / u128::from(bytes);
        keep = keep.min(share as usize);
    }
    // The head stays, however large: a window too small for one message would page out what
    // a page read just brought back for a reader, and read it again, without end.
    Some(keep.max(1).min(len))
}
