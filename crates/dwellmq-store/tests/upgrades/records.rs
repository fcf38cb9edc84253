//! Each fixture opens with every record it was written with, upgraded in one commit; the
//! upgraded store takes writes; opening it again changes nothing.

use dwellmq_store::{DeadlineId, Op, Payload, Snapshot, Store, DB_FILE, FORMAT_VERSION};

use crate::data;
use crate::expected::{self, Stored};
use std::collections::BTreeMap;

use crate::fixtures::{Fixture, ALL};

/// Checks every record the fixture was written with against `snapshot`.
pub fn check_every_record(snapshot: &Snapshot, fixture: Fixture) {
    let what = fixture.dir;
    assert_eq!(
        expected::sorted(snapshot.definitions().expect("definitions")),
        expected::definitions(),
        "{what}: definitions"
    );
    for q in data::QUEUES {
        let got: Vec<Stored> = snapshot
            .queue_messages(q.id, 0, 1_000)
            .expect("messages")
            .into_iter()
            .map(|m| Stored {
                seq: m.seq,
                expires_at_ms: m.expires_at_ms,
                state: m.state,
                packed: m.message.as_slice().to_vec(),
            })
            .collect();
        let expected = expected::queue(q.id, fixture.format);
        assert_eq!(got, expected, "{what}: messages of queue {}", q.name);
        let stored = snapshot.queue_stored(q.id).expect("queue_stored");
        assert_eq!(
            (stored.count, stored.bytes),
            expected::queue_totals(q.id),
            "{what}: queue_counts of {}",
            q.name
        );
        let first = expected.first().map_or(0, |m| m.seq);
        assert_eq!(stored.first_seq, first, "{what}: first of {}", q.name);
    }
    let recovery = snapshot.recovery().expect("recovery");
    for (id, next) in &recovery.next_queue_seqs {
        let last = data::MESSAGES
            .iter()
            .filter(|m| m.queue == *id && !m.forgotten)
            .map(|m| m.seq + 1)
            .max();
        assert_eq!(*next, last.unwrap_or(0), "{what}: next seq of queue {id}");
    }
    let held = expected::held();
    assert_eq!(recovery.delayed_count, held.len() as u64, "{what}");
    assert_eq!(recovery.next_delayed_seq, 11, "{what}: next delayed seq");
    check_held(snapshot, fixture);
}

fn check_held(snapshot: &Snapshot, fixture: Fixture) {
    let what = fixture.dir;
    let held = expected::held();
    let ids: Vec<DeadlineId> = held.iter().map(|h| expected::id(h)).collect();
    let mut counts = snapshot.delayed_counts().expect("counts");
    counts.sort();
    assert_eq!(counts, expected::held_counts(), "{what}: exchange counts");
    assert_eq!(snapshot.delayed_ids(None, 100).unwrap(), ids, "{what}");
    // A page from the middle, as the disk tier reads them.
    assert_eq!(
        snapshot.delayed_ids(Some(ids[2]), 3).unwrap(),
        ids[3..6],
        "{what}: a page after the third"
    );
    for (vhost, exchange) in [("/", "reminders"), ("shop", "nightly")] {
        let of: Vec<DeadlineId> = held
            .iter()
            .filter(|h| h.vhost == vhost && h.exchange == exchange)
            .map(|h| expected::id(h))
            .collect();
        let from = DeadlineId { due_ms: 0, seq: 0 };
        assert_eq!(
            snapshot.delayed_ids_of(vhost, exchange, from, 100).unwrap(),
            of,
            "{what}: ids of {exchange}"
        );
    }
    for h in &held {
        let message = snapshot
            .delayed_message(expected::id(h))
            .expect("read")
            .unwrap_or_else(|| panic!("{what}: held seq {} missing", h.seq));
        assert_eq!(
            (message.vhost.as_str(), message.exchange.as_str()),
            (h.vhost, h.exchange),
            "{what}: holder of seq {}",
            h.seq
        );
        assert!(
            message.message.as_slice() == expected::held_packed(h),
            "{what}: held message seq {} differs",
            h.seq
        );
    }
    for h in data::HELD.iter().filter(|h| h.released) {
        assert!(
            !snapshot.delayed_contains(expected::id(h)).unwrap(),
            "{what}"
        );
        assert!(snapshot.delayed_message(expected::id(h)).unwrap().is_none());
    }
}

/// Opens a copy of `fixture`, checks that it was upgraded (when older) and every record.
fn opens_with_every_record(fixture: Fixture, upgrades: bool) {
    let dir = fixture.copy();
    let store = Store::open(dir.path()).expect("the fixture opens");
    let expected_upgrade = upgrades.then_some(fixture.format);
    assert_eq!(store.upgraded_from(), expected_upgrade, "{}", fixture.dir);
    check_every_record(&store.snapshot().unwrap(), fixture);
    // Queue ids continue above the fixture's (the deleted queue's included).
    assert_eq!(store.allocate_queue_id(), 8, "{}", fixture.dir);
    store.close();
}

#[test]
fn a_format_2_store_of_the_first_layout_opens_with_every_record() {
    opens_with_every_record(ALL[0], true);
}

#[test]
fn a_format_2_store_opens_with_every_record() {
    opens_with_every_record(ALL[1], true);
}

#[test]
fn a_format_3_store_opens_with_every_record() {
    opens_with_every_record(ALL[2], true);
}

