//! What failed commits leave for the next one: every submission that removes something (or
//! writes a delivery state), whole, and every submission of a group in which one does. The
//! next commit writes all of it at once, first, so within the carry an op that a later one
//! makes pointless can go: a store that keeps failing while a quorum queue redelivers, or an
//! operator purges again and again, carries one op per message or queue, not one per
//! submission.

use std::collections::HashSet;

use dwellmq_core::schedule::DeadlineId;

use crate::ops::Op;
use crate::writer::Submission;

/// The ops failed commits left to retry, in submission order.
#[derive(Debug, Default)]
pub(crate) struct Carry {
    ops: Vec<Op>,
}

impl Carry {
    pub(crate) fn ops(&self) -> &[Op] {
        &self.ops
    }

    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Everything carried was committed.
    pub(crate) fn clear(&mut self) {
        self.ops.clear();
    }

    /// Keeps what the failed commit of `batch` must still write. A removal (or a state write:
    /// see [`Op::is_retried`]) is never given up, and it is never written without what it was
    /// submitted with: a submission holding one is retried whole, and so is every submission
    /// of a group in which one does (a delayed release's queue copies and the removal of its
    /// hold; a dead-lettering's removal from its queue and its copies). A submission of plain
    /// writes is not retried: its submitter heard of the failure (the publisher is nacked)
    /// and nothing confirmed depends on it. Then drops what later ops make pointless.
    ///
    /// `retried` is [`retry_marks`] of the batch as submitted, taken before the writer
    /// elided pairs in it: a release elided with its hold still makes its group retried (a
    /// delayed message moved and released in one batch must not lose the queue copy that
    /// its release's group wrote).
    pub(crate) fn keep(&mut self, batch: &[Submission], retried: &[bool]) {
        let must_retry = |i: usize| retried.get(i).copied().unwrap_or(true);
        let groups: Vec<u64> = batch
            .iter()
            .enumerate()
            .filter(|&(i, _)| must_retry(i))
            .filter_map(|(_, s)| s.group)
            .collect();
        let kept = batch
            .iter()
            .enumerate()
            .filter(|&(i, s)| must_retry(i) || s.group.is_some_and(|g| groups.contains(&g)));
        self.ops.extend(kept.flat_map(|(_, s)| &s.ops).cloned());
        let dropped = compact(&mut self.ops);
        if dropped > 0 {
            tracing::debug!(dropped, carried = self.ops.len(), "carried ops superseded");
        }
    }
}

/// Which submissions of `batch` a failed commit must retry for their own sake: those holding a
/// removal or a state write ([`Op::is_retried`]). Taken before elision.
pub(crate) fn retry_marks(batch: &[Submission]) -> Vec<bool> {
    batch
        .iter()
        .map(|s| s.ops.iter().any(Op::is_retried))
        .collect()
}

