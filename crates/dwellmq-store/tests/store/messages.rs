//! Persistent queue messages and delayed messages: order, state, removal, counters.

use crate::common::{body_of, message, packed, payload, Scratch};
use dwellmq_core::PackedMessage;
use dwellmq_store::{DeadlineId, DeliveryState, Op, Payload, Store};

fn persist(queue: u64, seq: u64, body: &[u8]) -> Op {
    Op::Persist {
        queue,
        seq,
        expires_at_ms: 0,
        delivered: false,
        message: payload("key", body),
    }
}

#[test]
fn queue_messages_come_back_in_queue_order_with_their_state() {
    let dir = Scratch::new("messages");
    let store = Store::open(dir.path()).expect("open");
    // Written out of order, across queues whose ids sort around each other.
    let mut ops = Vec::new();
    for seq in [300u64, 2, 256, 1, 255] {
        ops.push(persist(7, seq, format!("q7-{seq}").as_bytes()));
        ops.push(persist(8, seq, format!("q8-{seq}").as_bytes()));
    }
    ops.push(Op::Persist {
        queue: 6,
        seq: u64::MAX - 1,
        expires_at_ms: 1_700_000_000_123,
        delivered: false,
        message: payload("key", b"expiring"),
    });
    store.write(ops).expect("commit");
    let retry = DeliveryState {
        redelivered: true,
        delivery_count: 2,
        acquired_count: 3,
        ready_at_ms: 1_700_000_005_000,
        dead_letter_reason: None,
    };
    store
        .write(vec![
            Op::SetState {
                queue: 7,
                seq: 256,
                state: retry,
            },
            // A state for a message that is not stored is ignored.
            Op::SetState {
                queue: 7,
                seq: 999,
                state: retry,
            },
        ])
        .expect("commit");
    store.close();

    let store = Store::open(dir.path()).expect("reopen");
    let snap = store.snapshot().unwrap();
    let seven = snap.queue_messages(7, 0, 100).unwrap();
    let seqs: Vec<u64> = seven.iter().map(|m| m.seq).collect();
    assert_eq!(seqs, [1, 2, 255, 256, 300]);
    assert_eq!(body_of(&seven[0].message), b"q7-1");
    assert_eq!(seven[3].state, retry);
    assert_eq!(seven[0].state, DeliveryState::default());
    assert_eq!(seven[0].message.routing_key().unwrap(), "key");
    assert_eq!(
        seven[0].message.properties().unwrap().delivery_mode,
        Some(2)
    );
    // Paging: from a sequence number on, at most `limit`.
    let page: Vec<u64> = snap
        .queue_messages(7, 3, 2)
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(page, [255, 256]);
    assert_eq!(snap.next_queue_seq(7).unwrap(), 301);
    assert_eq!(snap.next_queue_seq(99).unwrap(), 0);
    let six = snap.queue_messages(6, 0, 10).unwrap();
    assert_eq!(six[0].expires_at_ms, 1_700_000_000_123);
    assert_eq!(snap.next_queue_seq(6).unwrap(), u64::MAX);
    assert!(snap.queue_messages(7, 0, 0).unwrap().is_empty());
    assert!(snap.queue_messages(999, 0, 10).unwrap().is_empty());
}

#[test]
fn a_message_delivered_before_its_persist_comes_back_redelivered_with_its_expiry() {
    let dir = Scratch::new("delivered");
    let store = Store::open(dir.path()).expect("open");
    store
        .write(vec![
            Op::Persist {
                queue: 1,
                seq: 0,
                expires_at_ms: 1_700_000_000_123,
                delivered: true,
                message: payload("key", b"delivered at once"),
            },
            persist(1, 1, b"waiting"),
        ])
        .expect("commit");
    let stored = store.snapshot().unwrap().queue_messages(1, 0, 10).unwrap();
    assert!(stored[0].state.redelivered);
    assert_eq!(stored[0].expires_at_ms, 1_700_000_000_123);
    assert_eq!(body_of(&stored[0].message), b"delivered at once");
    assert_eq!(stored[1].state, DeliveryState::default());
}

