//! The ready messages of one queue, in queue order.
//!
//! A message that settles here (no consumer took it in the command that brought it) is packed
//! into one exact-sized buffer ([`PackedMessage`]): as published it is slices of its publisher's
//! read buffer, a decoded copy of its properties and a shared pointer, some 800 octets for a
//! small message, and its slices keep the whole 64 KiB read buffer alive. A message that goes
//! straight to a consumer is never packed, so that path copies no body.

mod paged;
#[cfg(test)]
mod tests;
mod waiting;

use std::collections::VecDeque;
use std::sync::Arc;

use crate::message::Message;
use crate::packed::PackedMessage;
use crate::paging::PagedRun;

pub(crate) use paged::MissingWrite;
use paged::Paged;
use waiting::{give_back_slots, packable, Kept, Waiting, KEPT_SLOTS};
pub use waiting::{packed_footprint, ReadyMessage, SpilledMessage, PACK_BODY_LIMIT};

/// One message's place in one queue.
#[derive(Debug, Clone)]
pub struct QueueEntry {
    /// The shared message.
    pub message: Arc<Message>,
    /// Position in the queue: increases with every enqueue; a requeued entry keeps it.
    pub seq: u64,
    /// Whether the message was delivered before (the `redelivered` flag).
    pub redelivered: bool,
    /// Failed attempts (reject, or a consumer that went away holding it); quorum semantics.
    pub delivery_count: u32,
    /// Returns to the queue of any kind.
    pub acquired_count: u32,
    /// When the message expires (milliseconds since the epoch): the lower of its `expiration`
    /// and the queue's `x-message-ttl`, fixed when it was enqueued; a requeue keeps it.
    pub expires_at: Option<u64>,
}

/// Ready messages, highest priority level first and then by `seq`.
///
/// A plain queue has one level. A priority queue (`x-max-priority` = n) has n + 1; a message's
/// level is its `priority` property capped at n (no property: 0), as in RabbitMQ. New messages
/// are appended to their level in O(1); a requeued message goes back to its original position in
/// its level (as RabbitMQ does since 2.7), found by binary search, so consumers see queue order
/// again. Messages come in as published and are packed by [`QueueMessages::settle`], which the
/// owner calls once a command has delivered what it could.
#[derive(Debug)]
pub struct QueueMessages {
    /// Index = priority level.
    levels: Vec<VecDeque<Waiting>>,
    len: usize,
    next_seq: u64,
    ready_bytes: u64,
    /// What the packed messages hold (see [`packed_footprint`]).
    packed_footprint: u64,
    /// (level, seq) of the messages that came in since the last `settle`.
    unsettled: Vec<(usize, u64)>,
    /// The messages left in the store only, and those behind them (see [`Paged`]).
    paged: Option<Paged>,
    /// The highest position ever handed out (delivered, got): a run starts above it, so that
    /// no message that may come back (unacknowledged, still stored) lies inside a run. One
    /// that left for good (expired, dropped) does not count: it holds nothing back.
    taken_high: Option<u64>,
    /// Whether the owner stores this queue's persistent messages (a durable queue's): they
    /// are written at publish. Others are written only if spilled.
    stores_persistent: bool,
    /// Spilling looks at messages from this position on (those before were looked at).
    spill_from: u64,
    /// Position ranges of spilled records no longer needed (their messages left, or were
    /// read back), for the owner to drop ([`QueueMessages::take_unspilled`]).
    unspilled: Vec<(u64, u64)>,
    /// Whether anything was ever spilled (a purge then drops every spilled record).
    spilled_any: bool,
    /// The mark the store removals asked for now are numbered with (see
    /// [`QueueMessages::take_removals_mark`]), and whether any was asked for under it.
    removal_mark: u64,
    marked: bool,
    /// Messages that left while no run was paged out, whose records may still be in the
    /// store until their removal (numbered by mark) commits: a run started meanwhile may
    /// span their positions, and its pages must skip them (they become its holes).
    loose_holes: std::collections::BTreeMap<u64, u64>,
    /// The owner pages this queue (and reports its removals' commits, which prune the holes).
    pages: bool,
}

impl Default for QueueMessages {
    fn default() -> Self {
        Self::with_max_priority(0)
    }
}

impl QueueMessages {
    /// An empty queue without priorities.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty priority queue whose messages' priorities are capped at `max_priority`.
    pub fn with_max_priority(max_priority: u8) -> Self {
        QueueMessages {
            levels: (0..=max_priority).map(|_| VecDeque::new()).collect(),
            len: 0,
            next_seq: 0,
            ready_bytes: 0,
            packed_footprint: 0,
            unsettled: Vec::new(),
            paged: None,
            taken_high: None,
            stores_persistent: true,
            spill_from: 0,
            unspilled: Vec::new(),
            spilled_any: false,
            removal_mark: 1,
            marked: false,
            loose_holes: std::collections::BTreeMap::new(),
            pages: false,
        }
    }

