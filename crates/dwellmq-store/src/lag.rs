//! Commit lag of the held-message index: the holds and releases submitted and not committed
//! yet. Only the writer knows when a commit is durable, so it keeps this list, and reads of
//! the index ([`HeldView`]) merge it with a snapshot: a submitted hold is listed and readable
//! at once, a submitted release hides its id at once. A far tier reading the index then never
//! has to reconcile what it submitted with what it reads.
//!
//! Every change of the list and every view's copy of it happen under one mutex, and the
//! writer forgets a batch's entries only after its commit is visible to new snapshots, so a
//! view sees each write in its snapshot, in its copy of the list, or in both; never in
//! neither.

use std::collections::BTreeMap;
use std::sync::Arc;

use dwellmq_core::schedule::DeadlineId;
use dwellmq_core::PackedMessage;

use crate::error::Result;
use crate::ops::Op;
use crate::read::Snapshot;
use crate::records::{DelayedMessage, Payload};

/// A submitted hold: what a read of it needs.
#[derive(Debug)]
struct LagHold {
    vhost: String,
    exchange: String,
    message: Payload,
}

impl LagHold {
    fn read(&self, id: DeadlineId) -> DelayedMessage {
        let message = match &self.message {
            Payload::Packed(packed) => packed.clone(),
            Payload::Message(message) => PackedMessage::pack(message),
        };
        DelayedMessage {
            id,
            vhost: self.vhost.clone(),
            exchange: self.exchange.clone(),
            message,
        }
    }

    fn of(&self, vhost: &str, exchange: &str) -> bool {
        self.vhost == vhost && self.exchange == exchange
    }
}

#[derive(Debug, Default)]
struct LagState {
    holds: BTreeMap<DeadlineId, Arc<LagHold>>,
    /// By id, how many submitted releases of it are not settled (a caller may remove an id
    /// twice; each submission is settled on its own).
    releases: BTreeMap<DeadlineId, u32>,
}

/// The list of submitted, not yet committed holds and releases (one per store).
#[derive(Debug, Default)]
pub(crate) struct Lag {
    state: parking_lot::Mutex<LagState>,
}

/// The hold and release ids among some ops: what the list forgets once they are settled.
#[derive(Debug, Default)]
pub(crate) struct LagKeys {
    holds: Vec<DeadlineId>,
    releases: Vec<DeadlineId>,
}

impl LagKeys {
    pub(crate) fn of<'a>(ops: impl IntoIterator<Item = &'a Op>) -> LagKeys {
        let mut keys = LagKeys::default();
        for op in ops {
            match op {
                Op::Hold { id, .. } => keys.holds.push(*id),
                Op::Release { id } => keys.releases.push(*id),
                _ => {}
            }
        }
        keys
    }

    fn is_empty(&self) -> bool {
        self.holds.is_empty() && self.releases.is_empty()
    }

    /// Both lists' keys.
    pub(crate) fn and(mut self, other: LagKeys) -> LagKeys {
        self.holds.extend(other.holds);
        self.releases.extend(other.releases);
        self
    }

    /// Leaves out one key for each of `kept`'s (those a failed commit carries into the next).
    /// Sorted merges: a carry may hold many thousands.
    pub(crate) fn without(mut self, kept: &LagKeys) -> LagKeys {
        self.holds = multiset_minus(self.holds, &kept.holds);
        self.releases = multiset_minus(self.releases, &kept.releases);
        self
    }

    /// The releases alone (the holds taken out).
    pub(crate) fn take_releases(&mut self) -> LagKeys {
        LagKeys {
            holds: Vec::new(),
            releases: std::mem::take(&mut self.releases),
        }
    }
}

/// `from` less one `id` for each in `less` (each counted as often as it occurs).
fn multiset_minus(mut from: Vec<DeadlineId>, less: &[DeadlineId]) -> Vec<DeadlineId> {
    if less.is_empty() {
        return from;
    }
    let mut less = less.to_vec();
    from.sort_unstable();
    less.sort_unstable();
    let mut less = less.into_iter().peekable();
    from.retain(|id| {
        while less.next_if(|l| l < id).is_some() {}
        less.next_if_eq(id).is_none()
    });
    from
}

fn is_lagged(op: &Op) -> bool {
    matches!(op, Op::Hold { .. } | Op::Release { .. })
}

