//! What the simulation knows a broker must hold, message by message: where each one may be
//! (and how many times), in which order within its queue, whether it was delivered before,
//! when it expires and what its expiry does, and the death it carries once dead-lettered.
//!
//! The model is strict while the broker runs (every move the simulation causes is known, and
//! so is every deadline on the manual clock) and widens only where a crash makes the broker's
//! state uncertain: what was not known committed at a power cut may be either way, and the
//! first look after the restart settles it (`adopt`).

use std::collections::BTreeMap;
use std::fmt;

use super::queues::{spec, PAGING};

/// Spacing of the positions the model gives (see `Model::position`).
pub const POSITION_STEP: u64 = 1 << 20;

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

/// How many times a message may be seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Confirmed (or seen after a restart) and not taken away: exactly once.
    Must,
    /// Not confirmed (nacked, or in flight at a crash), or taken away by a removal a power cut
    /// may have undone: at most once.
    May,
    /// Taken away (ack, purge, cancel, deletion, expiry without a dead-letter exchange) and not
    /// known committed: never seen while the broker runs; at most once after a power cut.
    Removed,
    /// Taken away for good: never seen again.
    Gone,
}

/// What a message's deadline does to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OnExpiry {
    /// Dead-lettered into this queue, its only target.
    DeadLetter(String),
    /// Dead-lettered at least once by `q3`: into `dead3`, or kept by `q3` until it takes it.
    AtLeastOnce,
    /// Dropped: no dead-letter exchange.
    Drop,
}

/// The death a dead-lettered message must carry (its `x-death`, one entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Death {
    pub reason: &'static str,
    pub queue: String,
    pub exchange: String,
    pub routing_key: String,
    /// The `expiration` it was published with (moved to `original-expiration`).
    pub original_expiration: Option<String>,
}

/// The redelivered flag a message must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Never delivered: not redelivered.
    Never,
    /// Delivered before: redelivered. `committed`: the mark survives a power cut.
    Delivered { committed: bool },
    /// Either (a power cut may have lost the mark); the next look settles it.
    Unknown,
}

/// What a publish puts where.
pub struct Publish {
    pub place: Place,
    /// (exchange, routing key) it was published with.
    pub exchange: String,
    pub routing_key: String,
    pub expiration: Option<u64>,
    /// When a delayed exchange releases it.
    pub due: Option<u64>,
    pub now: u64,
    /// Its body's length beyond its id (see `body.rs`).
    pub filler: usize,
}

/// One message's expectations.
pub struct Msg {
    pub presence: Presence,
    pub places: Vec<Place>,
    /// Places an uncommitted move took it from: after a power cut it may be back there.
    pub fallback: Vec<Place>,
    /// When it expires (ms since 1970) in the queue it was published to, and what that does
    /// (kept after its expiry: a power cut may bring it back there, overdue).
    pub expiry: Option<(u64, OnExpiry)>,
    /// Its `expiration` property as published.
    pub expiration: Option<String>,
    pub due: Option<u64>,
    /// Due times an operator's move took it from, since the last known commit: after a
    /// power cut it may be held until any of them.
    pub moved_from: Vec<u64>,
    /// After a power cut, until a look settles it: the due times it may be held until
    /// besides `due`.
    pub restored_dues: Vec<u64>,
    pub delivery: Delivery,
    /// Set once dead-lettered: the copy in a dead-letter queue carries one of these (more
    /// than one when a power cut left it uncertain which death came first).
    pub deaths: Vec<Death>,
    pub exchange: String,
    pub routing_key: String,
    /// Its body's length beyond its id.
    pub filler: usize,
    /// Its position in each queue it was seen or put in (firm: known committed).
    pub positions: BTreeMap<String, (u64, bool)>,
    /// What happened to it, for a report.
    pub history: Vec<String>,
}

impl Msg {
    /// Its TTL queue, when it has a deadline there.
    pub fn ttl_queue(&self) -> Option<&str> {
        self.expiry.as_ref().map(|_| self.home_queue())
    }

    /// The queue it was published to (directly, or through the delayed exchange).
    pub fn home_queue(&self) -> &str {
        if self.exchange.is_empty() {
            &self.routing_key
        } else {
            self.routing_key.split('.').next().unwrap_or("")
        }
    }
}

