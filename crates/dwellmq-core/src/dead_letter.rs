//! Dead-lettering: the message a queue's dead-letter exchange receives, with the `x-death`
//! history RabbitMQ writes, and the cycle rule.
//!
//! `x-death` is an array of tables, most recent first, one per (queue, reason): `count`,
//! `reason`, `queue`, `time` (the first death for that pair, in seconds), `exchange` and
//! `routing-keys` (where the message was published before that death, `CC` included), and
//! `original-expiration` when the message had a per-message TTL (the `expiration` property is
//! removed, so the message does not expire again). `x-first-death-*` are set once,
//! `x-last-death-*` every time. The history lives in [`Message::deaths`]; the headers are
//! written from it, so an `x-death` a client published is never mistaken for history.

use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::{FieldTable, FieldValue, ShortStr};

use crate::message::{Message, MessageGuard};
use crate::queue::{DeadLetterTarget, DeathReason};

/// One (queue, reason) entry of a message's dead-letter history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    /// The queue the message died in.
    pub queue: ShortStr,
    /// Why.
    pub reason: DeathReason,
    /// How many times it died there for this reason.
    pub count: u64,
    /// The first such death, seconds since the epoch.
    pub time_s: u64,
    /// The exchange it had been published to before that death.
    pub exchange: ShortStr,
    /// Its routing keys then (`CC` included, `BCC` not).
    pub routing_keys: Vec<ShortStr>,
    /// Its `expiration` property then.
    pub original_expiration: Option<ShortStr>,
}

/// A dead-lettered message, ready to be routed.
#[derive(Debug)]
pub struct DeadLettered {
    /// The message as the dead-letter exchange receives it.
    pub message: Arc<Message>,
    /// The routing keys to route it with (the dead-letter routing key, or all of the message's
    /// own keys, `CC` and `BCC` included).
    pub routing_keys: Vec<ShortStr>,
}

/// The string elements of a `CC` or `BCC` header.
fn keys_in<'a>(headers: Option<&'a FieldTable>, name: &str) -> impl Iterator<Item = ShortStr> + 'a {
    let values = match headers.and_then(|h| h.get(name)) {
        Some(FieldValue::Array(values)) => values.as_slice(),
        _ => &[],
    };
    values.iter().filter_map(|v| match v {
        FieldValue::LongStr(s) => ShortStr::from_utf8(s.clone()),
        _ => None,
    })
}

/// Builds the message that `queue`'s dead-letter exchange receives for `message`, which died
/// there at `now_ms` for `reason`. `guard` is the accounting the new message carries.
pub fn dead_letter(
    message: &Message,
    queue: &ShortStr,
    reason: DeathReason,
    target: &DeadLetterTarget,
    now_ms: u64,
    guard: Option<MessageGuard>,
) -> DeadLettered {
    let mut properties = message.properties.clone();
    let mut headers = properties.headers.take().unwrap_or_default();
    let mut own_keys = vec![message.routing_key.clone()];
    own_keys.extend(keys_in(Some(&headers), "CC"));
    let mut routing_keys = own_keys.clone();
    routing_keys.extend(keys_in(Some(&headers), "BCC"));
    routing_keys.extend(message.bcc.iter().cloned());

    let original_expiration = properties.expiration.take();
    let first_death = message.deaths.is_empty();
    let mut deaths = message.deaths.clone();
    match deaths
        .iter()
        .position(|d| d.queue == *queue && d.reason == reason)
    {
        Some(at) => {
            let mut death = deaths.remove(at);
            death.count += 1;
            deaths.insert(0, death);
        }
        None => deaths.insert(
            0,
            Death {
                queue: queue.clone(),
                reason,
                count: 1,
                time_s: now_ms / 1000,
                exchange: message.exchange.clone(),
                routing_keys: own_keys,
                original_expiration,
            },
        ),
    }

    headers.remove("BCC");
    let routing_key = match &target.routing_key {
        Some(key) => {
            headers.remove("CC");
            routing_keys = vec![key.clone()];
            key.clone()
        }
        None => message.routing_key.clone(),
    };
    write_death_headers(&mut headers, &deaths, first_death);
    properties.headers = Some(headers);
    let message = Message::dead_lettered(
        target.exchange.clone(),
        routing_key,
        properties,
        message.body.clone(),
        guard,
        deaths,
    );
    DeadLettered {
        message,
        routing_keys,
    }
}

