//! Spilled messages: transient messages queues leave on disk under memory pressure, read back
//! in order, dropped by range, and gone after a restart.

use crate::common::{body_of, payload, Scratch};
use dwellmq_store::{Op, Store};

fn spill(spill: u64, seq: u64) -> Op {
    Op::Spill {
        spill,
        seq,
        expires_at_ms: if seq == 3 { 1_700_000_000_000 } else { 0 },
        message: payload("key", format!("s{spill}-{seq}").as_bytes()),
    }
}

#[test]
fn spilled_messages_come_back_in_order_and_leave_by_range() {
    let dir = Scratch::new("spilled-order");
    let store = Store::open(dir.path()).expect("open");
    store
        .write(
            (0..6)
                .flat_map(|seq| [spill(1, seq), spill(2, seq)])
                .collect(),
        )
        .expect("commit");
    let snap = store.snapshot().unwrap();
    let one = snap.spilled_messages(1, 2, 3).unwrap();
    assert_eq!(one.iter().map(|m| m.seq).collect::<Vec<_>>(), [2, 3, 4]);
    assert_eq!(body_of(&one[0].message), b"s1-2");
    assert_eq!(one[1].expires_at_ms, 1_700_000_000_000);
    // Spilled messages are not persisted ones: the queue's counts and messages ignore them.
    assert!(snap.queue_messages(1, 0, 10).unwrap().is_empty());
    drop(snap);
    store
        .write(vec![
            Op::Unspill {
                spill: 1,
                from_seq: 1,
                end_seq: 4,
            },
            Op::Unspill {
                spill: 2,
                from_seq: 5,
                end_seq: 6,
            },
        ])
        .expect("commit");
    let snap = store.snapshot().unwrap();
    let seqs = |spill| -> Vec<u64> {
        snap.spilled_messages(spill, 0, 10)
            .unwrap()
            .iter()
            .map(|m| m.seq)
            .collect()
    };
    assert_eq!(seqs(1), [0, 4, 5]);
    assert_eq!(seqs(2), [0, 1, 2, 3, 4]);
}

#[test]
fn a_start_drops_what_was_spilled_before_it() {
    let dir = Scratch::new("spilled-start");
    let store = Store::open(dir.path()).expect("open");
    store
        .write((0..100).map(|seq| spill(7, seq)).collect())
        .expect("commit");
    store.close();
    let store = Store::open(dir.path()).expect("reopen");
    let snap = store.snapshot().unwrap();
    assert!(snap.spilled_messages(7, 0, 10).unwrap().is_empty());
    drop(snap);
    // The table is there again for this run's spills.
    store.write(vec![spill(7, 1)]).expect("commit");
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.spilled_messages(7, 0, 10).unwrap().len(), 1);
}