#[derive(Default)]
pub struct Model {
    pub msgs: BTreeMap<u64, Msg>,
    /// The next position in each queue.
    next_position: BTreeMap<String, u64>,
    /// Returns to a quorum queue (a nack with requeue), by message: (committed, not yet known
    /// committed). Its `x-acquired-count` never falls below the committed ones.
    returns: BTreeMap<u64, (u64, u64)>,
    /// Overdue messages left in a paging queue are tolerated (a known defect, skipped by
    /// environment; see `mod.rs`).
    pub skip_paged_expiry: bool,
}

impl Model {
    fn msg(&mut self, id: u64) -> Option<&mut Msg> {
        self.msgs.get_mut(&id)
    }

    fn note(&mut self, id: u64, what: String) {
        if let Some(m) = self.msg(id) {
            m.history.push(what);
        }
    }

    /// The next position at `queue`'s tail. Positions are spaced so that a message the
    /// model learns of only by seeing it (a dead-letter, a release after a restart) can be
    /// given one between its neighbours.
    fn position(&mut self, queue: &str) -> u64 {
        let next = self.next_position.entry(queue.to_string()).or_insert(0);
        *next += POSITION_STEP;
        *next
    }

    /// `id` was published (not yet confirmed): where it goes, its deadline there.
    pub fn published(&mut self, id: u64, p: Publish) {
        let mut positions = BTreeMap::new();
        let mut expiry = None;
        if let Place::Queue(queue) = &p.place {
            positions.insert(queue.clone(), (self.position(queue), true));
            let spec = spec(queue);
            let ttl = match (spec.ttl_ms, p.expiration) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            expiry = ttl.map(|ttl| (p.now + ttl, spec.on_expiry.clone()));
        }
        let history = vec![format!(
            "published at {} to {} (exchange '{}', key {}, expiration {:?}, due {:?}, expires {:?})",
            p.now,
            p.place,
            p.exchange,
            p.routing_key,
            p.expiration,
            p.due,
            expiry.as_ref().map(|e| e.0)
        )];
        let msg = Msg {
            presence: Presence::May,
            places: vec![p.place],
            fallback: Vec::new(),
            expiry,
            expiration: p.expiration.map(|e| e.to_string()),
            due: p.due,
            moved_from: Vec::new(),
            restored_dues: Vec::new(),
            delivery: Delivery::Never,
            deaths: Vec::new(),
            exchange: p.exchange,
            routing_key: p.routing_key,
            filler: p.filler,
            positions,
            history,
        };
        self.msgs.insert(id, msg);
    }

    /// The broker confirmed `id`.
    pub fn confirmed(&mut self, id: u64) {
        if let Some(m) = self.msg(id) {
            if m.presence == Presence::May {
                m.presence = Presence::Must;
            }
            m.history.push("confirmed".into());
        }
    }

    pub fn nacked(&mut self, id: u64) {
        self.note(id, "nacked".into());
    }

    /// `id` was delivered (a `basic.get` with manual ack).
    pub fn delivered(&mut self, id: u64, queue: &str) {
        if let Some(m) = self.msg(id) {
            m.delivery = Delivery::Delivered { committed: false };
            m.history.push(format!("got from {queue}"));
        }
    }

    /// `id` was taken away by the broker (ack, purge, cancel, deletion).
    pub fn removed(&mut self, id: u64, how: &str) {
        if let Some(m) = self.msg(id) {
            if m.presence != Presence::Gone {
                m.presence = Presence::Removed;
            }
            m.history.push(how.to_string());
        }
    }

    /// `id` went back to its place (a nack with requeue), redelivered; in a quorum queue its
    /// `x-acquired-count` counts it.
    pub fn requeued(&mut self, id: u64, quorum: bool) {
        self.note(id, "requeued".into());
        if quorum {
            self.returns.entry(id).or_default().1 += 1;
        }
    }

    /// Returns of `id` known to be committed.
    pub fn returns_committed(&self, id: u64) -> u64 {
        self.returns.get(&id).map_or(0, |r| r.0)
    }

    pub(super) fn next_position_mut(&mut self, queue: &str) -> &mut u64 {
        self.next_position.entry(queue.to_string()).or_insert(0)
    }

    /// `id` left `from` dead-lettered for `reason` (a reject), into one of `to`.
    pub fn dead_lettered(&mut self, id: u64, from: &str, to: Vec<Place>, reason: &'static str) {
        let mut assigned = Vec::new();
        if let [Place::Queue(target)] = to.as_slice() {
            assigned.push((target.clone(), self.position(target)));
        }
        let Some(m) = self.msg(id) else { return };
        let death = Death {
            reason,
            queue: from.to_string(),
            exchange: m.exchange.clone(),
            routing_key: m.routing_key.clone(),
            original_expiration: m.expiration.clone(),
        };
        m.history
            .push(format!("dead-lettered ({reason}) into {to:?}"));
        m.fallback.push(Place::Queue(from.to_string()));
        m.places = to;
        m.deaths = vec![death];
        m.delivery = Delivery::Never;
        for (queue, position) in assigned {
            m.positions.insert(queue, (position, false));
        }
    }

