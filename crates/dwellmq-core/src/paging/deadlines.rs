//! When the messages of a paged run may expire, without a slot per message: the run is cut
//! into stretches of positions, and each stretch knows the earliest deadline among its
//! messages (a lower bound: messages that left since only make the truth later).
//!
//! A stretch whose earliest deadline has come is read back from the store and its due
//! messages expire where they are (see `QueueState::page`): a queue with a TTL needs no
//! consumer and no `basic.get` to dead-letter what waits on disk. A stretch is at most a page
//! of messages when it is written, so one read covers it; a run that came back from a restart
//! is one stretch whose deadlines are unknown (earliest 0), read a page at a time.

use std::collections::{BTreeMap, BTreeSet};

/// A stretch none of whose messages expires.
const NEVER: u64 = u64::MAX;

/// The earliest deadlines of a run's stretches.
#[derive(Debug, Default, Clone)]
pub struct RunDeadlines {
    /// First position of each stretch → the earliest deadline of its messages (`NEVER` for
    /// none). A stretch runs to the next one's first position, the last one to the run's end.
    stretches: BTreeMap<u64, u64>,
    /// (earliest deadline, first position) of the stretches with a deadline: the next one due
    /// without a walk over the stretches.
    by_deadline: BTreeSet<(u64, u64)>,
    /// The stretch new messages join (the last one, until it is full or read back), and what
    /// it took so far: (first position, messages, body octets).
    open: Option<(u64, usize, u64)>,
}

/// How large a stretch grows before the next message starts another: one page's worth, so
/// that reading a stretch back costs one page read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StretchLimits {
    /// Messages.
    pub messages: usize,
    /// Body octets.
    pub bytes: u64,
}

impl RunDeadlines {
    /// A run whose messages' deadlines are not known (brought back by a restart without
    /// reading it): one stretch from `first_seq`, due at once, so that it is read back.
    pub fn unknown(first_seq: u64) -> Self {
        let mut deadlines = RunDeadlines::default();
        deadlines.insert(first_seq, 0);
        deadlines
    }

    /// Whether no stretch has a deadline.
    pub fn is_never(&self) -> bool {
        self.by_deadline.is_empty()
    }

    /// The message at `seq` (behind every message of the run so far) joined the run.
    pub fn append(&mut self, seq: u64, deadline: Option<u64>, body: u64, limits: StretchLimits) {
        let deadline = deadline.unwrap_or(NEVER);
        let open = match self.open {
            Some((from, messages, bytes)) if messages < limits.messages && bytes < limits.bytes => {
                self.open = Some((from, messages + 1, bytes + body));
                from
            }
            _ => {
                self.open = Some((seq, 1, body));
                self.insert(seq, NEVER);
                seq
            }
        };
        if deadline < self.stretches.get(&open).copied().unwrap_or(NEVER) {
            self.insert(open, deadline);
        }
    }

    /// The stretch due first: (its earliest deadline, its first position, the first
    /// position after it, or `None` when it runs to the run's end).
    pub fn first_due(&self) -> Option<(u64, u64, Option<u64>)> {
        let &(at, from) = self.by_deadline.first()?;
        Some((at, from, self.next_after(from)))
    }

    /// The earliest deadline of the stretch holding `seq` (`None`: none of its messages
    /// expires, or no stretch holds it).
    pub fn earliest_at(&self, seq: u64) -> Option<u64> {
        let (_, &at) = self.stretches.range(..=seq).next_back()?;
        (at != NEVER).then_some(at)
    }

    /// Positions `from..end` were read back and hold no message expiring before `earliest`
    /// (`None`: none expiring at all); what lies around them keeps its bound.
    pub fn read_back(&mut self, from: u64, end: Option<u64>, earliest: Option<u64>) {
        if let Some(end) = end {
            if !self.stretches.contains_key(&end) {
                let covering = self.covering(end);
                self.insert(end, covering);
            }
        }
        if !self.stretches.contains_key(&from) {
            let covering = self.covering(from);
            self.insert(from, covering);
        }
        let inside: Vec<u64> = match end {
            Some(end) => self.stretches.range(from..end).map(|(&k, _)| k).collect(),
            None => self.stretches.range(from..).map(|(&k, _)| k).collect(),
        };
        for key in inside {
            self.remove(key);
        }
        self.insert(from, earliest.unwrap_or(NEVER));
        // Appending goes on in a stretch of its own.
        self.open = None;
        self.merge_never(from);
        if let Some(end) = end {
            self.merge_never(end);
        }
    }

