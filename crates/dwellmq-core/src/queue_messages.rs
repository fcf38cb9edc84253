//! The ready messages of one queue, in queue order.
//!
//! A message that settles here (no consumer took it in the command that brought it) is packed
//! into one exact-sized buffer ([`PackedMessage`]): as published it is slices of its publisher's
//! read buffer, a decoded copy of its properties and a shared pointer, some 800 octets for a
//! small message, and its slices keep the whole 64 KiB read buffer alive. A message that goes
//! straight to a consumer is never packed, so that path copies no body.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::message::Message;
use crate::packed::PackedMessage;
use crate::paging::{Page, PagedRun, Paging, StoredEntry};

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

/// Bodies up to this size are packed when they settle: RabbitMQ's `queue_index_embed_msgs_below`
/// (it embeds smaller messages in each queue's index, and keeps larger ones once in a shared
/// store). Each queue a message was routed to packs its own copy, so a larger body keeps its
/// slices, shared by every queue: its ~850 octets as published are small beside it, and the read
/// buffer it pins is mostly its own.
pub const PACK_BODY_LIMIT: usize = 4096;

/// How a ready message is kept.
#[derive(Debug)]
enum Kept {
    Packed(PackedMessage),
    /// As published: not settled yet, or not to be packed (see [`packable`]).
    Shared(Arc<Message>),
}

/// A ready message as the list keeps it: a [`QueueEntry`] whose message may be packed, with
/// what the list needs of the message beside it. Its size is what a million waiting messages
/// cost besides their buffers, so the expiry is a flag and a number rather than an `Option`.
#[derive(Debug)]
struct Waiting {
    kept: Kept,
    seq: u64,
    expires_at: u64,
    delivery_count: u32,
    acquired_count: u32,
    expires: bool,
    redelivered: bool,
    persistent: bool,
    /// The store has, or is being given, a record of it (persisted, or spilled): once that
    /// write is committed it may leave memory for the run.
    written: bool,
    /// Its record is a spilled one, which goes when the message leaves the list.
    spilled: bool,
}

impl Waiting {
    fn new(entry: QueueEntry, written: bool) -> Waiting {
        Waiting {
            persistent: entry.message.is_persistent(),
            written,
            spilled: false,
            kept: Kept::Shared(entry.message),
            seq: entry.seq,
            expires_at: entry.expires_at.unwrap_or(0),
            expires: entry.expires_at.is_some(),
            delivery_count: entry.delivery_count,
            acquired_count: entry.acquired_count,
            redelivered: entry.redelivered,
        }
    }

    /// A message of a paged-out run, read back from the store: packed as stored.
    fn stored(entry: StoredEntry) -> Waiting {
        Waiting {
            kept: Kept::Packed(entry.message),
            seq: entry.seq,
            expires_at: entry.expires_at.unwrap_or(0),
            expires: entry.expires_at.is_some(),
            delivery_count: 0,
            acquired_count: 0,
            redelivered: entry.redelivered,
            persistent: !entry.spilled,
            written: true,
            // Its spilled record went when its page was read (see `page_in`).
            spilled: false,
        }
    }

    fn expires_at(&self) -> Option<u64> {
        self.expires.then_some(self.expires_at)
    }

    /// The message, unpacked if it was packed (its parts then slices of the packed buffer).
    fn into_entry(self) -> QueueEntry {
        let expires_at = self.expires_at();
        let message = match self.kept {
            Kept::Packed(packed) => packed.unpack_own(),
            Kept::Shared(message) => message,
        };
        QueueEntry {
            message,
            seq: self.seq,
            redelivered: self.redelivered,
            delivery_count: self.delivery_count,
            acquired_count: self.acquired_count,
            expires_at,
        }
    }

    fn body_len(&self) -> usize {
        match &self.kept {
            Kept::Packed(packed) => packed.body_len(),
            Kept::Shared(message) => message.body_len(),
        }
    }

    /// Octets held for it while packed; none while shared (the message carries its own charge).
    fn packed_footprint(&self) -> u64 {
        match &self.kept {
            Kept::Packed(packed) => packed_footprint(packed.len()),
            Kept::Shared(_) => 0,
        }
    }
}

/// Octets a packed message of `packed_len` octets holds while ready: its place in the list and
/// its buffer, rounded up as an allocator rounds small sizes.
pub fn packed_footprint(packed_len: usize) -> u64 {
    (std::mem::size_of::<Waiting>() + packed_len.next_multiple_of(16)) as u64
}