impl Lag {
    /// Notes the holds and releases of a submission, before it reaches the writer (so that the
    /// writer's settling always finds them).
    pub(crate) fn submitted(&self, ops: &[Op]) {
        if !ops.iter().any(is_lagged) {
            return;
        }
        let mut state = self.state.lock();
        for op in ops {
            match op {
                Op::Hold {
                    id,
                    vhost,
                    exchange,
                    message,
                    ..
                } => {
                    let hold = LagHold {
                        vhost: vhost.clone(),
                        exchange: exchange.clone(),
                        message: message.clone(),
                    };
                    state.holds.insert(*id, Arc::new(hold));
                }
                Op::Release { id } => *state.releases.entry(*id).or_default() += 1,
                _ => {}
            }
        }
    }

    /// Forgets settled entries: committed (visible to every new snapshot), or failed and not
    /// retried.
    pub(crate) fn settled(&self, keys: &LagKeys) {
        if keys.is_empty() {
            return;
        }
        let mut state = self.state.lock();
        for id in &keys.holds {
            state.holds.remove(id);
        }
        for id in &keys.releases {
            if let Some(n) = state.releases.get_mut(id) {
                *n -= 1;
                if *n == 0 {
                    state.releases.remove(id);
                }
            }
        }
    }

    /// A view of the held index: `snapshot` (opened under the list's lock) and the list as
    /// it is at that moment.
    pub(crate) fn view(&self, snapshot: impl FnOnce() -> Result<Snapshot>) -> Result<HeldView> {
        let state = self.state.lock();
        let snapshot = snapshot()?;
        let holds = state
            .holds
            .iter()
            .map(|(&id, hold)| (id, Arc::clone(hold)))
            .collect();
        let releases = state.releases.keys().copied().collect();
        drop(state);
        Ok(HeldView {
            snapshot,
            holds,
            releases,
        })
    }

    /// Whether a hold of `id` is submitted and not settled.
    pub(crate) fn holds(&self, id: DeadlineId) -> bool {
        self.state.lock().holds.contains_key(&id)
    }

    /// Whether a release of `id` is submitted and not settled.
    pub(crate) fn releases(&self, id: DeadlineId) -> bool {
        self.state.lock().releases.contains_key(&id)
    }

    /// (holds, releases) in the list: for tests.
    pub(crate) fn len(&self) -> (usize, usize) {
        let state = self.state.lock();
        (state.holds.len(), state.releases.len())
    }
}

/// The held-message index as submitted: a committed snapshot with the holds submitted since
/// shown and the releases submitted since hidden. Hold it briefly, as a [`Snapshot`].
pub struct HeldView {
    snapshot: Snapshot,
    /// Submitted holds not known committed, in id order.
    holds: Vec<(DeadlineId, Arc<LagHold>)>,
    /// Ids whose release is submitted and not known committed, in order.
    releases: Vec<DeadlineId>,
}

impl std::fmt::Debug for HeldView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldView")
            .field("snapshot", &self.snapshot)
            .field("holds", &self.holds.len())
            .field("releases", &self.releases.len())
            .finish()
    }
}

impl HeldView {
    /// The committed snapshot under the view (what is durable).
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Whether a release of `id` is submitted and not committed yet.
    pub fn releasing(&self, id: DeadlineId) -> bool {
        self.releases.binary_search(&id).is_ok()
    }

    fn lag_hold(&self, id: DeadlineId) -> Option<&LagHold> {
        let at = self.holds.binary_search_by_key(&id, |(id, _)| *id).ok()?;
        Some(&self.holds[at].1)
    }

