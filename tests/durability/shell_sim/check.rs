//! Checking one look at the broker against the model, and learning from a look that passed
//! what only a look can tell (where a message the model lost track of at a crash is, the
//! positions of messages that arrived by dead-lettering).

use std::collections::BTreeMap;

use super::look::{Look, SeenDeath, Sighting};
use super::model::{evolve, Delivery, Model, Msg, Place, Presence, POSITION_STEP};

/// One broken rule, with the messages it concerns (their histories go into the report).
#[derive(Debug)]
pub struct Violation {
    pub text: String,
    pub ids: Vec<u64>,
}

fn violation(text: String, ids: &[u64]) -> Violation {
    Violation {
        text,
        ids: ids.to_vec(),
    }
}

impl Model {
    /// Checks one look against the model. `running`: no restart since the model's last
    /// look, so that what was taken away must not be there at all.
    pub fn check(&self, look: &Look, running: bool) -> Vec<Violation> {
        let mut out = Vec::new();
        let by_id = look.by_id();
        for (&id, seen) in &by_id {
            let Some(m) = self.msgs.get(&id) else {
                let places: Vec<&Place> = seen.iter().map(|(p, _)| *p).collect();
                out.push(violation(
                    format!("message {id} was never published: {places:?}"),
                    &[],
                ));
                continue;
            };
            if seen.len() > 1 {
                let places: Vec<&Place> = seen.iter().map(|(p, _)| *p).collect();
                out.push(violation(
                    format!("message {id} is there {} times: {places:?}", seen.len()),
                    &[id],
                ));
            }
            match m.presence {
                Presence::Gone => out.push(violation(
                    format!("message {id} came back after it was gone for good"),
                    &[id],
                )),
                Presence::Removed if running => out.push(violation(
                    format!(
                        "message {id} is still there after it was taken away{}",
                        seen.first()
                            .map(|(place, _)| overdue_note(m, place, look.now))
                            .unwrap_or_default()
                    ),
                    &[id],
                )),
                _ => {}
            }
            for (place, s) in seen {
                if !m.places.contains(place) {
                    out.push(violation(
                        format!(
                            "message {id} is in {place}, expected in {:?}{}",
                            m.places,
                            overdue_note(m, place, look.now)
                        ),
                        &[id],
                    ));
                }
                match &s.body {
                    Err(e) => out.push(violation(e.clone(), &[id])),
                    Ok(filler) if *filler != m.filler => out.push(violation(
                        format!(
                            "message {id} in {place} has {filler} octets after its id, {} were published",
                            m.filler
                        ),
                        &[id],
                    )),
                    Ok(_) => {}
                }
                check_sighting(id, m, place, s, &mut out);
            }
        }
        for (&id, m) in &self.msgs {
            if m.presence == Presence::Must && !by_id.contains_key(&id) {
                out.push(violation(
                    format!(
                        "confirmed message {id} is lost (expected in one of {:?})",
                        m.places
                    ),
                    &[id],
                ));
            }
        }
        for (place, sightings) in &look.places {
            if let Place::Queue(queue) = place {
                self.check_order(queue, sightings, &mut out);
            }
        }
        out
    }

    /// A queue's messages in the order it holds them must be in the order of their
    /// positions: FIFO, a requeued message back at its original place.
    fn check_order(&self, queue: &str, sightings: &[Sighting], out: &mut Vec<Violation>) {
        let mut last: Option<(u64, u64)> = None;
        for s in sightings {
            let Some(&(position, _)) = self.msgs.get(&s.id).and_then(|m| m.positions.get(queue))
            else {
                continue;
            };
            if let Some((before, before_position)) = last {
                if before_position >= position {
                    let order: Vec<u64> = sightings.iter().map(|s| s.id).collect();
                    out.push(violation(
                        format!(
                            "queue {queue} is out of order: {before} before {} (queue: {order:?})",
                            s.id
                        ),
                        &[before, s.id],
                    ));
                }
            }
            last = Some((s.id, position));
        }
    }

    /// Learns from a look that passed the check: positions of messages seen without one
    /// (between their neighbours), and after a restart where each message is, whether it
    /// is there at all, and its redelivered flag where a power cut made it uncertain.
    pub fn adopt(&mut self, look: &Look, restarted: bool) {
        for (place, sightings) in &look.places {
            if let Place::Queue(queue) = place {
                self.place_unpositioned(queue, sightings, restarted);
            }
        }
        let by_id = look.by_id();
        let skip = self.skip_paged_expiry;
        for (id, m) in self.msgs.iter_mut() {
            let seen = by_id.get(id).and_then(|s| s.first());
            if let (Some((Place::Queue(_), s)), Delivery::Unknown) = (seen, m.delivery) {
                m.delivery = match s.redelivered {
                    Some(true) => Delivery::Delivered {
                        committed: restarted,
                    },
                    _ => Delivery::Never,
                };
            }
            if !restarted || m.presence == Presence::Gone {
                continue;
            }
            // Seen or not, a move's outcome is settled now.
            let restored_dues = std::mem::take(&mut m.restored_dues);
            match seen {
                Some((place, s)) => {
                    m.presence = Presence::Must;
                    m.places = vec![(*place).clone()];
                    if let (Place::Held(_), Some(due)) = (place, s.due) {
                        if restored_dues.contains(&due) {
                            m.due = Some(due);
                        }
                    }
                    if let Place::Kept(_) = place {
                        // Routed again on the queue's tick or a new binding, at any time.
                        m.places.push(Place::Queue("dead3".into()));
                    }
                    if let Place::Queue(queue) = place {
                        if queue.as_str() != m.home_queue() {
                            m.deaths
                                .retain(|d| s.deaths.first().is_some_and(|e| matches(d, e)));
                        }
                        // An overdue message tolerated in a paging queue may leave it any
                        // time (a held one overdue waits for the next advance).
                        evolve(m, look.now, skip, "look");
                    }
                }
                None => m.presence = Presence::Gone,
            }
        }
    }

