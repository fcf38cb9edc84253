//! `queue_counts` for a store written before it existed (formats 2 and 3, and the first
//! builds of format 4): one scan of `messages` in key order, one row per queue that has any.

use dwellmq_core::PackedMessage;
use redb::{ReadableTable, WriteTransaction};

use super::{StepError, StepResult};
use crate::layout::{split_pair, MESSAGES, QUEUE_COUNTS};
use crate::queue_counts::encode_count;
use crate::records::MESSAGE_HEADER;

/// Counts every queue's messages and body octets; returns how many queues have a row.
pub(crate) fn count_queues(tx: &WriteTransaction) -> StepResult<u64> {
    let messages = tx.open_table(MESSAGES)?;
    let mut counts = tx.open_table(QUEUE_COUNTS)?;
    let mut rows = 0;
    let mut current: Option<(u64, u64, u64)> = None;
    for entry in messages.iter()? {
        let (key, value) = entry?;
        let (queue, _) = split_pair(key.value())
            .ok_or_else(|| StepError::Corrupt("messages", key.value().to_vec()))?;
        // As the writer counts: a malformed record with no octets (a read reports it).
        let body = value
            .value()
            .get(MESSAGE_HEADER..)
            .and_then(PackedMessage::body_len_of)
            .unwrap_or(0) as u64;
        match &mut current {
            Some((q, count, bytes)) if *q == queue => {
                *count += 1;
                *bytes += body;
            }
            _ => {
                if let Some((q, count, bytes)) = current.take() {
                    counts.insert(&q.to_be_bytes()[..], &encode_count(count, bytes)[..])?;
                    rows += 1;
                }
                current = Some((queue, 1, body));
            }
        }
    }
    if let Some((q, count, bytes)) = current {
        counts.insert(&q.to_be_bytes()[..], &encode_count(count, bytes)[..])?;
        rows += 1;
    }
    Ok(rows)
}
