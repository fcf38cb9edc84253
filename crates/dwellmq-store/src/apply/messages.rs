//! Applying the message ops of a batch: persist, delivery state, forget, spill, purge.

use redb::ReadableTable;

use super::{put, remove, Tables, T};
use crate::layout::{message_key, pair};
use crate::records::{expiry_word, DeliveryState, Payload, MESSAGE_HEADER};

impl Tables<'_> {
    /// Writes a persistent message (its body counted in `queue_counts`).
    pub(super) fn persist(
        &mut self,
        queue: u64,
        seq: u64,
        expires_at_ms: u64,
        delivered: bool,
        message: &Payload,
    ) -> Result<(), redb::StorageError> {
        let key = message_key(queue, seq);
        if let Some(old) = self.messages.get(&key[..])? {
            // Written again (never the case today): counted once.
            self.count_changes.removed(queue, old.value());
        }
        self.count_changes.added(queue, message.body_len() as u64);
        put_message(&mut self.messages, &key, expires_at_ms, delivered, message)
    }

    /// Records a stored message's delivery state (none for the default one); a message no
    /// longer stored is left alone.
    pub(super) fn set_state(
        &mut self,
        queue: u64,
        seq: u64,
        state: &DeliveryState,
    ) -> Result<(), redb::StorageError> {
        let key = message_key(queue, seq);
        if self.messages.get(&key[..])?.is_none() {
            return Ok(());
        }
        if *state == DeliveryState::default() {
            remove(&mut self.state, &key)
        } else {
            debug_assert_eq!(state.value().len(), DeliveryState::LEN);
            put(&mut self.state, &key, &state.value())
        }
    }

    /// Removes the messages (and their state records) of a batch's `Forget`s, applied last
    /// and in key order: consumers ack in queue order, so the forgets of one queue come in
    /// runs of consecutive sequence numbers, and one range removal per run rewrites each leaf
    /// once where a removal per key would descend and rebalance the tree every time.
    ///
    /// Deferring them is safe: a message's key is never written again once forgotten, and a
    /// state write after its forget cannot occur (the message is gone).
    pub(crate) fn forget_all(
        &mut self,
        forgets: &mut [(u64, u64)],
    ) -> Result<(), redb::StorageError> {
        forgets.sort_unstable();
        let mut rest = &forgets[..];
        while let Some(&(queue, first)) = rest.first() {
            let run = 1 + rest
                .windows(2)
                .take_while(|w| w[1].0 == queue && w[1].1 == w[0].1.wrapping_add(1))
                .count();
            let last = rest[run - 1].1;
            if run == 1 {
                self.forget(queue, first)?;
            } else {
                // Every key between the two is one of the run's (sequence numbers are
                // consecutive within the queue's prefix).
                let (from, to) = (message_key(queue, first), message_key(queue, last));
                let counts = &mut self.count_changes;
                self.messages.retain_in(&from[..]..=&to[..], |_, value| {
                    counts.removed(queue, value);
                    false
                })?;
                self.state.retain_in(&from[..]..=&to[..], |_, _| false)?;
            }
            rest = &rest[run..];
        }
        Ok(())
    }

    /// Removes one stored message and its state record.
    pub(super) fn forget(&mut self, queue: u64, seq: u64) -> Result<(), redb::StorageError> {
        let key = message_key(queue, seq);
        if let Some(old) = self.messages.remove(&key[..])? {
            self.count_changes.removed(queue, old.value());
        }
        remove(&mut self.state, &key)
    }

    /// Removes the messages `from_seq..end_seq` of a queue and their state records.
    pub(super) fn forget_range(
        &mut self,
        queue: u64,
        from_seq: u64,
        end_seq: u64,
    ) -> Result<(), redb::StorageError> {
        let (from, to) = (message_key(queue, from_seq), message_key(queue, end_seq));
        let counts = &mut self.count_changes;
        self.messages.retain_in(&from[..]..&to[..], |_, value| {
            counts.removed(queue, value);
            false
        })?;
        self.state.retain_in(&from[..]..&to[..], |_, _| false)
    }

    pub(super) fn spill(
        &mut self,
        spill: u64,
        seq: u64,
        expires_at_ms: u64,
        message: &Payload,
    ) -> Result<(), redb::StorageError> {
        let key = message_key(spill, seq);
        put_message(&mut self.spilled, &key, expires_at_ms, false, message)
    }

    pub(super) fn unspill(
        &mut self,
        spill: u64,
        from_seq: u64,
        end_seq: u64,
    ) -> Result<(), redb::StorageError> {
        let from = message_key(spill, from_seq);
        if end_seq.saturating_sub(from_seq) == 1 {
            return remove(&mut self.spilled, &from);
        }
        let to = message_key(spill, end_seq);
        self.spilled.retain_in(&from[..]..&to[..], |_, _| false)
    }

    pub(super) fn purge(&mut self, queue: u64) -> Result<(), redb::StorageError> {
        self.count_changes.reset(queue);
        let (start, end) = (pair(queue, 0), queue_end(queue));
        for table in [&mut self.messages, &mut self.state] {
            match &end {
                Some(end) => table.retain_in(&start[..]..&end[..], |_, _| false)?,
                None => table.retain_in(&start[..].., |_, _| false)?,
            }
        }
        Ok(())
    }
}

fn queue_end(queue: u64) -> Option<[u8; 16]> {
    queue.checked_add(1).map(|next| pair(next, 0))
}

/// Writes a `messages` (or `spilled_messages`) record: the expiry word, then the message
/// packed straight into redb's page (one copy).
fn put_message(
    table: &mut T<'_>,
    key: &[u8],
    expires_at_ms: u64,
    delivered: bool,
    message: &Payload,
) -> Result<(), redb::StorageError> {
    let len = MESSAGE_HEADER + message.packed_len();
    let mut slot = table.insert_reserve(key, len)?;
    let out = slot.as_mut();
    let word = expiry_word(expires_at_ms, delivered);
    out[..MESSAGE_HEADER].copy_from_slice(&word.to_be_bytes());
    message.write_packed(&mut out[MESSAGE_HEADER..]);
    Ok(())
}