    /// The clock reached `now` (every deadline up to it served): held messages due are
    /// released, expired ones dead-lettered or dropped. Returns the ids expired.
    pub fn advance(&mut self, now: u64) -> Vec<u64> {
        let mut released: Vec<(u64, u64)> = Vec::new();
        let mut expired = Vec::new();
        let skip = self.skip_paged_expiry;
        for (&id, m) in self.msgs.iter_mut() {
            if m.presence == Presence::Gone {
                continue;
            }
            if let (Some(due), [Place::Held(_)]) = (m.due, m.places.as_slice()) {
                if due <= now {
                    released.push((due, id));
                }
            }
            if evolve(m, now, skip, "advance") {
                expired.push(id);
            }
        }
        // Released in due order, ties in the order they were held (publish order): each
        // joins its queue's tail.
        released.sort_unstable();
        for (_, id) in released {
            let Some(Place::Queue(queue)) = self.msgs[&id].places.first().cloned() else {
                continue;
            };
            let position = self.position(&queue);
            if let Some(m) = self.msg(id) {
                m.positions.insert(queue, (position, false));
            }
        }
        expired
    }

    /// Everything submitted so far is committed (a later confirm came back, or a clean
    /// shutdown committed it).
    pub fn committed(&mut self) {
        for (committed, pending) in self.returns.values_mut() {
            *committed += std::mem::take(pending);
        }
        for m in self.msgs.values_mut() {
            if m.presence == Presence::Removed {
                m.presence = Presence::Gone;
            }
            m.fallback.clear();
            m.moved_from.clear();
            if let Delivery::Delivered { .. } = m.delivery {
                m.delivery = Delivery::Delivered { committed: true };
            }
            for (_, firm) in m.positions.values_mut() {
                *firm = true;
            }
        }
    }

    /// The broker restarts at `now` on what its store holds: what was not known committed
    /// may be either way.
    pub fn restarted(&mut self, now: u64) {
        let skip = self.skip_paged_expiry;
        // A return not known to be committed may have been lost with the crash.
        for (_, pending) in self.returns.values_mut() {
            *pending = 0;
        }
        for m in self.msgs.values_mut() {
            if m.presence == Presence::Gone {
                continue;
            }
            if m.presence == Presence::Removed {
                m.presence = Presence::May;
            }
            let uncertain = !m.fallback.is_empty();
            for due in std::mem::take(&mut m.moved_from) {
                push_new(&mut m.restored_dues, due);
            }
            let earliest_due = m.restored_dues.iter().copied().chain(m.due).min();
            for place in std::mem::take(&mut m.fallback) {
                if !m.places.contains(&place) {
                    m.places.push(place);
                }
            }
            if uncertain || m.delivery == (Delivery::Delivered { committed: false }) {
                m.delivery = Delivery::Unknown;
            }
            m.positions.retain(|_, (_, firm)| *firm);
            // What fell due meanwhile: the restart expires it again; a release lost with
            // the power cut is held again until the next advance.
            let held_again: Vec<Place> = m
                .places
                .iter()
                .filter_map(|p| match p {
                    Place::Held(q) if earliest_due.is_some_and(|due| due <= now) => {
                        Some(Place::Queue(q.clone()))
                    }
                    _ => None,
                })
                .collect();
            for place in held_again {
                if !m.places.contains(&place) {
                    m.places.push(place);
                }
            }
            let keep_held: Vec<Place> = m
                .places
                .iter()
                .filter(|p| matches!(p, Place::Held(_)))
                .cloned()
                .collect();
            evolve(m, now, skip, "restart");
            for place in keep_held {
                if !m.places.contains(&place) {
                    m.places.push(place);
                }
            }
            m.history
                .push(format!("restart at {now}: may be in {:?}", m.places));
        }
    }

    /// An operator moved held message `id` to be due at `due`.
    pub fn moved(&mut self, id: u64, due: u64) {
        if let Some(m) = self.msg(id) {
            if let Some(old) = m.due.filter(|&old| old != due) {
                push_new(&mut m.moved_from, old);
            }
            m.due = Some(due);
            m.history.push(format!("moved to be due at {due}"));
        }
    }

