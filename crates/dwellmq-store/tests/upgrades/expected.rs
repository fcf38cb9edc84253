//! What a fixture must read back as, built from the record set the generator wrote
//! (`data.rs`), in the store's types.

use dwellmq_core::PackedMessage;
use dwellmq_store::{
    BindingDef, DeadlineId, Definitions, DeliveryState, DestinationKind, ExchangeDef,
    PermissionDef, PermissionPatterns, PolicyDef, QueueDef, UserDef, VhostDef,
};

use crate::data;
use crate::messages::{encoded, held_message, queue_message};

/// Every definition, each list sorted as [`sorted`] sorts what the store returns.
pub fn definitions() -> Definitions {
    sorted(Definitions {
        vhosts: data::VHOSTS
            .iter()
            .map(|v| VhostDef {
                name: v.name.into(),
                metadata: v.metadata.to_vec(),
            })
            .collect(),
        users: data::USERS
            .iter()
            .map(|u| UserDef {
                name: u.name.into(),
                credential: u.credential.to_vec(),
                tags: u.tags.iter().map(|t| t.to_string()).collect(),
            })
            .collect(),
        permissions: data::PERMISSIONS
            .iter()
            .map(|p| PermissionDef {
                vhost: p.vhost.into(),
                user: p.user.into(),
                patterns: p.patterns.map(|(c, w, r)| PermissionPatterns {
                    configure: c.into(),
                    write: w.into(),
                    read: r.into(),
                }),
            })
            .collect(),
        exchanges: data::EXCHANGES
            .iter()
            .map(|x| ExchangeDef {
                vhost: x.vhost.into(),
                name: x.name.into(),
                kind: x.kind.into(),
                auto_delete: x.auto_delete,
                internal: x.internal,
                arguments: encoded(x.arguments),
                // Formats before 5 had no field for it.
                declared_by: None,
            })
            .collect(),
        queues: data::QUEUES
            .iter()
            .filter(|q| !q.deleted)
            .map(|q| QueueDef {
                vhost: q.vhost.into(),
                name: q.name.into(),
                id: q.id,
                auto_delete: q.auto_delete,
                arguments: encoded(q.arguments),
            })
            .collect(),
        bindings: data::BINDINGS
            .iter()
            .map(|b| BindingDef {
                vhost: b.vhost.into(),
                source: b.source.into(),
                destination_kind: if b.to_exchange {
                    DestinationKind::Exchange
                } else {
                    DestinationKind::Queue
                },
                destination: b.destination.into(),
                routing_key: b.routing_key.into(),
                arguments: encoded(b.arguments),
            })
            .collect(),
        policies: data::POLICIES
            .iter()
            .map(|p| PolicyDef {
                vhost: p.vhost.into(),
                name: p.name.into(),
                pattern: p.pattern.into(),
                apply_to: p.apply_to.into(),
                priority: p.priority,
                definition: encoded(p.definition),
            })
            .collect(),
    })
}

/// Each list in one order (by names), so that two sets compare with `==`.
pub fn sorted(mut d: Definitions) -> Definitions {
    d.vhosts.sort_by(|a, b| a.name.cmp(&b.name));
    d.users.sort_by(|a, b| a.name.cmp(&b.name));
    d.permissions
        .sort_by(|a, b| (&a.vhost, &a.user).cmp(&(&b.vhost, &b.user)));
    d.exchanges
        .sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    d.queues
        .sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    d.bindings.sort_by(|a, b| {
        (&a.vhost, &a.source, &a.destination, &a.routing_key).cmp(&(
            &b.vhost,
            &b.source,
            &b.destination,
            &b.routing_key,
        ))
    });
    d.policies
        .sort_by(|a, b| (&a.vhost, &a.name).cmp(&(&b.vhost, &b.name)));
    d
}

/// A stored message as the test compares it: position, expiry, state, packed octets.
#[derive(Debug, PartialEq, Eq)]
pub struct Stored {
    pub seq: u64,
    pub expires_at_ms: u64,
    pub state: DeliveryState,
    pub packed: Vec<u8>,
}

/// The messages queue `id` holds in a fixture of `format`, in queue order.
pub fn queue(id: u64, format: u32) -> Vec<Stored> {
    data::MESSAGES
        .iter()
        .filter(|m| m.queue == id && !m.forgotten && !deleted(m.queue))
        .map(|m| {
            let state = m.state.unwrap_or(data::State {
                redelivered: false,
                delivery_count: 0,
                acquired_count: 0,
                ready_at_ms: 0,
                dead_letter_reason: None,
            });
            Stored {
                seq: m.seq,
                expires_at_ms: m.expires_at_ms,
                state: DeliveryState {
                    redelivered: state.redelivered || m.delivered,
                    delivery_count: state.delivery_count,
                    acquired_count: state.acquired_count,
                    ready_at_ms: state.ready_at_ms,
                    dead_letter_reason: state
                        .dead_letter_reason
                        .filter(|_| data::has_dead_letter_marks(format)),
                },
                packed: PackedMessage::pack(&queue_message(m)).as_slice().to_vec(),
            }
        })
        .collect()
}

/// (count, body octets) of queue `id`.
pub fn queue_totals(id: u64) -> (u64, u64) {
    data::MESSAGES
        .iter()
        .filter(|m| m.queue == id && !m.forgotten && !deleted(m.queue))
        .fold((0, 0), |(c, b), m| (c + 1, b + m.body.bytes().len() as u64))
}

fn deleted(id: u64) -> bool {
    data::QUEUES.iter().any(|q| q.id == id && q.deleted)
}

/// The messages still held, in (due, seq) order.
pub fn held() -> Vec<&'static data::Held> {
    let mut held: Vec<_> = data::HELD.iter().filter(|h| !h.released).collect();
    held.sort_by_key(|h| (h.due_ms, h.seq));
    held
}

pub fn id(h: &data::Held) -> DeadlineId {
    DeadlineId {
        due_ms: h.due_ms,
        seq: h.seq,
    }
}

/// A held message's packed octets as published.
pub fn held_packed(h: &data::Held) -> Vec<u8> {
    PackedMessage::pack(&held_message(h)).as_slice().to_vec()
}

/// (vhost, exchange, count, body octets) of every exchange holding messages, by name.
pub fn held_counts() -> Vec<(String, String, u64, u64)> {
    let mut counts: Vec<(String, String, u64, u64)> = Vec::new();
    for h in held() {
        let body = h.body.bytes().len() as u64;
        match counts
            .iter_mut()
            .find(|(v, x, _, _)| v == h.vhost && x == h.exchange)
        {
            Some(row) => {
                row.2 += 1;
                row.3 += body;
            }
            None => counts.push((h.vhost.into(), h.exchange.into(), 1, body)),
        }
    }
    counts.sort();
    counts
}
