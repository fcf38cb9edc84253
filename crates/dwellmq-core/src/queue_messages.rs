//! The ready messages of one queue, in queue order.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::message::Message;

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
/// again.
#[derive(Debug)]
pub struct QueueMessages {
    /// Index = priority level.
    levels: Vec<VecDeque<QueueEntry>>,
    len: usize,
    next_seq: u64,
    ready_bytes: u64,
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
        self.levels[level].push_back(QueueEntry {
            message,
            seq,
            redelivered: false,
            delivery_count: 0,
            acquired_count: 0,
            expires_at,
        });
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
        let level = &mut self.levels[index];
        let at = match level.back() {
            Some(last) if last.seq < entry.seq => level.len(),
            None => 0,
            _ => level
                .binary_search_by_key(&entry.seq, |e| e.seq)
                .unwrap_or_else(|at| at),
        };
        level.insert(at, entry);
    }

    /// Takes the message at the head: the oldest of the highest non-empty level.
    pub fn pop(&mut self) -> Option<QueueEntry> {
        let entry = self
            .levels
            .iter_mut()
            .rev()
            .find_map(|level| level.pop_front())?;
        self.ready_bytes -= entry.message.body_len() as u64;
        self.len -= 1;
        Some(entry)
    }

    /// Takes the message at position `seq` of priority level `level`, wherever it is.
    pub fn remove(&mut self, level: usize, seq: u64) -> Option<QueueEntry> {
        let level = self.levels.get_mut(level)?;
        let at = level.binary_search_by_key(&seq, |e| e.seq).ok()?;
        let entry = level.remove(at)?;
        self.ready_bytes -= entry.message.body_len() as u64;
        self.len -= 1;
        Some(entry)
    }

    /// The message at the head.
    pub fn peek(&self) -> Option<&QueueEntry> {
        self.levels.iter().rev().find_map(|level| level.front())
    }

    /// Removes every ready message, returning how many there were.
    pub fn purge(&mut self) -> usize {
        let n = self.len;
        self.levels.iter_mut().for_each(VecDeque::clear);
        self.len = 0;
        self.ready_bytes = 0;
        n
    }

    /// Every ready message, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &QueueEntry> {
        self.levels.iter().flat_map(|level| level.iter())
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use dwellmq_codec::BasicProperties;

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
        assert_eq!(q.peek().map(|e| e.seq), Some(2));
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
}
