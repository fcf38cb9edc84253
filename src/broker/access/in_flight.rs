//! User and permission changes whose store write is in flight, per key, in the order memory
//! made them: what a failed write takes back. A change put in effect at once and then not
//! written would otherwise live on in memory until a restart dropped it.
//!
//! A failed change puts back what it replaced, unless a later change of the same key replaced
//! it meanwhile: that later change then replaced what the failed one did (if it fails too, it
//! puts back that, not the failed change). A deletion is never taken back: the store retries
//! its mark until it is written.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Tables, Written};

/// One change of one key.
struct Change<T> {
    id: u64,
    /// What it put in effect; `None` for a deletion.
    put: Option<Arc<T>>,
    /// What was in effect before it (`None`: nothing).
    replaced: Option<Arc<T>>,
}

/// The in-flight changes of a table keyed by `K`.
pub(super) struct InFlight<K, T> {
    next_id: u64,
    by_key: BTreeMap<K, Vec<Change<T>>>,
}

impl<K, T> Default for InFlight<K, T> {
    fn default() -> Self {
        InFlight {
            next_id: 0,
            by_key: BTreeMap::new(),
        }
    }
}

/// What a finished write asks of the table: set the key to this (`None`: remove it).
pub(super) type Restore<T> = Option<Option<Arc<T>>>;

impl<K: Ord, T> InFlight<K, T> {
    /// `put` (`None`: a deletion) replaced `replaced` under `key`, and its write was
    /// submitted; returns the change's id for [`InFlight::finish`].
    pub(super) fn begin(&mut self, key: K, put: Option<Arc<T>>, replaced: Option<Arc<T>>) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        self.by_key
            .entry(key)
            .or_default()
            .push(Change { id, put, replaced });
        id
    }

    /// The write of change `id` is over; `current` is what is in effect under `key` now.
    /// Returns what to put back when the write failed and the change is still in effect.
    pub(super) fn finish(
        &mut self,
        key: &K,
        id: u64,
        failed: bool,
        current: Option<&Arc<T>>,
    ) -> Restore<T> {
        let chain = self.by_key.get_mut(key)?;
        let at = chain.iter().position(|c| c.id == id)?;
        let change = chain.remove(at);
        let restore = match change.put {
            // Written, or a deletion (written in the end, whatever this commit did).
            None => None,
            Some(_) if !failed => None,
            Some(put) => match chain.get_mut(at) {
                Some(later) => {
                    later.replaced = change.replaced;
                    None
                }
                None => current
                    .is_some_and(|now| Arc::ptr_eq(now, &put))
                    .then_some(change.replaced),
            },
        };
        if chain.is_empty() {
            self.by_key.remove(key);
        }
        restore
    }
}

impl Tables {
    /// The writes of `written` are over: a failed one takes its change back if nothing
    /// replaced it since. True if anything was taken back.
    pub(super) fn finish(&mut self, written: Vec<Written>, failed: bool) -> bool {
        let mut undone = false;
        for w in written {
            match w {
                Written::User(name, id) => {
                    let current = self.users.get(&name);
                    if let Some(restore) = self.users_in_flight.finish(&name, id, failed, current) {
                        tracing::warn!(user = %name, "the user could not be written: it is taken back");
                        undone = true;
                        match restore {
                            Some(user) => self.users.insert(name, user),
                            None => self.users.remove(&name),
                        };
                    }
                }
                Written::Permission(key, id) => {
                    let current = self.permissions.get(&key);
                    let restore = self.permissions_in_flight.finish(&key, id, failed, current);
                    if let Some(restore) = restore {
                        tracing::warn!(vhost = %key.0, user = %key.1, "the permission could not be written: it is taken back");
                        undone = true;
                        match restore {
                            Some(permission) => self.permissions.insert(key, permission),
                            None => self.permissions.remove(&key),
                        };
                    }
                }
            }
        }
        undone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(n: u32) -> Arc<u32> {
        Arc::new(n)
    }

    #[test]
    fn a_failed_change_puts_back_what_it_replaced() {
        let mut flight = InFlight::default();
        let (old, new) = (value(1), value(2));
        let id = flight.begin("k", Some(Arc::clone(&new)), Some(Arc::clone(&old)));
        let restore = flight.finish(&"k", id, true, Some(&new));
        assert!(matches!(restore, Some(Some(v)) if Arc::ptr_eq(&v, &old)));
        let id = flight.begin("k", Some(Arc::clone(&new)), None);
        assert!(matches!(
            flight.finish(&"k", id, true, Some(&new)),
            Some(None)
        ));
        let id = flight.begin("k", Some(Arc::clone(&new)), None);
        assert!(flight.finish(&"k", id, false, Some(&new)).is_none());
        assert!(flight.by_key.is_empty());
    }

    #[test]
    fn a_later_change_takes_over_what_a_failed_one_replaced() {
        let mut flight = InFlight::default();
        let (x, a, b) = (value(0), value(1), value(2));
        let first = flight.begin("k", Some(Arc::clone(&a)), Some(Arc::clone(&x)));
        let second = flight.begin("k", Some(Arc::clone(&b)), Some(Arc::clone(&a)));
        // Both in one failed commit: the first finds the second in effect, the second then
        // puts back what was there before both.
        assert!(flight.finish(&"k", first, true, Some(&b)).is_none());
        let restore = flight.finish(&"k", second, true, Some(&b));
        assert!(matches!(restore, Some(Some(v)) if Arc::ptr_eq(&v, &x)));
    }

    #[test]
    fn a_deletion_is_never_taken_back_and_a_change_before_it_stays_gone() {
        let mut flight = InFlight::default();
        let (x, a) = (value(0), value(1));
        let put = flight.begin("k", Some(Arc::clone(&a)), Some(Arc::clone(&x)));
        let deleted = flight.begin("k", None, Some(Arc::clone(&a)));
        assert!(flight.finish(&"k", put, true, None).is_none());
        assert!(flight.finish(&"k", deleted, true, None).is_none());
        // A put after a deletion, failed: nothing again.
        let deleted = flight.begin("k", None, Some(Arc::clone(&x)));
        let put = flight.begin("k", Some(Arc::clone(&a)), None);
        assert!(flight.finish(&"k", deleted, true, Some(&a)).is_none());
        assert!(matches!(
            flight.finish(&"k", put, true, Some(&a)),
            Some(None)
        ));
    }
}