    /// The run's first position moved to `first_seq` (a page was taken into memory): the
    /// stretches before it go, the one holding it now starts there.
    pub fn front_moved(&mut self, first_seq: u64) {
        let below: Vec<u64> = self.stretches.range(..first_seq).map(|(&k, _)| k).collect();
        let Some(&last) = below.last() else {
            return;
        };
        let covering = self.stretches.get(&last).copied().unwrap_or(NEVER);
        for key in below {
            self.remove(key);
        }
        if !self.stretches.contains_key(&first_seq) {
            self.insert(first_seq, covering);
        }
        if let Some((from, messages, bytes)) = self.open {
            if from < first_seq {
                self.open = Some((first_seq, messages, bytes));
            }
        }
    }

    /// How many stretches there are (their memory is the run's only cost per message).
    pub fn len(&self) -> usize {
        self.stretches.len()
    }

    /// Whether there is no stretch.
    pub fn is_empty(&self) -> bool {
        self.stretches.is_empty()
    }

    fn next_after(&self, from: u64) -> Option<u64> {
        self.stretches
            .range(from.saturating_add(1)..)
            .next()
            .map(|(&k, _)| k)
    }

    fn covering(&self, seq: u64) -> u64 {
        self.stretches
            .range(..=seq)
            .next_back()
            .map_or(NEVER, |(_, &at)| at)
    }

    fn insert(&mut self, from: u64, at: u64) {
        if let Some(old) = self.stretches.insert(from, at) {
            self.by_deadline.remove(&(old, from));
        }
        if at != NEVER {
            self.by_deadline.insert((at, from));
        }
    }

    fn remove(&mut self, from: u64) {
        if let Some(old) = self.stretches.remove(&from) {
            self.by_deadline.remove(&(old, from));
        }
    }

    /// A stretch with no deadline after another with none is merged into it, so that a run
    /// without TTLs stays a handful of stretches however often it is read back. The open
    /// stretch is never merged away (appends would then widen an old stretch).
    fn merge_never(&mut self, from: u64) {
        if self.stretches.get(&from) != Some(&NEVER) || self.open.is_some_and(|o| o.0 == from) {
            return;
        }
        let before = self.stretches.range(..from).next_back().map(|(_, &at)| at);
        if before == Some(NEVER) {
            self.remove(from);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: StretchLimits = StretchLimits {
        messages: 3,
        bytes: 1 << 20,
    };

    #[test]
    fn appends_fill_stretches_of_a_page_each() {
        let mut d = RunDeadlines::default();
        for seq in 0..7 {
            let deadline = (seq == 4).then_some(100);
            d.append(seq, deadline, 10, LIMITS);
        }
        assert_eq!(d.len(), 3);
        assert_eq!(d.first_due(), Some((100, 3, Some(6))));
        assert_eq!(d.earliest_at(5), Some(100));
        assert_eq!(d.earliest_at(1), None);
    }

    #[test]
    fn a_stretch_read_back_takes_what_was_found_and_splits_what_was_not_read() {
        let mut d = RunDeadlines::unknown(10);
        // The first page of an unknown run: positions 10..14 expire at 50 at the earliest.
        d.read_back(10, Some(14), Some(50));
        assert_eq!(d.first_due(), Some((0, 14, None)));
        d.read_back(14, None, None);
        assert_eq!(d.first_due(), Some((50, 10, Some(14))));
        // Read again after its due messages went: nothing left expires.
        d.read_back(10, Some(14), None);
        assert!(d.is_never());
        // Stretches without deadlines merged: the run is one stretch again.
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn the_front_moving_drops_the_stretches_before_it() {
        let mut d = RunDeadlines::default();
        for seq in 0..9 {
            d.append(seq, Some(100 + seq), 1, LIMITS);
        }
        d.front_moved(4);
        assert_eq!(d.first_due(), Some((103, 4, Some(6))));
        assert_eq!(d.len(), 2);
    }

    #[test]
    fn appends_after_a_read_back_start_a_stretch_of_their_own() {
        let mut d = RunDeadlines::unknown(0);
        d.read_back(0, None, None);
        d.append(40, Some(7), 1, LIMITS);
        assert_eq!(d.first_due(), Some((7, 40, None)));
        assert_eq!(d.earliest_at(39), None);
    }
}