    /// Submitted holds from `from` on (after it unless `inclusive`), in id order.
    fn holds_from(
        &self,
        from: Option<DeadlineId>,
        inclusive: bool,
    ) -> impl Iterator<Item = (DeadlineId, &LagHold)> + '_ {
        let start = match from {
            None => 0,
            Some(from) => {
                self.holds.partition_point(
                    |(id, _)| {
                        if inclusive {
                            *id < from
                        } else {
                            *id <= from
                        }
                    },
                )
            }
        };
        self.holds[start..].iter().map(|(id, hold)| (*id, &**hold))
    }

    /// How many releases are submitted from `from` on: a page of the snapshot read that many
    /// ids longer still fills the page once they are hidden.
    fn releases_from(&self, from: Option<DeadlineId>) -> usize {
        match from {
            None => self.releases.len(),
            Some(from) => self.releases.len() - self.releases.partition_point(|id| *id < from),
        }
    }

    /// Merges a page of the snapshot with submitted holds: released ids out, duplicates (a
    /// hold committed while still listed) once, the first `limit` kept.
    fn merge(
        &self,
        mut ids: Vec<DeadlineId>,
        holds: impl Iterator<Item = DeadlineId>,
        limit: usize,
    ) -> Vec<DeadlineId> {
        if !self.releases.is_empty() {
            ids.retain(|&id| !self.releasing(id));
        }
        ids.extend(holds.filter(|&id| !self.releasing(id)).take(limit));
        ids.sort_unstable();
        ids.dedup();
        ids.truncate(limit);
        ids
    }

    /// As [`Snapshot::delayed_ids`]: up to `limit` held ids of every exchange in (due, seq)
    /// order, strictly after `after`.
    pub fn delayed_ids(&self, after: Option<DeadlineId>, limit: usize) -> Result<Vec<DeadlineId>> {
        self.delayed_ids_skipping(after, limit, &|_, _| false)
    }

    /// As [`Snapshot::delayed_ids_skipping`]: the same, without the ids of the exchanges
    /// `skip` names.
    pub fn delayed_ids_skipping(
        &self,
        after: Option<DeadlineId>,
        limit: usize,
        skip: &dyn Fn(&str, &str) -> bool,
    ) -> Result<Vec<DeadlineId>> {
        let wanted = limit.saturating_add(self.releases_from(after));
        let ids = self.snapshot.delayed_ids_skipping(after, wanted, skip)?;
        let holds = self
            .holds_from(after, false)
            .filter(|(_, hold)| !skip(&hold.vhost, &hold.exchange))
            .map(|(id, _)| id);
        Ok(self.merge(ids, holds, limit))
    }

    /// As [`Snapshot::delayed_ids_of`]: up to `limit` ids `exchange` holds, from `from`
    /// (inclusive).
    pub fn delayed_ids_of(
        &self,
        vhost: &str,
        exchange: &str,
        from: DeadlineId,
        limit: usize,
    ) -> Result<Vec<DeadlineId>> {
        let wanted = limit.saturating_add(self.releases_from(Some(from)));
        let ids = self
            .snapshot
            .delayed_ids_of(vhost, exchange, from, wanted)?;
        let holds = self
            .holds_from(Some(from), true)
            .filter(|(_, hold)| hold.of(vhost, exchange))
            .map(|(id, _)| id);
        Ok(self.merge(ids, holds, limit))
    }

    /// Whether some exchange holds `id`.
    pub fn delayed_contains(&self, id: DeadlineId) -> Result<bool> {
        if self.releasing(id) {
            return Ok(false);
        }
        if self.lag_hold(id).is_some() {
            return Ok(true);
        }
        self.snapshot.delayed_contains(id)
    }

    /// A held message, if it is held (a submitted one is packed from what was submitted).
    pub fn delayed_message(&self, id: DeadlineId) -> Result<Option<DelayedMessage>> {
        if self.releasing(id) {
            return Ok(None);
        }
        if let Some(hold) = self.lag_hold(id) {
            return Ok(Some(hold.read(id)));
        }
        self.snapshot.delayed_message(id)
    }

    /// How many messages are held (each submitted entry looked up in the snapshot: for
    /// tests and checks, not for a hot path).
    pub fn delayed_count(&self) -> Result<u64> {
        let mut count = self.snapshot.delayed_count()?;
        for &(id, _) in &self.holds {
            if !self.releasing(id) && !self.snapshot.delayed_contains(id)? {
                count += 1;
            }
        }
        for &id in &self.releases {
            if self.snapshot.delayed_contains(id)? {
                count = count.saturating_sub(1);
            }
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_takes_out_one_key_for_each_kept_one() {
        let id = |seq| DeadlineId { due_ms: 1, seq };
        let keys = LagKeys {
            holds: vec![id(3), id(1), id(2)],
            releases: vec![id(5), id(4), id(5), id(6)],
        };
        let kept = LagKeys {
            holds: vec![id(2), id(9)],
            releases: vec![id(5), id(6), id(6)],
        };
        let left = keys.without(&kept);
        assert_eq!(left.holds, [id(1), id(3)]);
        assert_eq!(left.releases, [id(4), id(5)]);
    }
}
