//! Bringing a queue's stored messages back into it (at start, or when a declare takes back a
//! queue the restore kept): a paging queue as one run counted from the store, none of its
//! messages read; any other with its messages loaded page by page, with their exact delivery
//! state, and its kept dead letters.

use std::sync::Arc;

use dwellmq_core::queue::DeathReason;
use dwellmq_core::{Message, QueueEntry};
use dwellmq_store::{Snapshot, StoreError, StoredMessage};

use super::kept_dead_letters::reason_of_code;
use super::owner::QueueOwner;
use super::Queue;

/// Messages read per page when a queue is loaded.
const PAGE: usize = 4096;

/// A dead-lettered message its queue keeps until every target takes it: the message, why it
/// died, its position.
type KeptDeadLetter = (Arc<Message>, DeathReason, u64);

impl Queue {
    /// Takes back the messages `snapshot` holds under store id `id` (the next message takes
    /// `next_seq`); returns how many. A paging queue's first page is not read here: the caller
    /// reads it ([`Queue::read_first_page`]) once the queue is in its vhost, so that what dies
    /// at its head has somewhere to go; it ticks the queue once every definition is back.
    pub(crate) fn load_stored(
        self: &Arc<Self>,
        owner: &dyn QueueOwner,
        snapshot: &Snapshot,
        id: u64,
        next_seq: u64,
    ) -> Result<usize, StoreError> {
        if self.pages() {
            // Counted, not read: pages are read when a consumer or a get wants them.
            let stored = snapshot.queue_stored(id)?;
            self.restore_run(
                owner,
                stored.first_seq,
                stored.count,
                stored.bytes,
                next_seq,
            );
            return Ok(stored.count as usize);
        }
        let mut count = 0;
        let mut from = 0;
        loop {
            let page = snapshot.queue_messages(id, from, PAGE)?;
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            let full = page.len() == PAGE;
            let (entries, dead_letters) = self.entries(page);
            count += entries.len() + dead_letters.len();
            self.restore(owner, entries, next_seq);
            self.restore_dead_letters(owner, dead_letters);
            if !full {
                break;
            }
        }
        // Even an empty queue continues its numbering.
        self.restore(owner, Vec::new(), next_seq);
        Ok(count)
    }

    /// Stored messages as queue entries, each with the time its delayed retry is due (if it
    /// waits for one), and the dead-lettered ones the queue keeps (at-least-once
    /// dead-lettering). Their state is exact: `redelivered` only for a message delivered
    /// before the restart (its persist or a state write says so), and a quorum queue's counts.
    fn entries(
        &self,
        page: Vec<StoredMessage>,
    ) -> (Vec<(QueueEntry, Option<u64>)>, Vec<KeptDeadLetter>) {
        let mut out = Vec::with_capacity(page.len());
        let mut dead_letters = Vec::new();
        for stored in page {
            let guard = self
                .services
                .memory
                .charge_message(stored.message.body_len());
            let Some(message) = stored.message.unpack(Some(Box::new(guard))) else {
                tracing::warn!(queue = %self.name, seq = stored.seq, "stored message malformed, skipped");
                continue;
            };
            if let Some(code) = stored.state.dead_letter_reason {
                let reason = reason_of_code(code).unwrap_or(DeathReason::Rejected);
                dead_letters.push((message, reason, stored.seq));
                continue;
            }
            let entry = QueueEntry {
                message,
                seq: stored.seq,
                redelivered: stored.state.redelivered,
                delivery_count: stored.state.delivery_count,
                acquired_count: stored.state.acquired_count,
                expires_at: (stored.expires_at_ms != 0).then_some(stored.expires_at_ms),
            };
            let ready_at = stored.state.ready_at_ms;
            out.push((entry, (ready_at != 0).then_some(ready_at)));
        }
        (out, dead_letters)
    }
}
