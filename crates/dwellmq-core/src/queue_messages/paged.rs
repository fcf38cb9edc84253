//! A paging queue's ready list beyond its in-memory head: the run left in the store, the
//! messages behind it, spilling and pages read back.

use std::collections::VecDeque;
use std::sync::Arc;

use super::{give_back_slots, Kept, QueueMessages, SpilledMessage, Waiting};
use crate::paging::{Page, PagedRun, Paging};

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
    /// Positions of messages that left the tail (expired): the run may grow past them while
    /// their forget is not committed yet, so a page that still finds them skips them.
    pub(super) left_tail: Vec<u64>,
}

impl Paged {
    pub(super) fn is_stored(&self, seq: u64) -> bool {
        (self.run.first_seq..self.run.end_seq).contains(&seq) && !self.left_tail.contains(&seq)
    }
}

impl QueueMessages {
    /// A queue that comes back from the store with `run` not read (a restart): counted,
    /// not in memory. Only for a queue without priorities and without a run.
    pub fn restore_run(&mut self, run: PagedRun) {
        if run.count == 0 || self.levels.len() != 1 || self.paged.is_some() {
            return;
        }
        self.len += run.count as usize;
        self.ready_bytes += run.bytes;
        self.next_seq = self.next_seq.max(run.end_seq);
        self.paged = Some(Paged {
            run,
            tail: VecDeque::new(),
            tail_bytes: 0,
            left_tail: Vec::new(),
        });
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
            let Some(first) = head.get(keep) else {
                return;
            };
            let above_taken = self.taken_high.is_none_or(|taken| first.seq > taken);
            if !above_taken || !pageable(first) {
                return;
            }
            let first_seq = first.seq;
            let tail = head.split_off(keep);
            let tail_bytes = tail.iter().map(|w| w.body_len() as u64).sum();
            self.paged = Some(Paged {
                run: PagedRun {
                    first_seq,
                    end_seq: first_seq,
                    count: 0,
                    bytes: 0,
                },
                tail,
                tail_bytes,
                left_tail: Vec::new(),
            });
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
            if let Some(at) = waiting.expires_at() {
                unindexed(waiting.seq, at);
            }
        }
        give_back_slots(&mut paged.tail);
    }

    /// Spills what lies beyond the window and the store does not have (memory pressure):
    /// messages never written, and those whose write failed (`lost`), at most `budget` of
    /// them. Each is marked written and handed to `spill` (its position, the message
    /// as kept, its expiry) for the owner to write to the spill table; once that write is
    /// committed, [`QueueMessages::page_out`] takes it into the run like a persisted one.
    /// Only for a queue without priorities (one level).
    pub fn spill(
        &mut self,
        window: Paging,
        lost: impl Fn(u64) -> bool,
        budget: usize,
        mut spill: impl FnMut(u64, SpilledMessage, Option<u64>),
    ) {
        if self.levels.len() != 1 {
            return;
        }
        let has_run = self.paged.is_some();
        let bytes = self.ready_bytes;
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
        // What holds paging up is looked at again, whatever was looked at before (a requeue
        // moves messages back behind the window).
        // A message whose write failed (`lost`: the store does not have it) is spilled again.
        let unwritten = |w: &Waiting| !w.written || lost(w.seq);
        if unwritten(first) {
            self.spill_from = self.spill_from.min(first.seq);
        }
        let from = self.spill_from;
        let start = list.partition_point(|w| w.seq < from).max(keep);
        let mut left = budget;
        for waiting in list.range_mut(start..) {
            if !unwritten(waiting) {
                continue;
            }
            if left == 0 {
                // The rest on a later command, once earlier spills have committed.
                self.spill_from = waiting.seq;
                return;
            }
            left -= 1;
            waiting.written = true;
            waiting.spilled = true;
            self.spilled_any = true;
            let message = match &waiting.kept {
                Kept::Packed(packed) => SpilledMessage::Packed(packed.clone()),
                Kept::Shared(message) => SpilledMessage::Shared(Arc::clone(message)),
            };
            spill(waiting.seq, message, waiting.expires_at());
        }
        self.spill_from = self.next_seq;
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
            // end is in the run or the tail now).
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
        paged.left_tail.retain(|&seq| seq >= first);
        // `exhausted` speaks of the run as the request knew it: messages whose commit came
        // while the page was read may have joined it since, behind where the page ended.
        let exhausted = page.exhausted && page.next_seq >= paged.run.end_seq;
        let read_whole = paged.run.count == 0 || exhausted || first >= paged.run.end_seq;
        if !read_whole {
            return;
        }
        if let Some(paged) = self.paged.take() {
            // Counted but not found: gone from the totals.
            self.len -= paged.run.count as usize;
            self.ready_bytes -= paged.run.bytes;
            self.levels[0].extend(paged.tail);
        }
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
    Some(keep)
}