    /// Gives each message seen in `queue` without a position there one between its
    /// neighbours' (or at the tail), so that the next looks hold it to this order.
    fn place_unpositioned(&mut self, queue: &str, sightings: &[Sighting], firm: bool) {
        let known: Vec<Option<u64>> = sightings
            .iter()
            .map(|s| {
                self.msgs
                    .get(&s.id)
                    .and_then(|m| m.positions.get(queue))
                    .map(|p| p.0)
            })
            .collect();
        let mut assigned: BTreeMap<u64, u64> = BTreeMap::new();
        let mut i = 0;
        let mut low = 0;
        while i < sightings.len() {
            if let Some(p) = known[i] {
                low = p;
                i += 1;
                continue;
            }
            let run_end = (i..sightings.len())
                .find(|&j| known[j].is_some())
                .unwrap_or(sightings.len());
            let high = match known.get(run_end).copied().flatten() {
                Some(p) => p,
                None => self.tail_after(queue, low, run_end - i),
            };
            let count = (run_end - i) as u64;
            for (k, s) in sightings[i..run_end].iter().enumerate() {
                let offset = (high - low) * (k as u64 + 1) / (count + 1);
                assigned.insert(s.id, low + offset);
            }
            i = run_end;
        }
        for (id, position) in assigned {
            if let Some(m) = self.msgs.get_mut(&id) {
                m.positions.insert(queue.to_string(), (position, firm));
            }
        }
    }
}

fn check_sighting(id: u64, m: &Msg, place: &Place, s: &Sighting, out: &mut Vec<Violation>) {
    match place {
        Place::Queue(queue) => {
            let expected = match m.delivery {
                Delivery::Never => Some(false),
                Delivery::Delivered { .. } => Some(true),
                Delivery::Unknown => None,
            };
            if let (Some(expected), Some(seen)) = (expected, s.redelivered) {
                if expected != seen {
                    out.push(violation(
                        format!(
                            "message {id} in {queue} has redelivered {seen}, expected {expected}"
                        ),
                        &[id],
                    ));
                }
            }
            let expires_at = match &m.expiry {
                Some((deadline, _)) if m.ttl_queue() == Some(queue.as_str()) => Some(*deadline),
                _ => None,
            };
            if s.expires_at != expires_at {
                out.push(violation(
                    format!(
                        "message {id} in {queue} expires at {:?}, expected {expires_at:?}",
                        s.expires_at
                    ),
                    &[id],
                ));
            }
            if let Some(wrong) = death_violation(m, queue, &s.deaths, s.expiration.as_deref()) {
                out.push(violation(
                    format!("message {id} in {queue}: {wrong}"),
                    &[id],
                ));
            }
        }
        Place::Held(_) => {
            let restored = s.due.is_some_and(|due| m.restored_dues.contains(&due));
            if s.due != m.due && !restored {
                out.push(violation(
                    format!(
                        "held message {id} is due at {:?}, expected {:?}",
                        s.due, m.due
                    ),
                    &[id],
                ));
            }
        }
        Place::Kept(_) => {}
    }
}

/// What is wrong with the `x-death` and `expiration` a message carries in `queue`: none in
/// the queue it was published to (and its own `expiration`); in a dead-letter queue exactly
/// one death, as the model expects, its `expiration` moved to `original-expiration`.
pub fn death_violation(
    m: &Msg,
    queue: &str,
    deaths: &[SeenDeath],
    expiration: Option<&str>,
) -> Option<String> {
    if queue == m.home_queue() {
        if !deaths.is_empty() {
            return Some(format!(
                "x-death {deaths:?} in the queue it was published to"
            ));
        }
        if expiration != m.expiration.as_deref() {
            return Some(format!(
                "expiration {expiration:?}, published with {:?}",
                m.expiration
            ));
        }
        return None;
    }
    if expiration.is_some() {
        return Some(format!(
            "dead-lettered with expiration {expiration:?} still set"
        ));
    }
    match deaths {
        [seen] if m.deaths.iter().any(|d| matches(d, seen)) => None,
        _ => Some(format!(
            "x-death {deaths:?}, expected one of {:?}",
            m.deaths
        )),
    }
}

fn matches(expected: &super::model::Death, seen: &SeenDeath) -> bool {
    seen.reason == expected.reason
        && seen.queue == expected.queue
        && seen.count == 1
        && seen.exchange == expected.exchange
        && seen.routing_keys == [expected.routing_key.clone()]
        && seen.original_expiration == expected.original_expiration
}

/// For a message in its TTL queue past its deadline: says so.
fn overdue_note(m: &Msg, place: &Place, now: u64) -> String {
    match (&m.expiry, place) {
        (Some((deadline, on_expiry)), Place::Queue(q))
            if m.ttl_queue() == Some(q.as_str()) && *deadline <= now =>
        {
            format!(" (its deadline {deadline} passed, now {now}: it should be {on_expiry:?})")
        }
        _ => String::new(),
    }
}

impl Model {
    /// A position after `low` with room for `count` more, beyond every position given so far
    /// in `queue` (the next one given there comes after it).
    fn tail_after(&mut self, queue: &str, low: u64, count: usize) -> u64 {
        let next = self.next_position_mut(queue);
        let high = (*next).max(low) + POSITION_STEP * (count as u64 + 1);
        *next = high;
        high
    }
}
