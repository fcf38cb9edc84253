//! Looking at the broker without taking anything: every queue's ready messages in order (those
//! paged out and spilled read from the store), every held message, every kept dead-letter,
//! each with what the model checks of it; and the `x-death` a message carries, read from a
//! peek or from a delivery alike.

use std::collections::BTreeMap;

use dwellmq::codec::{FieldTable, FieldValue};
use lapin::types::{AMQPValue, FieldTable as LapinTable};

use super::body::{check_body, id_of};
use super::model::Place;
use super::queues::QUEUES;
use super::{held_id, Sim, LATER};

/// One message as seen in one place.
#[derive(Debug, Clone)]
pub struct Sighting {
    pub id: u64,
    /// The body check's outcome (done at once, so that no body is kept): the length of its
    /// filler, which the model compares with the published one.
    pub body: Result<usize, String>,
    /// In a queue: its redelivered flag.
    pub redelivered: Option<bool>,
    /// In a queue: when the broker will expire it.
    pub expires_at: Option<u64>,
    /// Held: when it is due.
    pub due: Option<u64>,
    /// Its `x-death` entries, most recent first (empty without the header).
    pub deaths: Vec<SeenDeath>,
    /// Its `expiration` property.
    pub expiration: Option<String>,
}

/// One `x-death` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenDeath {
    pub reason: String,
    pub queue: String,
    pub count: i64,
    pub exchange: String,
    pub routing_keys: Vec<String>,
    pub original_expiration: Option<String>,
}

/// Everything seen in one look, by place, each place in the broker's order.
#[derive(Debug, Default)]
pub struct Look {
    pub places: BTreeMap<Place, Vec<Sighting>>,
    pub now: u64,
}

impl Look {
    /// Every place each message was seen in.
    pub fn by_id(&self) -> BTreeMap<u64, Vec<(&Place, &Sighting)>> {
        let mut out: BTreeMap<u64, Vec<(&Place, &Sighting)>> = BTreeMap::new();
        for (place, sightings) in &self.places {
            for s in sightings {
                out.entry(s.id).or_default().push((place, s));
            }
        }
        out
    }
}

impl Sim {
    /// Every message the broker holds, where it is, as the model checks it.
    pub(super) fn look(&self) -> Look {
        let broker = self.broker();
        let mut look = Look {
            now: broker.now_ms(),
            ..Look::default()
        };
        for queue in QUEUES {
            let seen = broker
                .peek_messages("/", queue, usize::MAX)
                .into_iter()
                .map(|m| {
                    let id = id_of(&m.body);
                    Sighting {
                        id,
                        body: check_body(id, &m.body),
                        redelivered: Some(m.redelivered),
                        expires_at: m.expires_at_ms,
                        due: None,
                        deaths: m
                            .properties
                            .headers
                            .as_ref()
                            .map(deaths_in_peek)
                            .unwrap_or_default(),
                        expiration: m.properties.expiration.as_ref().map(|e| e.to_string()),
                    }
                })
                .collect();
            look.places.insert(Place::Queue(queue.into()), seen);
        }
        for info in broker.delayed_messages("/", LATER, usize::MAX) {
            let (id, queue) = held_id(&info.routing_key);
            // Only its size is listed: the filler's length, checked against the model.
            let prefix = format!("{id}:").len();
            let body = info
                .body_size
                .checked_sub(prefix)
                .ok_or_else(|| format!("held message {id} has {} octets", info.body_size));
            look.places
                .entry(Place::Held(queue))
                .or_default()
                .push(Sighting {
                    id,
                    body,
                    redelivered: None,
                    expires_at: None,
                    due: Some(info.due_ms),
                    deaths: Vec::new(),
                    expiration: None,
                });
        }
        let kept = broker
            .peek_kept_dead_letters("/", "q3", usize::MAX)
            .into_iter()
            .map(|m| {
                let id = id_of(&m.body);
                Sighting {
                    id,
                    body: check_body(id, &m.body),
                    redelivered: None,
                    expires_at: None,
                    due: None,
                    deaths: Vec::new(),
                    expiration: None,
                }
            })
            .collect();
        look.places.insert(Place::Kept("q3".into()), kept);
        look
    }
}

/// The `x-death` entries of headers as the broker's peek shows them.
fn deaths_in_peek(headers: &FieldTable) -> Vec<SeenDeath> {
    let Some(FieldValue::Array(entries)) = headers.get("x-death") else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| match e {
            FieldValue::Table(t) => Some(t),
            _ => None,
        })
        .map(|t| {
            let text = |k: &str| t.get(k).and_then(|v| v.as_str()).map(str::to_string);
            let routing_keys = match t.get("routing-keys") {
                Some(FieldValue::Array(keys)) => keys
                    .iter()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect(),
                _ => Vec::new(),
            };
            SeenDeath {
                reason: text("reason").unwrap_or_default(),
                queue: text("queue").unwrap_or_default(),
                count: t.get("count").and_then(|v| v.as_integer()).unwrap_or(-1),
                exchange: text("exchange").unwrap_or_default(),
                routing_keys,
                original_expiration: text("original-expiration"),
            }
        })
        .collect()
}

/// The `x-death` entries of headers as a client receives them.
pub fn deaths_in_delivery(headers: Option<&LapinTable>) -> Vec<SeenDeath> {
    let Some(AMQPValue::FieldArray(entries)) = headers.and_then(|h| h.inner().get("x-death"))
    else {
        return Vec::new();
    };
    entries
        .as_slice()
        .iter()
        .filter_map(|e| match e {
            AMQPValue::FieldTable(t) => Some(t),
            _ => None,
        })
        .map(|t| {
            let text = |k: &str| t.inner().get(k).and_then(lapin_text);
            let routing_keys = match t.inner().get("routing-keys") {
                Some(AMQPValue::FieldArray(keys)) => {
                    keys.as_slice().iter().filter_map(lapin_text).collect()
                }
                _ => Vec::new(),
            };
            SeenDeath {
                reason: text("reason").unwrap_or_default(),
                queue: text("queue").unwrap_or_default(),
                count: t.inner().get("count").and_then(lapin_integer).unwrap_or(-1),
                exchange: text("exchange").unwrap_or_default(),
                routing_keys,
                original_expiration: text("original-expiration"),
            }
        })
        .collect()
}

fn lapin_text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

/// An integer header value of any width.
pub fn lapin_integer(v: &AMQPValue) -> Option<i64> {
    match v {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some((*n).into()),
        AMQPValue::ShortInt(n) => Some((*n).into()),
        AMQPValue::ShortShortInt(n) => Some((*n).into()),
        AMQPValue::LongUInt(n) => Some((*n).into()),
        AMQPValue::ShortUInt(n) => Some((*n).into()),
        AMQPValue::ShortShortUInt(n) => Some((*n).into()),
        _ => None,
    }
}
