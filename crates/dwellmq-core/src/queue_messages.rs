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
}

impl Waiting {
    fn new(entry: QueueEntry) -> Waiting {
        Waiting {
            persistent: entry.message.is_persistent(),
            kept: Kept::Shared(entry.message),
            seq: entry.seq,
            expires_at: entry.expires_at.unwrap_or(0),
            expires: entry.expires_at.is_some(),
            delivery_count: entry.delivery_count,
            acquired_count: entry.acquired_count,
            redelivered: entry.redelivered,
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
        }
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
        self.levels[level].push_back(Waiting::new(QueueEntry {
            message,
            seq,
            redelivered: false,
            delivery_count: 0,
            acquired_count: 0,
            expires_at,
        }));
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
        let level = &mut self.levels[index];
        let at = match level.back() {
            Some(last) if last.seq < seq => level.len(),
            None => 0,
            _ => level
                .binary_search_by_key(&seq, |e| e.seq)
                .unwrap_or_else(|at| at),
        };
        level.insert(at, Waiting::new(entry));
        self.unsettled.push((index, seq));
    }

    /// Packs the messages that came in since the last call and are still here: those no
    /// consumer took at once.
    pub fn settle(&mut self) {
        for (index, seq) in self.unsettled.drain(..) {
            let level = &mut self.levels[index];
            let at = match level.back() {
                Some(last) if last.seq == seq => level.len() - 1,
                _ => match level.binary_search_by_key(&seq, |e| e.seq) {
                    Ok(at) => at,
                    Err(_) => continue,
                },
            };
            let waiting = &mut level[at];
            if let Kept::Shared(message) = &waiting.kept {
                if packable(message) {
                    waiting.kept = Kept::Packed(PackedMessage::pack(message));
                    self.packed_footprint += waiting.packed_footprint();
                }
            }
        }
    }

    fn take(&mut self, waiting: Waiting) -> QueueEntry {
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
        let level = self.levels.get_mut(level)?;
        let at = level.binary_search_by_key(&seq, |e| e.seq).ok()?;
        let waiting = level.remove(at)?;
        give_back_slots(level);
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
        n
    }

    /// Every ready message, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = ReadyMessage<'_>> {
        self.levels
            .iter()
            .flat_map(|level| level.iter())
            .map(ReadyMessage)
    }

    /// Number of ready messages.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no message is ready.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Total body bytes of ready messages.
    pub fn bytes(&self) -> u64 {
        self.ready_bytes
    }

    /// Octets the packed ready messages hold (bodies included): what their owner charges for
    /// them, as they carry no charge of their own.
    pub fn packed_footprint(&self) -> u64 {
        self.packed_footprint
    }
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