#[test]
fn forget_and_purge_remove_messages_and_their_state() {
    let dir = Scratch::new("forget");
    let store = Store::open(dir.path()).expect("open");
    store
        .write((1..=5).map(|seq| persist(1, seq, b"x")).collect())
        .expect("commit");
    store
        .write(vec![Op::SetState {
            queue: 1,
            seq: 2,
            state: DeliveryState {
                redelivered: true,
                ..Default::default()
            },
        }])
        .expect("commit");
    store
        .write(vec![
            Op::Forget { queue: 1, seq: 2 },
            Op::Forget { queue: 1, seq: 4 },
        ])
        .expect("commit");
    let seqs: Vec<u64> = store
        .snapshot()
        .unwrap()
        .queue_messages(1, 0, 10)
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, [1, 3, 5]);
    // Stored again under the same number: fresh, no stale state.
    store.write(vec![persist(1, 2, b"again")]).expect("commit");
    let again = store.snapshot().unwrap().queue_messages(1, 2, 1).unwrap();
    assert_eq!(again[0].state, DeliveryState::default());

    store
        .write(vec![persist(2, 1, b"other queue"), Op::Purge { queue: 1 }])
        .expect("commit");
    let snap = store.snapshot().unwrap();
    assert!(snap.queue_messages(1, 0, 10).unwrap().is_empty());
    assert_eq!(snap.queue_messages(2, 0, 10).unwrap().len(), 1);
}

#[test]
fn a_published_message_is_stored_exactly_as_packed() {
    let dir = Scratch::new("packed");
    let store = Store::open(dir.path()).expect("open");
    let original = message("a.b", b"the body");
    store
        .write(vec![
            Op::Persist {
                queue: 1,
                seq: 1,
                expires_at_ms: 0,
                delivered: false,
                message: Payload::Message(original.clone()),
            },
            Op::Persist {
                queue: 1,
                seq: 2,
                expires_at_ms: 0,
                delivered: false,
                message: Payload::Packed(PackedMessage::pack(&original)),
            },
        ])
        .expect("commit");
    let stored = store.snapshot().unwrap().queue_messages(1, 0, 10).unwrap();
    let expected = PackedMessage::pack(&original);
    assert_eq!(stored[0].message.as_slice(), expected.as_slice());
    assert_eq!(stored[1].message.as_slice(), expected.as_slice());
    let back = stored[0].message.clone().unpack(None).expect("unpacks");
    assert_eq!(back.properties, original.properties);
}

fn hold(due_ms: u64, seq: u64, body: &[u8]) -> Op {
    Op::Hold {
        held_at_ms: 0,
        id: DeadlineId { due_ms, seq },
        vhost: "/".into(),
        exchange: "delayed".into(),
        message: packed("later", body),
    }
}

#[test]
fn delayed_index_is_in_due_then_sequence_order_and_bodies_are_read_on_demand() {
    let dir = Scratch::new("delayed");
    let store = Store::open(dir.path()).expect("open");
    store
        .write(vec![
            hold(5_000, 10, b"c"),
            hold(1_000, 11, b"a"),
            hold(5_000, 3, b"b"),
            hold(1 << 40, 4, b"far"),
        ])
        .expect("commit");
    store.close();

    let store = Store::open(dir.path()).expect("reopen");
    let snap = store.snapshot().unwrap();
    let recovery = snap.recovery().unwrap();
    assert_eq!(recovery.delayed_count, 4);
    assert_eq!(recovery.next_delayed_seq, 12);
    let ids = snap.delayed_ids(None, 100).unwrap();
    let pairs: Vec<(u64, u64)> = ids.iter().map(|id| (id.due_ms, id.seq)).collect();
    assert_eq!(pairs, [(1_000, 11), (5_000, 3), (5_000, 10), (1 << 40, 4)]);
    // Refilling in batches: strictly after the last id seen.
    let next = snap.delayed_ids(Some(ids[1]), 2).unwrap();
    assert_eq!(next, ids[2..4]);
    let held = snap.delayed_message(ids[1]).unwrap().expect("held");
    assert_eq!(
        (held.vhost.as_str(), held.exchange.as_str()),
        ("/", "delayed")
    );
    assert_eq!(body_of(&held.message), b"b");
    assert_eq!(held.message.routing_key().unwrap(), "later");
    // The same sequence number with another due time is not that message.
    let wrong = DeadlineId {
        due_ms: 4_999,
        seq: 3,
    };
    assert!(snap.delayed_message(wrong).unwrap().is_none());
    drop(snap);

    store
        .write(vec![Op::Release { id: ids[0] }, Op::Release { id: ids[3] }])
        .expect("commit");
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.delayed_count().unwrap(), 2);
    assert_eq!(snap.delayed_ids(None, 10).unwrap(), ids[1..3]);
    assert!(snap.delayed_message(ids[0]).unwrap().is_none());
    // The counter never goes back, even when the highest sequence number is released.
    assert_eq!(snap.next_delayed_seq().unwrap(), 12);
}

