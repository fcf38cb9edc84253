//! Definitions in the simulation: users, permissions, vhosts and policies changed over the HTTP
//! API, bindings over AMQP. A change the broker acknowledged (a 2xx answer, a bind-ok) is what
//! the broker must hold after any restart; a change it refused leaves that definition unknown
//! until the next restart shows which way it went.

use std::collections::BTreeMap;

use lapin::options::QueueBindOptions;
use lapin::types::FieldTable;
use serde_json::json;

use super::Sim;
use crate::http_client::{delete, get, put, GUEST};

/// What exists, by kind and name: `Some(exists)` as acknowledged, `None` unknown.
#[derive(Default)]
pub struct Definitions {
    kinds: BTreeMap<Kind, BTreeMap<String, Option<bool>>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    User,
    /// A user's permissions in `/`.
    Permission,
    Vhost,
    Policy,
    /// A binding of `q2` to `amq.topic`, by routing key.
    Binding,
}

const KINDS: [Kind; 5] = [
    Kind::User,
    Kind::Permission,
    Kind::Vhost,
    Kind::Policy,
    Kind::Binding,
];

impl Definitions {
    fn get(&self, kind: Kind, name: &str) -> Option<bool> {
        self.kinds.get(&kind)?.get(name).copied().flatten()
    }

    /// `q2` was deleted: its bindings went with it.
    pub fn unbind_all(&mut self) {
        for state in self.kinds.entry(Kind::Binding).or_default().values_mut() {
            *state = Some(false);
        }
    }

    fn set(&mut self, kind: Kind, name: &str, state: Option<bool>) {
        self.kinds
            .entry(kind)
            .or_default()
            .insert(name.to_string(), state);
    }
}

impl Sim {
    fn http(&self) -> std::net::SocketAddr {
        self.broker()
            .http_addr()
            .expect("the simulation's broker serves HTTP")
    }

    /// One change to a definition, picked by the seed: created if absent, deleted if present.
    pub(super) async fn change_definition(&mut self) -> String {
        let kind = KINDS[self.rng.below(KINDS.len() as u64) as usize];
        let name = format!("{}{}", prefix(kind), self.rng.below(4));
        // Unknown ones (a refused change) are created: PUT is idempotent, a delete may 404.
        let create = self.definitions.get(kind, &name) != Some(true);
        if kind == Kind::Permission
            && create
            && self.definitions.get(Kind::User, &name) != Some(true)
        {
            return format!("permission for {name}: no such user");
        }
        let outcome = match kind {
            Kind::Binding => self.bind_topic(&name, create).await,
            _ => self.http_change(kind, &name, create).await,
        };
        let state = match outcome {
            Ok(()) => Some(create),
            Err(_) => None,
        };
        self.definitions.set(kind, &name, state);
        if kind == Kind::User && state == Some(false) {
            // A user's permissions go with it.
            self.definitions.set(Kind::Permission, &name, Some(false));
        }
        let what = if create { "create" } else { "delete" };
        match outcome {
            Ok(()) => format!("{what} {kind:?} {name}"),
            Err(e) => format!("{what} {kind:?} {name}: refused ({e})"),
        }
    }

    async fn http_change(&mut self, kind: Kind, name: &str, create: bool) -> Result<(), String> {
        let addr = self.http();
        let path = path(kind, name);
        let reply = match (kind, create) {
            (_, true) => {
                let body = match kind {
                    Kind::User => json!({"password": "pw", "tags": ""}),
                    Kind::Permission => json!({"configure": ".*", "write": ".*", "read": ".*"}),
                    Kind::Vhost => json!({}),
                    _ => json!({
                        "pattern": "^unused-",
                        "definition": {"max-length": 10},
                        "apply-to": "queues"
                    }),
                };
                put(addr, &path, GUEST, body).await
            }
            (_, false) => delete(addr, &path, GUEST).await,
        };
        match reply.status {
            200..=299 => Ok(()),
            status => Err(format!("{status} {}", reply.text())),
        }
    }

    async fn bind_topic(&mut self, key: &str, create: bool) -> Result<(), String> {
        let ch = self.ch();
        let outcome = if create {
            ch.queue_bind(
                "q2".into(),
                "amq.topic".into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
        } else {
            ch.queue_unbind(
                "q2".into(),
                "amq.topic".into(),
                key.into(),
                FieldTable::default(),
            )
            .await
        };
        match outcome {
            Ok(()) => Ok(()),
            Err(e) => self.fail(&format!("binding q2 to amq.topic with {key} failed: {e}")),
        }
    }

    /// Checks every definition the model knows against the broker; unknown ones take what the
    /// broker holds.
    pub(super) async fn check_definitions(&mut self, when: &str) {
        let addr = self.http();
        let bound: Vec<String> = {
            let reply = get(addr, "/api/bindings/%2F/e/amq.topic/q/q2", GUEST).await;
            if reply.status != 200 {
                self.fail(&format!("listing bindings failed: {}", reply.text()));
            }
            let list = reply.json();
            list.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|b| b["routing_key"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let known: Vec<(Kind, String, Option<bool>)> = self
            .definitions
            .kinds
            .iter()
            .flat_map(|(kind, names)| names.iter().map(|(n, s)| (*kind, n.clone(), *s)))
            .collect();
        let mut violations = Vec::new();
        for (kind, name, expected) in known {
            let exists = match kind {
                Kind::Binding => bound.contains(&name),
                _ => {
                    let reply = get(addr, &path(kind, &name), GUEST).await;
                    match reply.status {
                        200 => true,
                        404 => false,
                        other => {
                            self.fail(&format!("GET {kind:?} {name}: {other} {}", reply.text()))
                        }
                    }
                }
            };
            match expected {
                Some(expected) if expected != exists => violations.push(format!(
                    "{kind:?} {name}: acknowledged as {}, the broker {}",
                    if expected { "created" } else { "deleted" },
                    if exists { "has it" } else { "does not have it" }
                )),
                Some(_) => {}
                None => self.definitions.set(kind, &name, Some(exists)),
            }
        }
        if !violations.is_empty() {
            self.fail(&format!("{when}:\n{}", violations.join("\n")));
        }
    }
}

fn prefix(kind: Kind) -> &'static str {
    match kind {
        Kind::User | Kind::Permission => "user-",
        Kind::Vhost => "vhost-",
        Kind::Policy => "policy-",
        Kind::Binding => "key-",
    }
}

fn path(kind: Kind, name: &str) -> String {
    match kind {
        Kind::User => format!("/api/users/{name}"),
        Kind::Permission => format!("/api/permissions/%2F/{name}"),
        Kind::Vhost => format!("/api/vhosts/{name}"),
        Kind::Policy => format!("/api/policies/%2F/{name}"),
        Kind::Binding => unreachable!("bindings are checked by listing"),
    }
}
