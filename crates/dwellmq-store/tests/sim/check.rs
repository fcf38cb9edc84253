//! Checking what a restart found against the simulation's model.

use std::collections::BTreeMap;

use super::{Expect, Key, Sim, QUEUES};

impl Sim {
    /// Checks what the disk held against the model, then settles the model on it.
    pub(super) fn check(&mut self) {
        let mut on_disk = self.read_all();
        self.check_streams(&mut on_disk);
        let cut = format!("seed {} power cut {}", self.seed, self.report.power_cuts);
        for (key, expect) in self.records.clone() {
            if self.in_pair(key) {
                continue;
            }
            self.report.records_checked += 1;
            let found = on_disk.get(&key);
            match (&expect, found) {
                (Expect::Must(body), Some(stored)) => {
                    assert_eq!(stored, body, "{cut}: {key:?} came back changed")
                }
                (Expect::Must(_), None) => panic!("{cut}: acknowledged {key:?} was lost"),
                (Expect::Gone, Some(_)) => {
                    panic!("{cut}: {key:?}, acknowledged gone, came back")
                }
                (Expect::May(body), Some(stored)) => {
                    assert_eq!(stored, body, "{cut}: {key:?} came back changed");
                    self.records.insert(key, Expect::Must(body.clone()));
                }
                (Expect::May(_), None) => {
                    self.records.insert(key, Expect::Gone);
                }
                (Expect::Gone, None) => {}
            }
        }
        for pair in std::mem::take(&mut self.pairs) {
            self.report.records_checked += 2;
            let before = on_disk.get(&pair.before);
            let after = on_disk.get(&pair.after);
            let (keep, drop) = match (before, after) {
                (Some(_), None) => (pair.before, pair.after),
                (None, Some(_)) => (pair.after, pair.before),
                (Some(_), Some(_)) => panic!(
                    "{cut}: {:?} and {:?} both there: a group was split",
                    pair.before, pair.after
                ),
                (None, None) => panic!(
                    "{cut}: neither {:?} nor {:?}: a group's removal was written without its copy",
                    pair.before, pair.after
                ),
            };
            assert_eq!(
                on_disk.get(&keep),
                Some(&pair.body),
                "{cut}: {keep:?} came back changed"
            );
            self.records.insert(keep, Expect::Must(pair.body.clone()));
            self.records.insert(drop, Expect::Gone);
        }
        // Nothing is on disk that the model never wrote.
        for key in on_disk.keys() {
            assert!(
                self.records.contains_key(key),
                "{cut}: {key:?} was never written"
            );
        }
    }

    /// Every record on disk, with its body; checks the delayed counts against the index.
    fn read_all(&self) -> BTreeMap<Key, Vec<u8>> {
        let cut = format!("seed {} power cut {}", self.seed, self.report.power_cuts);
        let snapshot = self.store().snapshot().expect("a snapshot after opening");
        let mut out = BTreeMap::new();
        for queue in 1..=QUEUES {
            for stored in snapshot.queue_messages(queue, 0, usize::MAX).expect("read") {
                out.insert(Key::Message(queue, stored.seq), body_of(&stored.message));
            }
        }
        // (count, body octets) per exchange, from what the index holds.
        let mut indexed: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for id in snapshot.delayed_ids(None, usize::MAX).expect("read") {
            let held = snapshot
                .delayed_message(id)
                .expect("read")
                .unwrap_or_else(|| panic!("{cut}: indexed hold {id:?} has no message"));
            let body = body_of(&held.message);
            let counted = indexed.entry(held.exchange.clone()).or_default();
            counted.0 += 1;
            counted.1 += body.len() as u64;
            assert!(
                out.insert(Key::Held(id.seq), body).is_none(),
                "{cut}: {id:?} indexed twice"
            );
        }
        let held = out.keys().filter(|k| matches!(k, Key::Held(_))).count();
        assert_eq!(
            snapshot.delayed_count().expect("count") as usize,
            held,
            "{cut}: the delayed count agrees with the index"
        );
        let counts: BTreeMap<String, (u64, u64)> = snapshot
            .delayed_counts()
            .expect("counts")
            .into_iter()
            .map(|(_, exchange, count, bytes)| (exchange, (count, bytes)))
            .collect();
        assert_eq!(
            counts, indexed,
            "{cut}: each exchange's stored count and octets agree with its index"
        );
        out
    }
}

pub(super) fn body_of(message: &dwellmq_core::PackedMessage) -> Vec<u8> {
    let bytes = message.as_slice();
    bytes[bytes.len() - message.body_len()..].to_vec()
}
