//! Sets of destinations with binding counts, and de-duplication of a routing result.

use std::collections::HashMap;

use crate::routing::Destination;

/// Above this many entries a set keeps a hash index; below, a linear scan is faster.
const INDEX_THRESHOLD: usize = 16;

/// The distinct destinations reached through one index slot (a direct key, a topic trie node),
/// each with how many bindings lead there (bindings to one destination may differ only by
/// arguments). Iteration order is insertion order, disturbed by removals.
#[derive(Debug, Clone, Default)]
pub(crate) struct DestinationCounts {
    entries: Vec<(Destination, u32)>,
    index: Option<HashMap<Destination, usize>>,
}

impl DestinationCounts {
    fn position(&self, d: &Destination) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(d).copied(),
            None => self.entries.iter().position(|(e, _)| e == d),
        }
    }

    /// Counts one more binding to `d`.
    pub(crate) fn add(&mut self, d: &Destination) {
        if let Some(i) = self.position(d) {
            if let Some(entry) = self.entries.get_mut(i) {
                entry.1 = entry.1.saturating_add(1);
            }
            return;
        }
        self.entries.push((d.clone(), 1));
        let last = self.entries.len() - 1;
        match &mut self.index {
            Some(index) => {
                index.insert(d.clone(), last);
            }
            None if self.entries.len() > INDEX_THRESHOLD => {
                self.index = Some(
                    self.entries
                        .iter()
                        .enumerate()
                        .map(|(i, (e, _))| (e.clone(), i))
                        .collect(),
                );
            }
            None => {}
        }
    }

    /// Counts one binding less to `d`, forgetting `d` at zero.
    pub(crate) fn remove(&mut self, d: &Destination) {
        let Some(i) = self.position(d) else { return };
        let Some(entry) = self.entries.get_mut(i) else {
            return;
        };
        entry.1 -= 1;
        if entry.1 > 0 {
            return;
        }
        self.entries.swap_remove(i);
        if let Some(index) = &mut self.index {
            index.remove(d);
            if let Some((moved, _)) = self.entries.get(i) {
                index.insert(moved.clone(), i);
            }
            if self.entries.len() <= INDEX_THRESHOLD / 2 {
                self.index = None;
            }
        }
    }

    /// Whether no destination is left.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends every destination to `out`.
    pub(crate) fn extend_into(&self, out: &mut Vec<Destination>) {
        out.extend(self.entries.iter().map(|(d, _)| d.clone()));
    }
}

/// Removes repeated destinations from `out[start..]`, leaving `out[..start]` untouched.
/// In place, without allocating; order is kept for small results.
pub(crate) fn dedupe_tail(out: &mut Vec<Destination>, start: usize) {
    let len = out.len();
    if len.saturating_sub(start) < 2 {
        return;
    }
    let mut write = start + 1;
    if len - start <= INDEX_THRESHOLD {
        for read in start + 1..len {
            if !out[start..write].contains(&out[read]) {
                out.swap(write, read);
                write += 1;
            }
        }
    } else {
        out[start..].sort_unstable();
        for read in start + 1..len {
            if out[read] != out[write - 1] {
                out.swap(write, read);
                write += 1;
            }
        }
    }
    out.truncate(write);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(n: usize) -> Destination {
        Destination::Queue(format!("q{n}").into())
    }

    #[test]
    fn counts_bindings_per_destination() {
        let mut s = DestinationCounts::default();
        s.add(&q(1));
        s.add(&q(1));
        s.add(&q(2));
        let mut out = vec![];
        s.extend_into(&mut out);
        assert_eq!(out, vec![q(1), q(2)]);
        s.remove(&q(1));
        out.clear();
        s.extend_into(&mut out);
        assert_eq!(out, vec![q(1), q(2)]);
        s.remove(&q(1));
        s.remove(&q(2));
        s.remove(&q(3));
        assert!(s.is_empty());
    }

    #[test]
    fn large_sets_stay_consistent_through_the_index() {
        let mut s = DestinationCounts::default();
        for i in 0..100 {
            s.add(&q(i));
            s.add(&q(i));
        }
        for i in (0..100).step_by(2) {
            s.remove(&q(i));
            s.remove(&q(i));
        }
        let mut out = vec![];
        s.extend_into(&mut out);
        out.sort();
        let mut expected: Vec<_> = (1..100).step_by(2).map(q).collect();
        expected.sort();
        assert_eq!(out, expected);
        for i in (1..100).step_by(2) {
            s.remove(&q(i));
            assert!(!s.is_empty() || i == 99);
            s.remove(&q(i));
        }
        assert!(s.is_empty());
    }

    #[test]
    fn dedupe_keeps_the_prefix() {
        let mut out = vec![q(1), q(1), q(2), q(1), q(3), q(2)];
        dedupe_tail(&mut out, 2);
        assert_eq!(out, vec![q(1), q(1), q(2), q(1), q(3)]);
        let mut big: Vec<_> = (0..40).map(|i| q(i % 7)).collect();
        big.insert(0, q(3));
        dedupe_tail(&mut big, 1);
        assert_eq!(big.len(), 8);
        let mut rest = big[1..].to_vec();
        rest.sort();
        rest.dedup();
        assert_eq!(rest.len(), 7);
    }
}