    /// The owner pages this queue: it reports the commits of the removals it numbers
    /// ([`QueueMessages::removals_committed`]), so that positions left while no run was paged
    /// out can be kept as holes for a run to come.
    pub fn set_paged(&mut self) {
        self.pages = true;
    }

    /// Tells whether the owner stores persistent messages at publish (a durable queue's), so
    /// that only those count as written; the others leave memory only once spilled.
    pub fn set_stores_persistent(&mut self, stores: bool) {
        self.stores_persistent = stores;
    }

    fn written_at_entry(&self, message: &Message) -> bool {
        self.stores_persistent && message.is_persistent()
    }

    /// The priority level `message` waits in.
    pub fn level_of(&self, message: &Message) -> usize {
        let priority = usize::from(message.properties.priority.unwrap_or(0));
        priority.min(self.levels.len() - 1)
    }

    /// Appends a newly published message; returns its position (`seq`).
    pub fn push(&mut self, message: Arc<Message>) -> u64 {
        self.push_expiring(message, None)
    }

    /// Appends a newly published message that expires at `expires_at`; returns its `seq`.
    pub fn push_expiring(&mut self, message: Arc<Message>, expires_at: Option<u64>) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.ready_bytes += message.body_len() as u64;
        self.len += 1;
        let level = self.level_of(&message);
        let written = self.written_at_entry(&message);
        let waiting = Waiting::new(
            QueueEntry {
                message,
                seq,
                redelivered: false,
                delivery_count: 0,
                acquired_count: 0,
                expires_at,
            },
            written,
        );
        match &mut self.paged {
            Some(paged) => {
                paged.tail_bytes += waiting.body_len() as u64;
                paged.tail.push_back(waiting);
            }
            None => self.levels[level].push_back(waiting),
        }
        self.unsettled.push((level, seq));
        seq
    }

    /// Puts back a message read from the store (at its position; `next_seq` moves past it).
    pub fn restore(&mut self, entry: QueueEntry) {
        self.next_seq = self.next_seq.max(entry.seq.saturating_add(1));
        self.requeue(entry);
    }

    /// Numbers the next message `seq` at least (positions stored before a restart are not
    /// reused).
    pub fn skip_to(&mut self, seq: u64) {
        self.next_seq = self.next_seq.max(seq);
    }

    /// Puts a delivered message back at its original position.
    pub fn requeue(&mut self, entry: QueueEntry) {
        self.ready_bytes += entry.message.body_len() as u64;
        self.len += 1;
        let index = self.level_of(&entry.message);
        let seq = entry.seq;
        let written = self.written_at_entry(&entry.message);
        // Spilled once, its record went when it was taken: written again if it must be.
        self.spill_from = self.spill_from.min(seq);
        let level = match &mut self.paged {
            // Never the case: a run starts above every position taken out.
            Some(paged) if seq >= paged.run.end_seq => {
                paged.tail_bytes += entry.message.body_len() as u64;
                &mut paged.tail
            }
            _ => &mut self.levels[index],
        };
        insert_in_order(level, Waiting::new(entry, written));
        self.unsettled.push((index, seq));
    }

    /// Packs the messages that came in since the last call and are still here: those no
    /// consumer took at once.
    pub fn settle(&mut self) {
        for (index, seq) in std::mem::take(&mut self.unsettled) {
            let Some(waiting) = self.find_mut(index, seq) else {
                continue;
            };
            if let Kept::Shared(message) = &waiting.kept {
                if packable(message) {
                    waiting.kept = Kept::Packed(PackedMessage::pack(message));
                    let footprint = waiting.packed_footprint();
                    self.packed_footprint += footprint;
                }
            }
        }
    }

    /// The message at position `seq` of level `level`, in the head or behind a run.
    fn find_mut(&mut self, level: usize, seq: u64) -> Option<&mut Waiting> {
        let in_head = find_in(self.levels.get(level)?, seq);
        match in_head {
            Some(at) => self.levels[level].get_mut(at),
            None => {
                let tail = &mut self.paged.as_mut()?.tail;
                let at = find_in(tail, seq)?;
                tail.get_mut(at)
            }
        }
    }

    /// Takes `waiting` out of the queue's count; `from_front`: it was the head.
    fn take(&mut self, waiting: Waiting, from_front: bool) -> QueueEntry {
        if waiting.written {
            // Its record may outlive it in a page read before its removal commits: in the
            // tail behind the run, in front of the run's end (a message that came back from
            // a consumer waits at its place, inside the run's range), or in a run that
            // starts later and spans its position. Not the head's, when no run is paged out:
            // a run starts above every message handed out and behind the head (the hot
            // path, a consumer keeping up, takes no hole).
            let holes = match self.paged.as_mut() {
                Some(paged) if waiting.seq >= paged.run.first_seq => Some(&mut paged.holes),
                Some(_) => None,
                None if self.pages && !from_front => Some(&mut self.loose_holes),
                None => None,
            };
            if let Some(holes) = holes {
                holes.insert(waiting.seq, self.removal_mark);
                self.marked = true;
            }
        }
        if waiting.spilled {
            self.unspill(waiting.seq, waiting.seq + 1);
        }
        self.packed_footprint -= waiting.packed_footprint();
        let entry = waiting.into_entry();
        self.ready_bytes -= entry.message.body_len() as u64;
        self.len -= 1;
        entry
    }

    /// The message at `seq` was handed out (to a consumer, or by a get): it may come back.
    pub fn note_taken(&mut self, seq: u64) {
        self.taken_high = Some(self.taken_high.map_or(seq, |t| t.max(seq)));
    }

    /// Takes the message at the head: the oldest of the highest non-empty level.
    pub fn pop(&mut self) -> Option<QueueEntry> {
        let level = self
            .levels
            .iter_mut()
            .rev()
            .find(|level| !level.is_empty())?;
        let waiting = level.pop_front()?;
        give_back_slots(level);
        Some(self.take(waiting, true))
    }

    /// Takes the message at position `seq` of priority level `level`, wherever it is.
    pub fn remove(&mut self, level: usize, seq: u64) -> Option<QueueEntry> {
        let head = self.levels.get_mut(level)?;
        if let Ok(at) = head.binary_search_by_key(&seq, |e| e.seq) {
            let waiting = head.remove(at)?;
            give_back_slots(head);
            return Some(self.take(waiting, at == 0));
        }
        let paged = self.paged.as_mut()?;
        let at = find_in(&paged.tail, seq)?;
        let waiting = paged.tail.remove(at)?;
        paged.tail_bytes -= waiting.body_len() as u64;
        give_back_slots(&mut paged.tail);
        Some(self.take(waiting, false))
    }

    /// The message at the head.
    pub fn peek(&self) -> Option<ReadyMessage<'_>> {
        self.levels
            .iter()
            .rev()
            .find_map(|level| level.front())
            .map(ReadyMessage)
    }

    /// Removes every ready message, returning how many there were.
    pub fn purge(&mut self) -> usize {
        let n = self.len;
        for level in &mut self.levels {
            level.clear();
            level.shrink_to(KEPT_SLOTS);
        }
        self.len = 0;
        self.ready_bytes = 0;
        self.packed_footprint = 0;
        self.unsettled.clear();
        self.paged = None;
        // Whatever was spilled (the run's and those still in memory) goes with them.
        if self.spilled_any {
            self.unspilled.clear();
            self.unspilled.push((0, u64::MAX));
        }
        self.spill_from = self.next_seq;
        n
    }

    /// Every ready message, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = ReadyMessage<'_>> {
        let tail = self.paged.iter().flat_map(|paged| paged.tail.iter());
        self.levels
            .iter()
            .flat_map(|level| level.iter())
            .chain(tail)
            .map(ReadyMessage)
    }

    /// Number of ready messages (those left in the store included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no message is ready.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Total body bytes of ready messages (those left in the store included).
    pub fn bytes(&self) -> u64 {
        self.ready_bytes
    }

    /// Octets the packed ready messages hold (bodies included): what their owner charges for
    /// them, as they carry no charge of their own.
    pub fn packed_footprint(&self) -> u64 {
        self.packed_footprint
    }

    /// The messages left in the store only, if any.
    pub fn paged_run(&self) -> Option<PagedRun> {
        self.paged.as_ref().map(|paged| paged.run)
    }

    /// Whether the stored message at `seq` is one of the run's (inspection reads them from
    /// the store: a record of one that left the tail may still be there).
    pub fn in_run(&self, seq: u64) -> bool {
        self.paged
            .as_ref()
            .is_some_and(|paged| paged.is_stored(seq))
    }

    /// Ready messages in memory in front of the run (all of them without one).
    pub fn head_len(&self) -> usize {
        self.levels.iter().map(VecDeque::len).sum()
    }

    /// Body octets of those.
    pub fn head_bytes(&self) -> u64 {
        match &self.paged {
            Some(paged) => self.ready_bytes - paged.run.bytes - paged.tail_bytes,
            None => self.ready_bytes,
        }
    }
}

/// Where message `seq` sits in `level` (in position order), if it is there.
fn find_in(level: &VecDeque<Waiting>, seq: u64) -> Option<usize> {
    match level.back() {
        Some(last) if last.seq == seq => Some(level.len() - 1),
        _ => level.binary_search_by_key(&seq, |e| e.seq).ok(),
    }
}

/// Inserts `waiting` at its position in `level`.
fn insert_in_order(level: &mut VecDeque<Waiting>, waiting: Waiting) {
    let at = match level.back() {
        Some(last) if last.seq < waiting.seq => level.len(),
        None => 0,
        _ => level
            .binary_search_by_key(&waiting.seq, |e| e.seq)
            .unwrap_or_else(|at| at),
    };
    level.insert(at, waiting);
}