fn hold_for(exchange: &str, due_ms: u64, seq: u64, body: &[u8]) -> Op {
    Op::Hold {
        held_at_ms: 0,
        id: DeadlineId { due_ms, seq },
        vhost: "/".into(),
        exchange: exchange.into(),
        message: packed("later", body),
    }
}

#[test]
fn the_index_can_be_read_without_some_exchanges() {
    let dir = Scratch::new("delayed-skipping");
    let store = Store::open(dir.path()).expect("open");
    store
        .write(vec![
            hold_for("a", 1_000, 1, b"a1"),
            hold_for("kept", 2_000, 2, b"k2"),
            hold_for("a", 3_000, 3, b"a3"),
            hold_for("kept", 4_000, 4, b"k4"),
        ])
        .expect("commit");
    let pairs = |ids: Vec<DeadlineId>| ids.iter().map(|id| (id.due_ms, id.seq)).collect::<Vec<_>>();
    let skip_kept = |_: &str, exchange: &str| exchange == "kept";
    let snap = store.snapshot().unwrap();
    assert_eq!(
        pairs(snap.delayed_ids_skipping(None, 10, &skip_kept).unwrap()),
        [(1_000, 1), (3_000, 3)]
    );
    // A full page of what is left, strictly after `after`.
    let after = DeadlineId {
        due_ms: 1_000,
        seq: 1,
    };
    assert_eq!(
        pairs(
            snap.delayed_ids_skipping(Some(after), 1, &skip_kept)
                .unwrap()
        ),
        [(3_000, 3)]
    );
    drop(snap);
    // Through a view, the same.
    store
        .write(vec![
            hold_for("kept", 500, 5, b"k0"),
            hold_for("a", 600, 6, b"a0"),
        ])
        .expect("commit");
    let view = store.held_view().unwrap();
    assert_eq!(
        pairs(view.delayed_ids_skipping(None, 10, &skip_kept).unwrap()),
        [(600, 6), (1_000, 1), (3_000, 3)]
    );
    assert_eq!(view.delayed_ids(None, 10).unwrap().len(), 6);
}