/// Whether dead-lettering a message with this history into `queue` closes a cycle that must
/// be dropped: `queue` is in the history and no `rejected` death happened since it was there.
pub fn is_cycle(deaths: &[Death], queue: &str) -> bool {
    for death in deaths {
        if death.reason == DeathReason::Rejected {
            return false;
        }
        if death.queue.as_str() == queue {
            return true;
        }
    }
    false
}

/// Reads back the history the broker wrote into an `x-death` header, for a message that was
/// stored packed (held by a delayed exchange, or on disk) and so lost its structured
/// [`Message::deaths`]. Only call it for a message whose `x-death` the broker wrote; an entry
/// that does not parse is skipped.
pub fn history_from_headers(headers: &FieldTable) -> Vec<Death> {
    let Some(FieldValue::Array(entries)) = headers.get("x-death") else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| match entry {
            FieldValue::Table(table) => death_from_table(table),
            _ => None,
        })
        .collect()
}

fn death_from_table(table: &FieldTable) -> Option<Death> {
    let text = |field: &str| match table.get(field) {
        Some(FieldValue::LongStr(s)) => ShortStr::from_utf8(s.clone()),
        _ => None,
    };
    let count = match table.get("count")? {
        FieldValue::I64(n) => u64::try_from(*n).ok()?,
        FieldValue::I32(n) => u64::try_from(*n).ok()?,
        FieldValue::U32(n) => u64::from(*n),
        _ => return None,
    };
    let time_s = match table.get("time")? {
        FieldValue::Timestamp(t) => *t,
        _ => return None,
    };
    let routing_keys = match table.get("routing-keys") {
        Some(FieldValue::Array(keys)) => keys
            .iter()
            .filter_map(|k| match k {
                FieldValue::LongStr(s) => ShortStr::from_utf8(s.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    Some(Death {
        queue: text("queue")?,
        reason: DeathReason::from_name(text("reason")?.as_bytes())?,
        count,
        time_s,
        exchange: text("exchange")?,
        routing_keys,
        original_expiration: text("original-expiration"),
    })
}

fn long_str(s: &ShortStr) -> FieldValue {
    FieldValue::LongStr(Bytes::copy_from_slice(s.as_bytes()))
}

fn death_table(death: &Death) -> FieldValue {
    let mut table = FieldTable::new();
    table.insert("count", FieldValue::I64(death.count as i64));
    table.insert(
        "reason",
        FieldValue::LongStr(Bytes::from_static(death.reason.name().as_bytes())),
    );
    table.insert("queue", long_str(&death.queue));
    table.insert("time", FieldValue::Timestamp(death.time_s));
    table.insert("exchange", long_str(&death.exchange));
    table.insert(
        "routing-keys",
        FieldValue::Array(death.routing_keys.iter().map(long_str).collect()),
    );
    if let Some(expiration) = &death.original_expiration {
        table.insert("original-expiration", long_str(expiration));
    }
    FieldValue::Table(table)
}

fn write_death_headers(headers: &mut FieldTable, deaths: &[Death], first_death: bool) {
    headers.insert(
        "x-death",
        FieldValue::Array(deaths.iter().map(death_table).collect()),
    );
    let Some(last) = deaths.first() else {
        return;
    };
    let death_headers = [
        ("queue", long_str(&last.queue)),
        (
            "reason",
            FieldValue::LongStr(Bytes::from_static(last.reason.name().as_bytes())),
        ),
        ("exchange", long_str(&last.exchange)),
    ];
    for (field, value) in death_headers {
        // Set at the first death (replacing any a client sent), never changed after.
        if first_death {
            headers.insert(format!("x-first-death-{field}"), value.clone());
        }
        headers.insert(format!("x-last-death-{field}"), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dwellmq_codec::BasicProperties;

    fn target(routing_key: Option<&str>) -> DeadLetterTarget {
        DeadLetterTarget {
            exchange: "dlx".into(),
            routing_key: routing_key.map(ShortStr::from),
        }
    }

    fn published(headers: Option<FieldTable>, expiration: Option<&str>) -> Arc<Message> {
        Message::new(
            "orders".into(),
            "created".into(),
            BasicProperties {
                headers,
                expiration: expiration.map(ShortStr::from),
                ..Default::default()
            },
            Bytes::from_static(b"body").into(),
            None,
        )
    }

    fn summary(deaths: &[Death]) -> Vec<(String, &'static str, u64)> {
        deaths
            .iter()
            .map(|d| (d.queue.to_string(), d.reason.name(), d.count))
            .collect()
    }

    #[test]
    fn a_repeated_death_counts_up_and_moves_to_the_front() {
        let q1: ShortStr = "q1".into();
        let q2: ShortStr = "q2".into();
        let m = published(None, None);
        let d1 = dead_letter(&m, &q1, DeathReason::Rejected, &target(None), 1_000, None);
        let d2 = dead_letter(
            &d1.message,
            &q2,
            DeathReason::Expired,
            &target(None),
            2_000,
            None,
        );
        let d3 = dead_letter(
            &d2.message,
            &q1,
            DeathReason::Rejected,
            &target(None),
            9_000,
            None,
        );
        assert_eq!(
            summary(&d3.message.deaths),
            [("q1".into(), "rejected", 2), ("q2".into(), "expired", 1)]
        );
        // `time` is the first death for the pair; the exchange is where it was published then.
        assert_eq!(d3.message.deaths[0].time_s, 1);
        assert_eq!(d3.message.deaths[0].exchange.as_str(), "orders");
        assert_eq!(d3.message.deaths[1].exchange.as_str(), "dlx");
        let headers = d3.message.properties.headers.as_ref().unwrap();
        assert_eq!(
            headers.get("x-first-death-queue").and_then(|v| v.as_str()),
            Some("q1")
        );
        assert_eq!(
            headers.get("x-last-death-reason").and_then(|v| v.as_str()),
            Some("rejected")
        );
    }

    #[test]
    fn expiration_moves_into_the_death_and_bcc_never_stays() {
        let mut headers = FieldTable::new();
        headers.insert(
            "CC",
            FieldValue::Array(vec![FieldValue::LongStr(Bytes::from_static(b"cc-key"))]),
        );
        headers.insert(
            "BCC",
            FieldValue::Array(vec![FieldValue::LongStr(Bytes::from_static(b"bcc-key"))]),
        );
        let m = published(Some(headers), Some("5000"));
        let q: ShortStr = "q".into();
        let dead = dead_letter(&m, &q, DeathReason::Expired, &target(None), 0, None);
        assert_eq!(dead.message.properties.expiration, None);
        assert_eq!(
            dead.message.deaths[0].original_expiration.as_deref(),
            Some("5000")
        );
        assert_eq!(
            dead.message.deaths[0].routing_keys,
            [ShortStr::from("created"), ShortStr::from("cc-key")]
        );
        assert_eq!(dead.routing_keys.len(), 3, "CC and BCC keys route");
        let headers = dead.message.properties.headers.as_ref().unwrap();
        assert!(headers.contains_key("CC"));
        assert!(!headers.contains_key("BCC"));

        let with_key = dead_letter(&m, &q, DeathReason::Expired, &target(Some("dl")), 0, None);
        assert_eq!(with_key.routing_keys, [ShortStr::from("dl")]);
        assert_eq!(with_key.message.routing_key.as_str(), "dl");
        let headers = with_key.message.properties.headers.as_ref().unwrap();
        assert!(!headers.contains_key("CC"));
    }

    #[test]
    fn a_cycle_is_one_without_a_rejection_since_the_queue_was_last_seen() {
        let death = |queue: &str, reason| Death {
            queue: queue.into(),
            reason,
            count: 1,
            time_s: 0,
            exchange: "".into(),
            routing_keys: Vec::new(),
            original_expiration: None,
        };
        let expired_loop = [
            death("wait", DeathReason::Expired),
            death("work", DeathReason::Expired),
        ];
        assert!(is_cycle(&expired_loop, "work"));
        assert!(is_cycle(&expired_loop, "wait"));
        assert!(!is_cycle(&expired_loop, "elsewhere"));
        let retry_loop = [
            death("wait", DeathReason::Expired),
            death("work", DeathReason::Rejected),
        ];
        assert!(!is_cycle(&retry_loop, "work"));
    }
}