/// A spilled message as the list kept it, for its owner to write.
#[derive(Debug, Clone)]
pub enum SpilledMessage {
    /// Packed (a copy of the list's buffer: the list keeps its own until the write commits).
    Packed(PackedMessage),
    /// As published (a large body, or `BCC` keys).
    Shared(Arc<Message>),
}

/// Whether a settled message is packed: a small body, names the packed layout holds whole, and
/// no `BCC` keys (they are kept beside the message for dead-lettering, and a packed message has
/// no room for them).
fn packable(message: &Message) -> bool {
    let whole = |name: &[u8]| PackedMessage::clamp_name(name).len() == name.len();
    message.body_len() <= PACK_BODY_LIMIT
        && message.bcc.is_empty()
        && whole(message.exchange.as_bytes())
        && whole(message.routing_key.as_bytes())
}

/// Slots kept however few messages wait: below this, giving memory back is not worth a move.
const KEPT_SLOTS: usize = 1024;

/// Halves a level's slots once it is three quarters empty, so that a queue a backlog of
/// millions has drained does not keep 48 octets a message for good. Halving (not fitting)
/// keeps the moves amortized: a level that grows again is not moved at every pop.
fn give_back_slots(level: &mut VecDeque<Waiting>) {
    let capacity = level.capacity();
    if capacity > KEPT_SLOTS && level.len() < capacity / 4 {
        level.shrink_to((capacity / 2).max(KEPT_SLOTS));
    }
}

/// A ready message, seen in place (inspection).
#[derive(Debug, Clone, Copy)]
pub struct ReadyMessage<'a>(&'a Waiting);

impl ReadyMessage<'_> {
    /// Its position in the queue.
    pub fn seq(&self) -> u64 {
        self.0.seq
    }

    /// When it expires, if it does.
    pub fn expires_at(&self) -> Option<u64> {
        self.0.expires_at()
    }

    /// Whether the publisher asked for persistence.
    pub fn is_persistent(&self) -> bool {
        self.0.persistent
    }

    /// Body size in octets.
    pub fn body_len(&self) -> usize {
        self.0.body_len()
    }

    /// Whether it waits packed.
    pub fn is_packed(&self) -> bool {
        matches!(self.0.kept, Kept::Packed(_))
    }

    /// A copy of the entry (a packed message unpacked from a copy of its buffer), for
    /// inspection: the message stays where it is.
    pub fn to_entry(&self) -> QueueEntry {
        let waiting = self.0;
        let message = match &waiting.kept {
            Kept::Packed(packed) => packed.clone().unpack_own(),
            Kept::Shared(message) => Arc::clone(message),
        };
        QueueEntry {
            message,
            seq: waiting.seq,
            redelivered: waiting.redelivered,
            delivery_count: waiting.delivery_count,
            acquired_count: waiting.acquired_count,
            expires_at: waiting.expires_at(),
        }
    }
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
    /// The highest position ever taken out (delivered, got, expired): a run starts above it,
    /// so that no message taken out (unacknowledged, still stored) lies inside a run.
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
}

/// A paging queue's ready list beyond its in-memory head: the run of messages only the store
/// holds, then the messages that came in since it began, in memory until their store write
/// is committed and they join the run. `len` and `ready_bytes` count all of it.
#[derive(Debug)]
struct Paged {
    run: PagedRun,
    /// Behind the run, in queue order. A transient message, or one whose write failed, never
    /// joins the run: it stays here, and so does what came after it, until the run is read.
    tail: VecDeque<Waiting>,
    tail_bytes: u64,
    /// Positions of messages that left the tail (expired): the run may grow past them while
    /// their forget is not committed yet, so a page that still finds them skips them.
    left_tail: Vec<u64>,
}