#[test]
fn each_exchange_has_its_own_due_order_and_counts_kept_without_a_scan() {
    let dir = Scratch::new("delayed-by-exchange");
    let store = Store::open(dir.path()).expect("open");
    store
        .write(vec![
            hold_for("a", 9_000, 1, b"a9"),
            hold_for("b", 2_000, 2, b"b2-"),
            hold_for("a", 3_000, 3, b"a3"),
            hold_for("ab", 1_000, 4, b"ab1"),
            hold_for("a", 3_000, 5, b"a3'"),
        ])
        .expect("commit");
    let snap = store.snapshot().unwrap();
    let ids_of = |exchange: &str, from: DeadlineId, limit| {
        snap.delayed_ids_of("/", exchange, from, limit)
            .unwrap()
            .iter()
            .map(|id| (id.due_ms, id.seq))
            .collect::<Vec<_>>()
    };
    let start = DeadlineId { due_ms: 0, seq: 0 };
    // "a" is not a prefix of "ab": names are length-prefixed.
    assert_eq!(ids_of("a", start, 10), [(3_000, 3), (3_000, 5), (9_000, 1)]);
    assert_eq!(ids_of("ab", start, 10), [(1_000, 4)]);
    // From an id on, inclusive; a page at a time.
    let from = DeadlineId {
        due_ms: 3_000,
        seq: 5,
    };
    assert_eq!(ids_of("a", from, 1), [(3_000, 5)]);
    let counts = snap.delayed_counts().unwrap();
    let row = |exchange: &str| {
        counts
            .iter()
            .find(|(v, x, _, _)| v == "/" && x == exchange)
            .map(|&(_, _, count, bytes)| (count, bytes))
    };
    assert_eq!(row("a"), Some((3, 7)));
    assert_eq!(row("b"), Some((1, 3)));
    drop(snap);

    // A release takes a message out of both indexes and its exchange's counts; an exchange
    // holding nothing has no row.
    store
        .write(vec![
            Op::Release {
                id: DeadlineId {
                    due_ms: 2_000,
                    seq: 2,
                },
            },
            Op::Release {
                id: DeadlineId {
                    due_ms: 3_000,
                    seq: 3,
                },
            },
        ])
        .expect("commit");
    store.close();
    let store = Store::open(dir.path()).expect("reopen");
    let snap = store.snapshot().unwrap();
    let counts = snap.delayed_counts().unwrap();
    assert!(counts.iter().all(|(_, x, _, _)| x != "b"));
    let a = counts.iter().find(|(_, x, _, _)| x == "a").unwrap();
    assert_eq!((a.2, a.3), (2, 5));
    let ids: Vec<u64> = snap
        .delayed_ids_of("/", "a", DeadlineId { due_ms: 0, seq: 0 }, 10)
        .unwrap()
        .iter()
        .map(|id| id.seq)
        .collect();
    assert_eq!(ids, [5, 1]);
    assert_eq!(snap.delayed_count().unwrap(), 3);
}

#[test]
fn the_global_due_order_merges_every_exchange_and_a_deleted_exchange_drops_what_it_held() {
    let dir = Scratch::new("delayed-merge");
    let store = Store::open(dir.path()).expect("open");
    store
        .write(vec![
            hold_for("a", 4_000, 1, b"a4"),
            hold_for("b", 1_000, 2, b"b1"),
            hold_for("a", 2_000, 3, b"a2"),
            hold_for("c", 3_000, 4, b"c3"),
            hold_for("b", 5_000, 5, b"b5"),
        ])
        .expect("commit");
    let pairs = |ids: Vec<DeadlineId>| ids.iter().map(|id| id.seq).collect::<Vec<_>>();
    let snap = store.snapshot().unwrap();
    assert_eq!(pairs(snap.delayed_ids(None, 10).unwrap()), [2, 3, 4, 1, 5]);
    // A page strictly after an id, across exchanges.
    let after = DeadlineId {
        due_ms: 2_000,
        seq: 3,
    };
    assert_eq!(pairs(snap.delayed_ids(Some(after), 2).unwrap()), [4, 1]);
    let held = snap
        .delayed_message(DeadlineId {
            due_ms: 3_000,
            seq: 4,
        })
        .unwrap()
        .expect("held");
    assert_eq!(held.exchange, "c");
    drop(snap);

    // Deleting an exchange drops its messages; one recreated under the same name does not
    // see them again.
    store
        .write(vec![Op::DeleteExchange {
            vhost: "/".into(),
            name: "a".into(),
        }])
        .expect("commit");
    store
        .write(vec![hold_for("a", 9_000, 6, b"new")])
        .expect("commit");
    let snap = store.snapshot().unwrap();
    assert_eq!(pairs(snap.delayed_ids(None, 10).unwrap()), [2, 4, 5, 6]);
    let start = DeadlineId { due_ms: 0, seq: 0 };
    assert_eq!(
        pairs(snap.delayed_ids_of("/", "a", start, 10).unwrap()),
        [6]
    );
    assert_eq!(snap.delayed_count().unwrap(), 4);
    let a = snap
        .delayed_counts()
        .unwrap()
        .into_iter()
        .find(|(_, x, _, _)| x == "a")
        .expect("a holds one");
    assert_eq!((a.2, a.3), (1, 3));
    drop(snap);

    // Deleting the vhost drops every exchange's messages.
    store
        .write(vec![Op::DeleteVhost { name: "/".into() }])
        .expect("commit");
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.delayed_count().unwrap(), 0);
    assert!(snap.delayed_counts().unwrap().is_empty());
    assert!(snap.delayed_ids(None, 10).unwrap().is_empty());
}

