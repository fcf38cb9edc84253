//! The definitions part of the SIGKILL crash test (`durability_crash.rs`): inside the kill
//! window, users and permissions are created and deleted and policies set, replaced and
//! cleared over HTTP, and a queue bound and unbound over AMQP. A ledger records each change
//! that was acknowledged (a 2xx, a bind-ok or unbind-ok) before the kill; after every restart
//! each acknowledged change is checked passively: a created user exists with its permissions,
//! a deleted one stays deleted, a set policy is in effect with its last definition, a cleared
//! one is gone, a binding is listed and routes, an unbound one neither.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http_client::{get, GUEST};

/// A durable direct exchange and queue whose binding keys the binder changes.
const BIND_EXCHANGE: &str = "crash-bind";
const BIND_QUEUE: &str = "crash-bound";
/// The permissions every created user is given in `/`.
const CONFIGURE: &str = "^u$";

/// What the client was told about one object.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Known {
    /// A user (with or without its permissions in `/`), a policy (with its `max-length`), a
    /// binding key.
    User {
        permitted: bool,
    },
    Policy {
        max_length: u64,
    },
    Bound,
    /// Deleted, cleared or unbound.
    Gone,
}

/// Every acknowledged change, over the whole run (names are unique per round).
#[derive(Default)]
pub struct DefinitionLedger {
    known: BTreeMap<String, Known>,
    /// Objects whose change was sent and not answered when the broker died: either state is
    /// right; the restart tells which, and from then on that one is known.
    in_flight: BTreeSet<String>,
    /// Changes acknowledged in this round, per task (users, policies, bindings).
    pub acked_this_round: [usize; 3],
}

impl DefinitionLedger {
    /// How many users, policies and binding keys are known (each checked after every restart).
    pub fn known(&self) -> [usize; 3] {
        let count = |prefix: &str| self.known.keys().filter(|n| n.starts_with(prefix)).count();
        [count("u-"), count("p-"), count("b-")]
    }

    /// A new round: nothing acknowledged yet.
    pub fn next_round(&mut self) {
        self.acked_this_round = [0; 3];
    }
}

/// One change to `name` that becomes `then` once acknowledged: marked in flight while sent.
async fn change<F: std::future::Future<Output = bool>>(
    ledger: &Mutex<DefinitionLedger>,
    task: usize,
    name: &str,
    then: Known,
    send: F,
) -> bool {
    ledger.lock().unwrap().in_flight.insert(name.to_string());
    if !send.await {
        return false;
    }
    let mut ledger = ledger.lock().unwrap();
    ledger.in_flight.remove(name);
    ledger.known.insert(name.to_string(), then);
    ledger.acked_this_round[task] += 1;
    true
}

/// One HTTP request as guest, tolerating a broker that dies meanwhile: whether it was
/// answered with a 2xx.
async fn acknowledged(addr: SocketAddr, method: &str, path: &str, body: Option<Value>) -> bool {
    let body = body.map(|b| b.to_string());
    // guest:guest
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\n"
    );
    if let Some(body) = &body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body.as_deref().unwrap_or(""));
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    if stream.write_all(request.as_bytes()).await.is_err() {
        return false;
    }
    let mut response = Vec::new();
    if stream.read_to_end(&mut response).await.is_err() {
        return false;
    }
    let status = String::from_utf8_lossy(&response)
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok());
    matches!(status, Some(200..=299))
}

/// Creates users `u-round-i` with permissions in `/` until the broker dies; deletes every
/// third user again, and every third user's permissions.
pub async fn user_changer(http: SocketAddr, round: u64, ledger: Arc<Mutex<DefinitionLedger>>) {
    for i in 0.. {
        let name = format!("u-{round}-{i}");
        let user = format!("/api/users/{name}");
        let permissions = format!("/api/permissions/%2F/{name}");
        let created = json!({"password": "pw", "tags": ""});
        let granted = json!({"configure": CONFIGURE, "write": ".*", "read": ".*"});
        let steps = [
            (
                "PUT",
                &user,
                Some(created),
                Known::User { permitted: false },
            ),
            (
                "PUT",
                &permissions,
                Some(granted),
                Known::User { permitted: true },
            ),
        ];
        for (method, path, body, then) in steps {
            let sent = acknowledged(http, method, path, body);
            if !change(&ledger, 0, &name, then, sent).await {
                return;
            }
        }
        let undo = match i % 3 {
            0 => Some((&user, Known::Gone)),
            1 => Some((&permissions, Known::User { permitted: false })),
            _ => None,
        };
        if let Some((path, then)) = undo {
            let sent = acknowledged(http, "DELETE", path, None);
            if !change(&ledger, 0, &name, then, sent).await {
                return;
            }
        }
    }
}