    /// Transient messages in classic queues are gone with a restart, wherever they were.
    pub fn lost_with_restart(&mut self, ids: impl IntoIterator<Item = u64>) {
        for id in ids {
            if let Some(m) = self.msg(id) {
                m.presence = Presence::Gone;
                m.history.push("transient: gone with the restart".into());
            }
        }
    }

    /// Confirmed messages not removed.
    pub fn confirmed_count(&self) -> usize {
        self.msgs
            .values()
            .filter(|m| m.presence == Presence::Must)
            .count()
    }

    /// The history of `id`, one event a line.
    pub fn history(&self, id: u64) -> String {
        match self.msgs.get(&id) {
            Some(m) => format!(
                "message {id} ({:?}, places {:?}, delivery {:?}):\n      {}",
                m.presence,
                m.places,
                m.delivery,
                m.history.join("\n      ")
            ),
            None => format!("message {id}: never published"),
        }
    }
}

/// Moves `m` through the deadlines up to `now`: a held message due is released into its
/// queue, one past its deadline in its TTL queue leaves it (dead-lettered or dropped; in a
/// paging queue, with the known defect skipped, it may also still be there). Returns whether
/// it expired.
pub(super) fn evolve(m: &mut Msg, now: u64, skip_paged_expiry: bool, when: &str) -> bool {
    let before = m.places.clone();
    let mut places = Vec::new();
    let mut expired = false;
    // Dropped for sure, or (tolerated in a paging queue) perhaps.
    let (mut dropped, mut maybe_dropped) = (false, false);
    for place in std::mem::take(&mut m.places) {
        let mut place = place;
        if let Place::Held(queue) = &place {
            if m.due.is_some_and(|due| due <= now) {
                push_new(&mut m.fallback, place.clone());
                place = Place::Queue(queue.clone());
            }
        }
        let overdue = match (&place, &m.expiry, m.ttl_queue()) {
            (Place::Queue(q), Some((deadline, _)), Some(ttl_queue)) => {
                q == ttl_queue && *deadline <= now
            }
            _ => false,
        };
        if !overdue {
            push_new(&mut places, place);
            continue;
        }
        expired = true;
        let source = queue_of(&place).to_string();
        let tolerated = skip_paged_expiry && PAGING.contains(&source.as_str());
        if tolerated {
            push_new(&mut places, place.clone());
        }
        push_new(&mut m.fallback, place.clone());
        match m.expiry.as_ref().map(|e| e.1.clone()) {
            Some(OnExpiry::DeadLetter(target)) => push_new(&mut places, Place::Queue(target)),
            Some(OnExpiry::AtLeastOnce) => {
                push_new(&mut places, Place::Kept(source.clone()));
                push_new(&mut places, Place::Queue("dead3".into()));
            }
            Some(OnExpiry::Drop) | None if tolerated => maybe_dropped = true,
            Some(OnExpiry::Drop) | None => dropped = true,
        }
        let death = Death {
            reason: "expired",
            queue: source,
            exchange: m.exchange.clone(),
            routing_key: m.routing_key.clone(),
            original_expiration: m.expiration.clone(),
        };
        push_new(&mut m.deaths, death);
    }
    let changed = places != before || dropped;
    if expired && changed {
        let deadline = m.expiry.as_ref().map_or(0, |e| e.0);
        m.history.push(format!(
            "expired (deadline {deadline}) by the {when} to {now}: now in {places:?}"
        ));
        let still_in_source = places.iter().any(|p| m.ttl_queue() == Some(queue_of(p)));
        // Perhaps dead-lettered before already (a power cut left its source as a fallback),
        // and delivered there since.
        let dead_lettered_before = before
            .iter()
            .any(|p| !matches!(p, Place::Held(_)) && m.ttl_queue() != Some(queue_of(p)));
        // Tolerated in its paging queue: delivered before there perhaps, or a fresh copy
        // in the dead-letter queue.
        m.delivery = if still_in_source || dead_lettered_before {
            Delivery::Unknown
        } else {
            Delivery::Never
        };
    }
    if dropped && places.is_empty() {
        // Where it was, should a power cut bring it back.
        places = m.fallback.clone();
        if m.presence != Presence::Gone {
            m.presence = Presence::Removed;
        }
    } else if (dropped || maybe_dropped) && m.presence == Presence::Must {
        m.presence = Presence::May;
    }
    m.places = places;
    expired && changed
}

fn push_new<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// The queue a place is in or for.
pub fn queue_of(place: &Place) -> &str {
    match place {
        Place::Queue(q) | Place::Held(q) | Place::Kept(q) => q,
    }
}
