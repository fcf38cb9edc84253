//! What the simulation knows a broker must hold: each message it ever published, by id, is
//! confirmed somewhere (exactly once, in one of a few places), possibly there (at most once:
//! not confirmed, or removed by an ack, purge or cancel that is not known to be committed), or
//! gone for good (its removal is known to be committed).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Where a message can be seen.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// Ready in a queue.
    Queue(String),
    /// Held by the delayed exchange, routed to the named queue at release.
    Held(String),
    /// Dead-lettered and kept by the named source until its target takes it (at-least-once
    /// dead-lettering).
    Kept(String),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Queue(q) => write!(f, "queue {q}"),
            Place::Held(q) => write!(f, "held for {q}"),
            Place::Kept(q) => write!(f, "kept dead-lettered by {q}"),
        }
    }
}

impl Place {
    /// Where a message here may be by the next look, without anyone taking it: a held one may
    /// be released into its queue, one in `q2` may expire (`x-message-ttl`) into `dead`, one
    /// in `q3` may expire into `dead3` or, refused there, be kept by `q3`.
    pub fn reachable(self) -> Vec<Place> {
        match self {
            Place::Held(queue) => {
                let mut places = vec![Place::Held(queue.clone())];
                places.extend(Place::Queue(queue).reachable());
                places
            }
            Place::Queue(queue) if queue == "q2" => {
                vec![Place::Queue(queue), Place::Queue("dead".into())]
            }
            Place::Queue(queue) if queue == "q3" => vec![
                Place::Queue(queue.clone()),
                Place::Kept(queue),
                Place::Queue("dead3".into()),
            ],
            Place::Kept(queue) => vec![Place::Kept(queue), Place::Queue("dead3".into())],
            place => vec![place],
        }
    }
}

/// Every place each message was seen in, in one look at the broker.
pub type Seen = BTreeMap<u64, Vec<Place>>;

#[derive(Default)]
pub struct Model {
    /// Confirmed and not removed: present exactly once, in one of these places.
    must: BTreeMap<u64, Vec<Place>>,
    /// Present at most once: never confirmed (nacked, or in flight at a crash).
    maybe: BTreeSet<u64>,
    /// Removed (acked, purged, cancelled, deleted with its queue), not yet known committed:
    /// present at most once.
    removing: BTreeSet<u64>,
    /// Removed, and the removal is committed: never seen again.
    gone: BTreeSet<u64>,
    /// Returns to a quorum queue (a nack with requeue), by message: (committed, not yet known
    /// committed). Its `x-acquired-count` never falls below the committed ones.
    returns: BTreeMap<u64, (u64, u64)>,
}

impl Model {
    /// The broker confirmed `id`: it is in one of `places`.
    pub fn confirmed(&mut self, id: u64, places: Vec<Place>) {
        self.maybe.remove(&id);
        self.must.insert(id, places);
    }

    /// `id` was published and not confirmed.
    pub fn unconfirmed(&mut self, id: u64) {
        self.maybe.insert(id);
    }

    /// `id` now may be in `places` too (a reject on its way to a dead-letter queue).
    pub fn may_move(&mut self, id: u64, place: Place) {
        if let Some(places) = self.must.get_mut(&id) {
            if !places.contains(&place) {
                places.push(place);
            }
        }
    }

    /// `id` was taken away by the broker (ack, purge, cancel, deletion).
    pub fn removed(&mut self, id: u64) {
        self.must.remove(&id);
        self.maybe.remove(&id);
        self.removing.insert(id);
    }

    /// `id` went back to its quorum queue once more.
    pub fn returned(&mut self, id: u64) {
        self.returns.entry(id).or_default().1 += 1;
    }

    /// Returns of `id` known to be committed.
    pub fn returns_committed(&self, id: u64) -> u64 {
        self.returns.get(&id).map_or(0, |r| r.0)
    }

    /// Everything removed or returned so far is committed (a later confirm came back).
    pub fn committed(&mut self) {
        self.gone.append(&mut self.removing);
        for (committed, pending) in self.returns.values_mut() {
            *committed += std::mem::take(pending);
        }
    }

    /// Checks one look at the broker against the model; every violation, one per line.
    pub fn check(&self, seen: &Seen) -> Result<(), String> {
        let mut violations = Vec::new();
        for (id, places) in seen {
            if places.len() > 1 {
                violations.push(format!(
                    "message {id} is there {} times: {places:?}",
                    places.len()
                ));
            }
            if self.gone.contains(id) {
                violations.push(format!(
                    "message {id} came back after its removal was committed: {places:?}"
                ));
            } else if let Some(allowed) = self.must.get(id) {
                for place in places.iter().filter(|p| !allowed.contains(p)) {
                    violations.push(format!(
                        "message {id} is in {place}, expected one of {allowed:?}"
                    ));
                }
            } else if !self.maybe.contains(id) && !self.removing.contains(id) {
                violations.push(format!("message {id} was never published: {places:?}"));
            }
        }
        for (id, allowed) in &self.must {
            if !seen.contains_key(id) {
                violations.push(format!(
                    "confirmed message {id} is lost (expected in one of {allowed:?})"
                ));
            }
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations.join("\n"))
        }
    }

    /// After a check that passed: what was seen is what the broker holds (a message that may
    /// have been there is now either there or gone for good).
    pub fn adopt(&mut self, seen: &Seen) {
        // A return not known to be committed may have been lost with the crash.
        for (_, pending) in self.returns.values_mut() {
            *pending = 0;
        }
        for id in std::mem::take(&mut self.maybe)
            .into_iter()
            .chain(std::mem::take(&mut self.removing))
        {
            if !seen.contains_key(&id) {
                self.gone.insert(id);
            }
        }
        self.must = seen
            .iter()
            .map(|(&id, places)| {
                let allowed = match places.as_slice() {
                    [place] => place.clone().reachable(),
                    _ => places.clone(),
                };
                (id, allowed)
            })
            .collect();
    }

    /// A restart: `ids` (transient messages in classic queues) are gone for good, wherever
    /// they were (in memory, or spilled to disk under memory pressure).
    pub fn lost_with_restart(&mut self, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            self.must.remove(&id);
            self.maybe.remove(&id);
            self.removing.remove(&id);
            self.gone.insert(id);
        }
    }

    /// Confirmed messages not removed.
    pub fn confirmed_count(&self) -> usize {
        self.must.len()
    }
}