fn policy(name: &str, max_length: u64) -> Value {
    json!({
        "pattern": format!("^{name}$"),
        "apply-to": "queues",
        "definition": {"max-length": max_length},
    })
}

/// Sets policies `p-round-i` until the broker dies; clears every third again and replaces
/// every third with another definition.
pub async fn policy_changer(http: SocketAddr, round: u64, ledger: Arc<Mutex<DefinitionLedger>>) {
    for i in 0.. {
        let name = format!("p-{round}-{i}");
        let path = format!("/api/policies/%2F/{name}");
        let set = |max_length| {
            let sent = acknowledged(http, "PUT", &path, Some(policy(&name, max_length)));
            change(&ledger, 1, &name, Known::Policy { max_length }, sent)
        };
        if !set(i + 1).await {
            return;
        }
        let next = match i % 3 {
            0 => {
                let sent = acknowledged(http, "DELETE", &path, None);
                change(&ledger, 1, &name, Known::Gone, sent).await
            }
            1 => set(i + 100).await,
            _ => true,
        };
        if !next {
            return;
        }
    }
}

/// Binds `BIND_QUEUE` to `BIND_EXCHANGE` with keys `b-round-i` until the broker dies; unbinds
/// every other one again.
pub async fn binder(url: String, round: u64, ledger: Arc<Mutex<DefinitionLedger>>) {
    let Ok(connection) =
        Connection::connect(&format!("{url}/%2f"), ConnectionProperties::default()).await
    else {
        return;
    };
    let Ok(ch) = connection.create_channel().await else {
        return;
    };
    for i in 0.. {
        let key = format!("b-{round}-{i}");
        let bind = ch.queue_bind(
            BIND_QUEUE.into(),
            BIND_EXCHANGE.into(),
            key.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        );
        let sent = async { bind.await.is_ok() };
        if !change(&ledger, 2, &key, Known::Bound, sent).await {
            return;
        }
        if i % 2 == 0 {
            let unbind = ch.queue_unbind(
                BIND_QUEUE.into(),
                BIND_EXCHANGE.into(),
                key.as_str().into(),
                FieldTable::default(),
            );
            let sent = async { unbind.await.is_ok() };
            if !change(&ledger, 2, &key, Known::Gone, sent).await {
                return;
            }
        }
    }
}