#[test]
fn a_format_4_store_without_queue_counts_opens_with_every_record() {
    opens_with_every_record(ALL[3], true);
}

#[test]
fn a_format_4_store_opens_with_every_record() {
    opens_with_every_record(ALL[4], true);
}

/// The fixture's one hold that is not in `data`: held after the upgrade.
fn new_hold() -> (DeadlineId, Payload) {
    let h = data::Held {
        seq: 11,
        due_ms: data::BASE_MS + 2 * data::HOUR_MS + 1,
        body: data::Body {
            text: "held after the upgrade",
            repeat: 1,
        },
        ..data::HELD[0]
    };
    (
        expected::id(&h),
        Payload::Message(crate::messages::held_message(&h)),
    )
}

#[test]
fn an_upgraded_store_takes_writes_and_opens_again_without_another_upgrade() {
    for fixture in ALL {
        let dir = fixture.copy();
        let store = Store::open(dir.path()).expect("opens");
        // Releases of upgraded holds (one-entry records of an upgraded index), a new hold, a
        // forget and a persist on an upgraded queue.
        let released: Vec<DeadlineId> = expected::held()
            .iter()
            .filter(|h| h.exchange == "reminders" && h.due_ms <= data::BASE_MS + data::DAY_MS)
            .map(|h| expected::id(h))
            .collect();
        assert_eq!(released.len(), 4, "{}", fixture.dir);
        let (new_id, new_message) = new_hold();
        let mut ops: Vec<Op> = released.iter().map(|&id| Op::Release { id }).collect();
        ops.push(Op::Hold {
            id: new_id,
            held_at_ms: data::BASE_MS,
            vhost: "/".into(),
            exchange: "reminders".into(),
            message: new_message,
        });
        ops.push(Op::Forget { queue: 1, seq: 0 });
        ops.push(Op::Persist {
            queue: 1,
            seq: 6,
            expires_at_ms: 0,
            delivered: false,
            message: crate::common::payload("task", b"task 6"),
        });
        store.write(ops).expect("commit");
        store.close();

        let store = Store::open(dir.path()).expect("opens again");
        assert_eq!(store.upgraded_from(), None, "{}", fixture.dir);
        let snapshot = store.snapshot().unwrap();
        let mut ids: Vec<DeadlineId> = expected::held()
            .iter()
            .map(|h| expected::id(h))
            .filter(|id| !released.contains(id))
            .collect();
        ids.push(new_id);
        ids.sort();
        assert_eq!(
            snapshot.delayed_ids(None, 100).unwrap(),
            ids,
            "{}",
            fixture.dir
        );
        let reminders = snapshot
            .delayed_counts()
            .unwrap()
            .into_iter()
            .find(|(_, x, _, _)| x == "reminders")
            .map(|(_, _, count, _)| count);
        assert_eq!(reminders, Some(4), "{}", fixture.dir);
        let tasks = snapshot.queue_stored(1).unwrap();
        let (count, bytes) = expected::queue_totals(1);
        assert_eq!(
            (tasks.first_seq, tasks.count, tasks.bytes),
            (
                1,
                count,
                bytes - "task 0".len() as u64 + "task 6".len() as u64
            ),
            "{}",
            fixture.dir
        );
        drop(snapshot);
        store.close();
    }
}

/// Each table's records (key, value), by table name.
pub type Tables = BTreeMap<String, Vec<(Vec<u8>, Vec<u8>)>>;

/// Every table of a store file and its records, read with redb alone (redb rewrites its
/// header at every open, so the file's octets are not compared).
pub fn dump(path: &std::path::Path) -> Tables {
    use redb::{ReadableDatabase, ReadableTable, TableHandle};
    let db = redb::Builder::new()
        .open_read_only(path)
        .expect("read-only open");
    let read = db.begin_read().unwrap();
    let mut tables = BTreeMap::new();
    for handle in read.list_tables().unwrap() {
        let name = handle.name().to_string();
        let def: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new(&name);
        let table = read.open_table(def).unwrap();
        let records = table
            .iter()
            .unwrap()
            .map(|e| {
                let (k, v) = e.unwrap();
                (k.value().to_vec(), v.value().to_vec())
            })
            .collect();
        tables.insert(name, records);
    }
    tables
}

#[test]
fn opening_an_upgraded_store_again_changes_no_record() {
    for fixture in ALL {
        let dir = fixture.copy();
        Store::open(dir.path()).expect("upgrades").close();
        let upgraded = dump(&dir.path().join(DB_FILE));
        assert_eq!(
            upgraded["meta"]
                .iter()
                .find(|(k, _)| k == b"format")
                .map(|(_, v)| v.clone()),
            Some(FORMAT_VERSION.to_be_bytes().to_vec()),
            "{}",
            fixture.dir
        );
        for old in [
            "held",
            "delayed",
            "delayed_index",
            "delayed_by_exchange",
            "delayed_counts",
        ] {
            assert!(
                !upgraded.contains_key(old),
                "{}: table {old} left",
                fixture.dir
            );
        }
        let store = Store::open(dir.path()).expect("opens again");
        assert_eq!(store.upgraded_from(), None);
        check_every_record(&store.snapshot().unwrap(), fixture);
        store.close();
        assert!(
            dump(&dir.path().join(DB_FILE)) == upgraded,
            "{}: the second open changed a record",
            fixture.dir
        );
    }
}