#[test]
fn forgets_in_runs_remove_exactly_their_messages_and_states() {
    let dir = Scratch::new("forget-runs");
    let store = Store::open(dir.path()).expect("open");
    let mut ops = Vec::new();
    for queue in [4u64, 5, 6] {
        for seq in 1..=12u64 {
            ops.push(persist(queue, seq, format!("q{queue}-{seq}").as_bytes()));
        }
    }
    ops.push(persist(6, u64::MAX - 1, b"last-but-one"));
    ops.push(persist(6, u64::MAX, b"last"));
    store.write(ops).expect("commit");
    let redelivered = DeliveryState {
        redelivered: true,
        ..DeliveryState::default()
    };
    let states = [(4, 3), (4, 9), (5, 6)].map(|(queue, seq)| Op::SetState {
        queue,
        seq,
        state: redelivered,
    });
    store.write(states.to_vec()).expect("commit");

    // Runs (4: 2-5, 7-8; 5: 6; 6: the last two), out of order and across queues, in one
    // batch: neighbours of each run, and the state of a message kept, must stay.
    let forget = |queue, seqs: &[u64]| -> Vec<Op> {
        seqs.iter().map(|&seq| Op::Forget { queue, seq }).collect()
    };
    let mut ops = forget(4, &[5, 2, 8, 3, 7, 4]);
    ops.extend(forget(6, &[u64::MAX, u64::MAX - 1]));
    ops.extend(forget(5, &[6]));
    store.write(ops).expect("commit");
    store.close();

    let store = Store::open(dir.path()).expect("reopen");
    let snap = store.snapshot().unwrap();
    let seqs = |queue| -> Vec<u64> {
        let messages = snap.queue_messages(queue, 0, 100).unwrap();
        messages.iter().map(|m| m.seq).collect()
    };
    assert_eq!(seqs(4), [1, 6, 9, 10, 11, 12]);
    assert_eq!(seqs(5), [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]);
    assert_eq!(seqs(6), (1..=12).collect::<Vec<_>>());
    let four = snap.queue_messages(4, 9, 1).unwrap();
    assert_eq!(four[0].state, redelivered, "a kept message keeps its state");
    // A forgotten message's state went with it: persisting the same key anew (which the
    // broker never does, but the store must not resurrect a stale state) reads clean.
    drop(snap);
    store.write(vec![persist(4, 3, b"again")]).expect("commit");
    let snap = store.snapshot().unwrap();
    let again = snap.queue_messages(4, 3, 1).unwrap();
    assert_eq!(
        (again[0].seq, again[0].state),
        (3, DeliveryState::default())
    );
}

/// A packed layout by hand: exchange length field (with `history`, the top bit), exchange,
/// routing key, no properties beyond the flags word, body.
fn layout_of(exchange: &str, history: bool, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let field = exchange.len() as u16
        | if history {
            PackedMessage::HISTORY_FLAG
        } else {
            0
        };
    out.extend_from_slice(&field.to_be_bytes());
    out.extend_from_slice(exchange.as_bytes());
    out.extend_from_slice(&3u16.to_be_bytes());
    out.extend_from_slice(b"key");
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(body);
    out
}