impl Paged {
    fn is_stored(&self, seq: u64) -> bool {
        (self.run.first_seq..self.run.end_seq).contains(&seq) && !self.left_tail.contains(&seq)
    }
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
        }
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

    fn take(&mut self, waiting: Waiting) -> QueueEntry {
        self.taken_high = Some(self.taken_high.map_or(waiting.seq, |t| t.max(waiting.seq)));
        if waiting.spilled {
            self.unspill(waiting.seq, waiting.seq + 1);
        }
        self.packed_footprint -= waiting.packed_footprint();
        let entry = waiting.into_entry();
        self.ready_bytes -= entry.message.body_len() as u64;
        self.len -= 1;
        entry
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
        Some(self.take(waiting))
    }

    /// Takes the message at position `seq` of priority level `level`, wherever it is.
    pub fn remove(&mut self, level: usize, seq: u64) -> Option<QueueEntry> {
        let head = self.levels.get_mut(level)?;
        if let Ok(at) = head.binary_search_by_key(&seq, |e| e.seq) {
            let waiting = head.remove(at)?;
            give_back_slots(head);
            return Some(self.take(waiting));
        }
        let paged = self.paged.as_mut()?;
        let at = find_in(&paged.tail, seq)?;
        let waiting = paged.tail.remove(at)?;
        paged.tail_bytes -= waiting.body_len() as u64;
        paged.left_tail.push(seq);
        give_back_slots(&mut paged.tail);
        Some(self.take(waiting))
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

    fn unspill(&mut self, from: u64, end: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use dwellmq_codec::{BasicProperties, ShortStr};

    fn msg(body: &'static str) -> Arc<Message> {
        Message::new(
            "".into(),
            "k".into(),
            BasicProperties::default(),
            Bytes::from_static(body.as_bytes()).into(),
            None,
        )
    }

    #[test]
    fn requeue_restores_original_position() {
        let mut q = QueueMessages::new();
        for b in ["a", "b", "c"] {
            q.push(msg(b));
        }
        let a = q.pop().unwrap();
        let b = q.pop().unwrap();
        q.requeue(b);
        q.requeue(a);
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|e| e.message.body.chunks()[0].clone())
            .collect();
        assert_eq!(order, ["a", "b", "c"]);
        assert_eq!(q.bytes(), 0);
    }

    fn with_priority(body: &'static str, priority: Option<u8>) -> Arc<Message> {
        Message::new(
            "".into(),
            "k".into(),
            BasicProperties {
                priority,
                ..Default::default()
            },
            Bytes::from_static(body.as_bytes()).into(),
            None,
        )
    }

    fn drain(q: &mut QueueMessages) -> Vec<Bytes> {
        std::iter::from_fn(|| q.pop())
            .map(|e| e.message.body.chunks()[0].clone())
            .collect()
    }

    #[test]
    fn highest_priority_first_fifo_within_a_priority_capped_at_the_maximum() {
        let mut q = QueueMessages::with_max_priority(5);
        q.push(with_priority("none", None));
        q.push(with_priority("p1-a", Some(1)));
        q.push(with_priority("p9-capped", Some(9)));
        q.push(with_priority("p1-b", Some(1)));
        q.push(with_priority("p5", Some(5)));
        assert_eq!(q.len(), 5);
        assert_eq!(q.peek().map(|e| e.seq()), Some(2));
        assert_eq!(drain(&mut q), ["p9-capped", "p5", "p1-a", "p1-b", "none"]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_plain_queue_ignores_priorities() {
        let mut q = QueueMessages::new();
        q.push(with_priority("low", Some(0)));
        q.push(with_priority("high", Some(9)));
        assert_eq!(drain(&mut q), ["low", "high"]);
    }

    #[test]
    fn requeue_returns_to_the_original_place_within_its_priority() {
        let mut q = QueueMessages::with_max_priority(2);
        q.push(with_priority("high-a", Some(2)));
        q.push(with_priority("low", None));
        q.push(with_priority("high-b", Some(2)));
        let a = q.pop().unwrap();
        let b = q.pop().unwrap();
        assert_eq!(b.message.body.chunks()[0], "high-b");
        q.requeue(b);
        q.requeue(a);
        assert_eq!(q.len(), 3);
        assert_eq!(drain(&mut q), ["high-a", "high-b", "low"]);
        assert_eq!(q.bytes(), 0);
    }

    fn persistent_small(routing_key: &str, body: &'static [u8]) -> Arc<Message> {
        Message::new(
            "".into(),
            routing_key.into(),
            BasicProperties {
                delivery_mode: Some(2),
                ..Default::default()
            },
            Bytes::from_static(body).into(),
            None,
        )
    }

    #[test]
    fn a_message_taken_before_it_settles_is_the_published_one() {
        let mut q = QueueMessages::new();
        let published = msg("straight through");
        q.push(Arc::clone(&published));
        let taken = q.pop().expect("pushed");
        q.settle();
        // The same message, so the same slices of the read buffer: no body was copied.
        assert!(Arc::ptr_eq(&taken.message, &published));
        assert_eq!(q.packed_footprint(), 0);
    }

    #[test]
    fn a_message_that_stays_is_packed_and_comes_back_whole() {
        let mut headers = dwellmq_codec::FieldTable::new();
        headers.insert("tenant", dwellmq_codec::FieldValue::I64(7));
        let original = Message::new(
            "orders".into(),
            "eu.new".into(),
            BasicProperties {
                headers: Some(headers),
                priority: Some(3),
                expiration: Some("60000".into()),
                delivery_mode: Some(2),
                ..Default::default()
            },
            Bytes::from_static(b"sixteen octets!!").into(),
            None,
        );
        let mut q = QueueMessages::with_max_priority(5);
        q.push_expiring(Arc::clone(&original), Some(90_000));
        q.settle();
        let ready = q.peek().expect("pushed");
        assert!(ready.is_packed());
        assert!(ready.is_persistent());
        assert_eq!((ready.body_len(), ready.expires_at()), (16, Some(90_000)));
        assert!(q.packed_footprint() > 0);

        let back = q.pop().expect("pushed");
        assert_eq!(back.message.exchange, original.exchange);
        assert_eq!(back.message.routing_key, original.routing_key);
        assert_eq!(back.message.properties, original.properties);
        assert_eq!(back.message.properties_encoded, original.properties_encoded);
        assert!(back.message.body == *b"sixteen octets!!".as_slice());
        assert_eq!(back.expires_at, Some(90_000));
        assert!(back.message.is_uncharged());
        assert_eq!((q.packed_footprint(), q.bytes()), (0, 0));

        // Handed back, it settles packed again at its place.
        q.requeue(back);
        q.settle();
        assert!(q.peek().is_some_and(|r| r.is_packed()));
        let again = q.pop().expect("requeued");
        assert_eq!(q.level_of(&again.message), 3);
    }

    #[test]
    fn large_bodies_and_bcc_keys_stay_shared() {
        let mut q = QueueMessages::new();
        let large: &'static [u8] = vec![b'x'; PACK_BODY_LIMIT + 1].leak();
        q.push(Message::new(
            "".into(),
            "k".into(),
            BasicProperties::default(),
            Bytes::from_static(large).into(),
            None,
        ));
        q.push(Message::with_bcc(
            "".into(),
            "k".into(),
            BasicProperties::default(),
            Bytes::from_static(b"x").into(),
            None,
            vec!["audit".into()].into(),
        ));
        q.settle();
        assert!(q.iter().all(|r| !r.is_packed()));
        assert_eq!(q.packed_footprint(), 0);
        let with_bcc = q.remove(0, 1).expect("pushed");
        assert_eq!(&*with_bcc.message.bcc, [ShortStr::from("audit")]);
    }

    /// What a million small waiting messages cost: keep it from creeping back up (it was about
    /// 840 octets beyond the body when a waiting message was the published one).
    #[test]
    fn a_small_waiting_message_holds_at_most_120_octets_beyond_its_body() {
        assert_eq!(std::mem::size_of::<Waiting>(), 48);
        let mut q = QueueMessages::new();
        q.push(persistent_small("load-restart", b"sixteen octets!!"));
        q.settle();
        // Exchange and key with their lengths (2 + 0, 2 + 12), properties (4 + 3), body.
        let packed_len = 4 + 12 + 4 + 3 + 16;
        assert_eq!(q.packed_footprint(), 48 + 48);
        assert_eq!(packed_footprint(packed_len), q.packed_footprint());
        assert!(q.packed_footprint() - 16 <= 120);
    }

    #[test]
    fn a_drained_backlog_gives_its_slots_back() {
        let mut q = QueueMessages::new();
        for _ in 0..100_000 {
            q.push(msg("x"));
        }
        q.settle();
        let full = q.levels[0].capacity();
        assert!(full >= 100_000);
        while q.pop().is_some() {}
        assert!(
            q.levels[0].capacity() <= KEPT_SLOTS,
            "{} slots kept",
            q.levels[0].capacity()
        );
        for _ in 0..50_000 {
            q.push(msg("x"));
        }
        assert_eq!(q.purge(), 50_000);
        assert!(q.levels[0].capacity() <= KEPT_SLOTS);
    }
}
