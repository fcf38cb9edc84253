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
}

/// Ready messages ordered by `seq`.
///
/// New messages are appended in O(1); a requeued message goes back to its original position
/// (as RabbitMQ does since 2.7), found by binary search, so consumers see queue order again.
#[derive(Debug, Default)]
pub struct QueueMessages {
    ready: VecDeque<QueueEntry>,
    next_seq: u64,
    ready_bytes: u64,
}

impl QueueMessages {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a newly published message.
    pub fn push(&mut self, message: Arc<Message>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.ready_bytes += message.body_len() as u64;
        self.ready.push_back(QueueEntry {
            message,
            seq,
            redelivered: false,
            delivery_count: 0,
            acquired_count: 0,
        });
    }

    /// Puts a delivered message back at its original position.
    pub fn requeue(&mut self, entry: QueueEntry) {
        self.ready_bytes += entry.message.body_len() as u64;
        let at = match self.ready.back() {
            Some(last) if last.seq < entry.seq => self.ready.len(),
            None => 0,
            _ => self
                .ready
                .binary_search_by_key(&entry.seq, |e| e.seq)
                .unwrap_or_else(|at| at),
        };
        self.ready.insert(at, entry);
    }

    /// Takes the message at the head.
    pub fn pop(&mut self) -> Option<QueueEntry> {
        let entry = self.ready.pop_front()?;
        self.ready_bytes -= entry.message.body_len() as u64;
        Some(entry)
    }

    /// The message at the head.
    pub fn peek(&self) -> Option<&QueueEntry> {
        self.ready.front()
    }

    /// Removes every ready message, returning how many there were.
    pub fn purge(&mut self) -> usize {
        let n = self.ready.len();
        self.ready.clear();
        self.ready_bytes = 0;
        n
    }

    /// Number of ready messages.
    pub fn len(&self) -> usize {
        self.ready.len()
    }

    /// Whether no message is ready.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
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
}