/// The store leaves out a held message's exchange name when it is the holding exchange's own
/// and puts it back on reading: every message comes back octet for octet, the dead-letter
/// history flag included, whether its exchange is the holder's or another (an exchange bound
/// to the holder, or a dead-letter exchange's name), and after a reopen.
#[test]
fn a_held_message_comes_back_as_packed_whether_or_not_its_exchange_name_was_left_out() {
    let dir = Scratch::new("held-exchange");
    let store = Store::open(dir.path()).expect("open");
    let cases = [
        ("delays", false),
        ("delays", true),
        ("upstream", false),
        ("upstream", true),
        ("delays-longer", false),
    ];
    let ops: Vec<Op> = cases
        .iter()
        .enumerate()
        .map(|(seq, (exchange, history))| {
            let bytes = layout_of(exchange, *history, b"body");
            let message = PackedMessage::from_boxed(bytes.into()).expect("a whole layout");
            Op::Hold {
                id: DeadlineId {
                    due_ms: 10_000,
                    seq: seq as u64,
                },
                held_at_ms: 0,
                vhost: "/".into(),
                exchange: "delays".into(),
                message: Payload::Packed(message),
            }
        })
        .collect();
    store.write(ops).expect("commit");
    check_held_as_packed(&store, &cases, false);
    store.close();
    let store = Store::open(dir.path()).expect("reopen");
    check_held_as_packed(&store, &cases, true);
}

fn check_held_as_packed(store: &Store, cases: &[(&str, bool)], reopened: bool) {
    {
        let snap = store.snapshot().unwrap();
        for (seq, (exchange, history)) in cases.iter().enumerate() {
            let id = DeadlineId {
                due_ms: 10_000,
                seq: seq as u64,
            };
            let held = snap.delayed_message(id).unwrap().expect("held");
            assert_eq!(held.exchange, "delays");
            assert_eq!(
                held.message.as_slice(),
                &layout_of(exchange, *history, b"body")[..],
                "{exchange} with history {history}, reopened {reopened}"
            );
        }
    }
}

/// A queue's length and body octets come from one `queue_counts` row, kept in the commit
/// that writes or removes its messages, however they are removed.
#[test]
fn queue_counts_follow_every_write_and_removal() {
    let dir = Scratch::new("queue-counts");
    let store = Store::open(dir.path()).expect("open");
    let stored = |store: &Store, queue| {
        let s = store.snapshot().unwrap().queue_stored(queue).unwrap();
        (s.first_seq, s.count, s.bytes)
    };
    let mut ops: Vec<Op> = (3..13).map(|seq| persist(1, seq, b"ten octets")).collect();
    ops.push(persist(2, 0, b"other"));
    store.write(ops).expect("commit");
    assert_eq!(stored(&store, 1), (3, 10, 100));
    assert_eq!(stored(&store, 2), (0, 1, 5));
    // Single forgets and a run of consecutive ones (removed as one range).
    store
        .write(vec![
            Op::Forget { queue: 1, seq: 3 },
            Op::Forget { queue: 1, seq: 5 },
            Op::Forget { queue: 1, seq: 6 },
            Op::Forget { queue: 1, seq: 7 },
            Op::Forget { queue: 1, seq: 99 },
        ])
        .expect("commit");
    assert_eq!(stored(&store, 1), (4, 6, 60));
    store
        .write(vec![Op::ForgetRange {
            queue: 1,
            from_seq: 8,
            end_seq: 11,
        }])
        .expect("commit");
    assert_eq!(stored(&store, 1), (4, 3, 30));
    // A persist and its forget in one batch leave no trace; a purge starts from zero.
    store
        .write(vec![
            persist(1, 20, b"x"),
            Op::Forget { queue: 1, seq: 20 },
            Op::Purge { queue: 1 },
            persist(1, 21, b"after"),
        ])
        .expect("commit");
    assert_eq!(stored(&store, 1), (21, 1, 5));
    store.close();
    let store = Store::open(dir.path()).expect("reopen");
    assert_eq!(stored(&store, 1), (21, 1, 5));
    assert_eq!(stored(&store, 2), (0, 1, 5));
    assert_eq!(stored(&store, 3), (0, 0, 0));
}
