//! Every definition table round-trips through a restart; deletions cascade as documented.

use crate::common::{payload, Scratch};
use dwellmq_store::{
    BindingDef, DestinationKind, ExchangeDef, Op, PermissionDef, PermissionPatterns, PolicyDef,
    QueueDef, Store, UserDef, VhostDef,
};

fn vhost(name: &str) -> VhostDef {
    VhostDef {
        name: name.into(),
        metadata: b"description=test".to_vec(),
    }
}

fn exchange(vhost: &str, name: &str, kind: &str) -> ExchangeDef {
    ExchangeDef {
        vhost: vhost.into(),
        name: name.into(),
        kind: kind.into(),
        auto_delete: false,
        internal: true,
        // An encoded field table: the store keeps it as it is.
        arguments: b"\x00\x00\x00\x05x-del".to_vec(),
        // One with its declarer, one without (as a record written before format 5).
        declared_by: (name == "in").then(|| "guest".to_string()),
    }
}

fn queue(store: &Store, vhost: &str, name: &str) -> QueueDef {
    QueueDef {
        vhost: vhost.into(),
        name: name.into(),
        id: store.allocate_queue_id(),
        auto_delete: true,
        arguments: vec![0, 0, 0, 0],
    }
}

fn binding(vhost: &str, source: &str, kind: DestinationKind, dest: &str, key: &str) -> BindingDef {
    BindingDef {
        vhost: vhost.into(),
        source: source.into(),
        destination_kind: kind,
        destination: dest.into(),
        routing_key: key.into(),
        arguments: b"args".to_vec(),
    }
}

#[test]
fn every_definition_round_trips_through_a_restart() {
    let dir = Scratch::new("defs");
    let store = Store::open(dir.path()).expect("open");
    let q = queue(&store, "/", "orders");
    let user = UserDef {
        name: "guest".into(),
        credential: b"hash".to_vec(),
        tags: vec!["administrator".into(), "monitoring".into()],
    };
    let policy = PolicyDef {
        vhost: "/".into(),
        name: "ttl".into(),
        pattern: "^orders$".into(),
        apply_to: "queues".into(),
        priority: -3,
        definition: b"message-ttl=5000".to_vec(),
    };
    let granted = PermissionDef {
        vhost: "/".into(),
        user: "app".into(),
        patterns: Some(PermissionPatterns {
            configure: "^app\\.".into(),
            write: ".*".into(),
            read: "".into(),
        }),
    };
    let cleared = PermissionDef {
        vhost: "/".into(),
        user: "guest".into(),
        patterns: None,
    };
    let to_queue = binding("/", "in", DestinationKind::Queue, "orders", "order.*");
    let to_exchange = binding("/", "in", DestinationKind::Exchange, "fanout", "");
    let ops = vec![
        Op::PutVhost(vhost("/")),
        Op::PutUser(user.clone()),
        Op::PutExchange(exchange("/", "in", "topic")),
        Op::PutExchange(exchange("/", "fanout", "fanout")),
        Op::PutQueue(q.clone()),
        Op::PutBinding(to_queue.clone()),
        Op::PutBinding(to_exchange.clone()),
        Op::PutPolicy(policy.clone()),
        Op::PutPermission(granted.clone()),
        Op::PutPermission(cleared.clone()),
    ];
    store.write(ops).expect("commit");
    store.close();

    let store = Store::open(dir.path()).expect("reopen");
    let defs = store
        .snapshot()
        .expect("snapshot")
        .definitions()
        .expect("read");
    assert_eq!(defs.vhosts, vec![vhost("/")]);
    assert_eq!(defs.users, vec![user]);
    // By vhost, then user; a cleared permission is kept as such.
    assert_eq!(defs.permissions, vec![granted, cleared]);
    let mut exchanges = defs.exchanges.clone();
    exchanges.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(
        exchanges,
        vec![
            exchange("/", "fanout", "fanout"),
            exchange("/", "in", "topic")
        ]
    );
    assert_eq!(defs.queues, vec![q.clone()]);
    assert_eq!(defs.bindings.len(), 2);
    assert!(defs.bindings.contains(&to_queue));
    assert!(defs.bindings.contains(&to_exchange));
    assert_eq!(defs.policies, vec![policy]);
    // A queue id is never handed out twice, even across a restart.
    assert!(store.allocate_queue_id() > q.id);
}