/// Declares the binder's exchange and queue (durable) in the first round; after a restart
/// declares them passively (a lost one fails instead of being made again).
pub async fn declare_binding_ends(ch: &Channel, first: bool) {
    ch.exchange_declare(
        BIND_EXCHANGE.into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            durable: true,
            passive: !first,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("the binder's exchange survived");
    ch.queue_declare(
        BIND_QUEUE.into(),
        QueueDeclareOptions {
            durable: true,
            passive: !first,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("the binder's queue survived");
}

/// What the broker shows now: users, users with permissions in `/` (and the configure
/// pattern), policies (with `max-length`), binding keys.
struct Shown {
    users: BTreeSet<String>,
    permitted: BTreeMap<String, String>,
    policies: BTreeMap<String, u64>,
    bindings: BTreeSet<String>,
}

fn names(list: &Value, field: &str) -> impl Iterator<Item = (String, Value)> {
    let field = field.to_string();
    list.as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(move |item| Some((item[&field].as_str()?.to_string(), item)))
}

async fn shown(http: SocketAddr) -> Shown {
    let list = |path: &'static str| async move {
        let reply = get(http, path, GUEST).await;
        assert_eq!(reply.status, 200, "GET {path}: {}", reply.text());
        reply.json()
    };
    let bindings = format!("/api/bindings/%2F/e/{BIND_EXCHANGE}/q/{BIND_QUEUE}");
    let reply = get(http, &bindings, GUEST).await;
    assert_eq!(reply.status, 200, "GET {bindings}: {}", reply.text());
    Shown {
        users: names(&list("/api/users").await, "name")
            .map(|(n, _)| n)
            .collect(),
        permitted: names(&list("/api/permissions").await, "user")
            .filter(|(_, p)| p["vhost"] == "/")
            .map(|(u, p)| (u, p["configure"].as_str().unwrap_or("").to_string()))
            .collect(),
        policies: names(&list("/api/policies/%2F").await, "name")
            .map(|(n, p)| (n, p["definition"]["max-length"].as_u64().unwrap_or(0)))
            .collect(),
        bindings: names(&reply.json(), "routing_key")
            .map(|(k, _)| k)
            .collect(),
    }
}

/// What `shown` says of `name` (its prefix says what it is), in the ledger's terms.
fn observed(shown: &Shown, name: &str) -> Known {
    if name.starts_with("u-") {
        if !shown.users.contains(name) {
            return Known::Gone;
        }
        let permitted = shown.permitted.get(name).is_some_and(|c| c == CONFIGURE);
        return Known::User { permitted };
    }
    if name.starts_with("p-") {
        return shown
            .policies
            .get(name)
            .map_or(Known::Gone, |&max_length| Known::Policy { max_length });
    }
    if shown.bindings.contains(name) {
        Known::Bound
    } else {
        Known::Gone
    }
}

/// After a restart: every acknowledged change is there (nothing deleted came back), checked
/// passively through the API's lists; the bindings of the last round are also checked by
/// routing a message with each key. Changes in flight at the kill are learnt from what came
/// back.
pub async fn check_definitions(
    http: SocketAddr,
    url: &str,
    ledger: &Mutex<DefinitionLedger>,
    round: u64,
    seed: u64,
) {
    let connection = Connection::connect(&format!("{url}/%2f"), ConnectionProperties::default())
        .await
        .expect("connect");
    let ch = connection.create_channel().await.expect("channel");
    declare_binding_ends(&ch, false).await;
    let shown = shown(http).await;
    let keys = {
        let mut ledger = ledger.lock().unwrap();
        let ledger = &mut *ledger;
        for (name, known) in &ledger.known {
            if ledger.in_flight.contains(name) {
                continue;
            }
            let now = observed(&shown, name);
            assert_eq!(
                now, *known,
                "round {round}: {name} was acknowledged as {known:?} and is {now:?} (seed {seed})"
            );
        }
        for name in std::mem::take(&mut ledger.in_flight) {
            let now = observed(&shown, &name);
            ledger.known.insert(name, now);
        }
        let last_round = format!("b-{}-", round.saturating_sub(1));
        let keys: Vec<(String, bool)> = ledger
            .known
            .iter()
            .filter(|(name, _)| name.starts_with(&last_round))
            .map(|(name, known)| (name.clone(), *known == Known::Bound))
            .collect();
        keys
    };
    check_routing(&ch, &keys, round, seed).await;
    let _ = connection.close(200, "bye".into()).await;
}

/// Publishes one message per key (its body) and takes them back: exactly the bound keys'.
async fn check_routing(ch: &Channel, keys: &[(String, bool)], round: u64, seed: u64) {
    ch.queue_purge(BIND_QUEUE.into(), Default::default())
        .await
        .expect("purge");
    for (key, _) in keys {
        ch.basic_publish(
            BIND_EXCHANGE.into(),
            key.as_str().into(),
            BasicPublishOptions::default(),
            key.as_bytes(),
            BasicProperties::default(),
        )
        .await
        .expect("publish");
    }
    let mut routed = BTreeSet::new();
    while let Some(m) = ch
        .basic_get(BIND_QUEUE.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        routed.insert(String::from_utf8_lossy(&m.delivery.data).to_string());
    }
    let bound: BTreeSet<String> = keys
        .iter()
        .filter(|(_, bound)| *bound)
        .map(|(key, _)| key.clone())
        .collect();
    assert_eq!(
        routed, bound,
        "round {round}: the bound keys do not route as acknowledged (seed {seed})"
    );
}