/// Drops each op that a later op of the carry makes pointless, whatever comes between (all of
/// it commits together, so nothing is written in part):
/// - a state write, by a later one or a forget of its message;
/// - a persist, by a later forget of its message (the forget stays: the persist may have
///   reached the disk with a commit that failed late, and then it must go);
/// - a forget, a release, a purge, a range removal or an unspill, by the same op later;
/// - a stream's truncation, by a later one of the same stream that cuts as far or further.
///
/// Holds stay (one may be on disk already, and its release decides). Returns how many went.
fn compact(ops: &mut Vec<Op>) -> usize {
    #[derive(PartialEq, Eq, Hash)]
    enum Range {
        Forget(u64, u64, u64),
        Unspill(u64, u64, u64),
    }
    let mut forgotten: HashSet<(u64, u64)> = HashSet::new();
    let mut stated: HashSet<(u64, u64)> = HashSet::new();
    let mut released: HashSet<DeadlineId> = HashSet::new();
    let mut purged: HashSet<u64> = HashSet::new();
    // The highest cut a later truncation of each stream makes.
    let mut truncated: std::collections::HashMap<u64, u64> = Default::default();
    let mut ranges: HashSet<Range> = HashSet::new();
    let mut keep = vec![true; ops.len()];
    for (at, op) in ops.iter().enumerate().rev() {
        keep[at] = match op {
            Op::Forget { queue, seq } => forgotten.insert((*queue, *seq)),
            Op::SetState { queue, seq, .. } => {
                !forgotten.contains(&(*queue, *seq)) && stated.insert((*queue, *seq))
            }
            Op::Persist { queue, seq, .. } => !forgotten.contains(&(*queue, *seq)),
            Op::Release { id } => released.insert(*id),
            Op::Purge { queue } => purged.insert(*queue),
            Op::ForgetRange {
                queue,
                from_seq,
                end_seq,
            } => ranges.insert(Range::Forget(*queue, *from_seq, *end_seq)),
            Op::Unspill {
                spill,
                from_seq,
                end_seq,
            } => ranges.insert(Range::Unspill(*spill, *from_seq, *end_seq)),
            Op::StreamTruncate {
                stream,
                before_offset,
            } => {
                let later = truncated.entry(*stream).or_default();
                let needed = *before_offset > *later;
                *later = (*later).max(*before_offset);
                needed
            }
            _ => true,
        };
    }
    let before = ops.len();
    let mut flags = keep.into_iter();
    ops.retain(|_| flags.next().unwrap_or(true));
    before - ops.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::DeliveryState;

    fn state(count: u32) -> Op {
        Op::SetState {
            queue: 1,
            seq: 1,
            state: DeliveryState {
                delivery_count: count,
                ..DeliveryState::default()
            },
        }
    }

    fn payload() -> crate::records::Payload {
        crate::records::Payload::Message(dwellmq_core::Message::new(
            "".into(),
            "k".into(),
            dwellmq_codec::BasicProperties::default(),
            dwellmq_core::Body::Single(bytes::Bytes::from_static(b"x")),
            None,
        ))
    }

    fn persist(seq: u64) -> Op {
        Op::Persist {
            queue: 1,
            seq,
            expires_at_ms: 0,
            delivered: false,
            message: payload(),
        }
    }

    fn describe(ops: &[Op]) -> Vec<String> {
        ops.iter()
            .map(|op| match op {
                Op::SetState { seq, state, .. } => format!("state {seq} {}", state.delivery_count),
                Op::Persist { seq, .. } => format!("persist {seq}"),
                Op::Forget { seq, .. } => format!("forget {seq}"),
                Op::Release { id } => format!("release {}", id.seq),
                Op::Purge { queue } => format!("purge {queue}"),
                Op::Hold { id, .. } => format!("hold {}", id.seq),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn later_ops_supersede_earlier_ones_and_the_last_of_each_stays_in_place() {
        let id = DeadlineId { due_ms: 5, seq: 9 };
        let hold = Op::Hold {
            id,
            held_at_ms: 0,
            vhost: "/".into(),
            exchange: "d".into(),
            message: payload(),
        };
        let mut ops = vec![
            state(1),
            Op::Purge { queue: 2 },
            persist(7),
            hold,
            state(2),
            Op::Release { id },
            Op::Purge { queue: 2 },
            state(3),
            Op::Forget { queue: 1, seq: 7 },
            Op::Release { id },
            Op::Forget { queue: 1, seq: 7 },
        ];
        assert_eq!(compact(&mut ops), 6);
        assert_eq!(
            describe(&ops),
            ["hold 9", "purge 2", "state 1 3", "release 9", "forget 7"]
        );
    }

    #[test]
    fn a_state_write_before_a_forget_of_its_message_goes() {
        let mut ops = vec![state(4), Op::Forget { queue: 1, seq: 1 }, state(5)];
        compact(&mut ops);
        // The state written after the forget finds no message: harmless, and kept (it is the
        // last state write).
        assert_eq!(describe(&ops), ["forget 1", "state 1 5"]);
    }
}