#[test]
fn replacing_and_deleting_definitions() {
    let dir = Scratch::new("defs-delete");
    let store = Store::open(dir.path()).expect("open");
    let orders = queue(&store, "/", "orders");
    let other = queue(&store, "other", "keep");
    let b = binding("/", "in", DestinationKind::Queue, "orders", "k");
    store
        .write(vec![
            Op::PutVhost(vhost("/")),
            Op::PutVhost(vhost("other")),
            Op::PutExchange(exchange("/", "in", "direct")),
            Op::PutExchange(exchange("/", "in", "topic")), // replaces
            Op::PutQueue(orders.clone()),
            Op::PutQueue(other.clone()),
            Op::PutBinding(b.clone()),
            Op::PutUser(UserDef {
                name: "u".into(),
                credential: vec![],
                tags: vec![],
            }),
            Op::Persist {
                queue: orders.id,
                seq: 1,
                expires_at_ms: 0,
                delivered: false,
                message: payload("k", b"m"),
            },
            Op::Persist {
                queue: other.id,
                seq: 1,
                expires_at_ms: 0,
                delivered: false,
                message: payload("k", b"kept"),
            },
        ])
        .expect("commit");
    let defs = store.snapshot().unwrap().definitions().unwrap();
    assert_eq!(defs.exchanges, vec![exchange("/", "in", "topic")]);

    // Deleting the source exchange takes its bindings.
    store
        .write(vec![Op::DeleteExchange {
            vhost: "/".into(),
            name: "in".into(),
        }])
        .expect("commit");
    let defs = store.snapshot().unwrap().definitions().unwrap();
    assert!(defs.exchanges.is_empty());
    assert!(defs.bindings.is_empty());

    // Deleting a vhost takes its queues and their messages, nothing of another vhost.
    store
        .write(vec![
            Op::DeleteVhost { name: "/".into() },
            Op::DeleteUser { name: "u".into() },
        ])
        .expect("commit");
    let snapshot = store.snapshot().unwrap();
    let defs = snapshot.definitions().unwrap();
    assert_eq!(defs.vhosts, vec![vhost("other")]);
    assert_eq!(defs.queues, vec![other.clone()]);
    assert!(defs.users.is_empty());
    assert!(snapshot
        .queue_messages(orders.id, 0, 10)
        .unwrap()
        .is_empty());
    assert_eq!(snapshot.queue_messages(other.id, 0, 10).unwrap().len(), 1);
    drop(snapshot);

    // Deleting a queue takes its messages; deleting a binding or policy removes just it.
    store
        .write(vec![
            Op::DeleteQueue {
                vhost: "other".into(),
                name: "keep".into(),
                id: other.id,
            },
            Op::PutPolicy(PolicyDef {
                vhost: "other".into(),
                name: "p".into(),
                pattern: ".*".into(),
                apply_to: "all".into(),
                priority: 0,
                definition: vec![],
            }),
        ])
        .expect("commit");
    store
        .write(vec![Op::DeletePolicy {
            vhost: "other".into(),
            name: "p".into(),
        }])
        .expect("commit");
    let snapshot = store.snapshot().unwrap();
    let defs = snapshot.definitions().unwrap();
    assert!(defs.queues.is_empty() && defs.policies.is_empty());
    assert!(snapshot.queue_messages(other.id, 0, 10).unwrap().is_empty());
}

#[test]
fn names_that_prefix_each_other_stay_apart() {
    let dir = Scratch::new("defs-prefix");
    let store = Store::open(dir.path()).expect("open");
    store
        .write(vec![
            Op::PutVhost(vhost("a")),
            Op::PutVhost(vhost("ab")),
            Op::PutExchange(exchange("a", "x", "direct")),
            Op::PutExchange(exchange("ab", "x", "direct")),
            Op::PutBinding(binding("a", "x", DestinationKind::Queue, "q", "")),
            Op::PutBinding(binding("a", "xy", DestinationKind::Queue, "q", "")),
        ])
        .expect("commit");
    store
        .write(vec![
            Op::DeleteVhost { name: "ab".into() },
            Op::DeleteExchange {
                vhost: "a".into(),
                name: "x".into(),
            },
        ])
        .expect("commit");
    let defs = store.snapshot().unwrap().definitions().unwrap();
    assert_eq!(defs.vhosts, vec![vhost("a")]);
    assert!(defs.exchanges.is_empty());
    assert_eq!(
        defs.bindings,
        vec![binding("a", "xy", DestinationKind::Queue, "q", "")]
    );
}
