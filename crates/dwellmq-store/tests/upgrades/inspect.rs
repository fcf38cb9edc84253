//! `inspect`: a data directory's format, what this build does with it, its integrity and
//! what it holds, read without writing a single octet.

use dwellmq_store::{inspect, Opens, PageCheck, Store, StoreError, FORMAT_VERSION};

use crate::common::Scratch;
use crate::data;
use crate::expected;
use crate::fixtures::{contents, Fixture, ALL};

fn inspected_untouched(dir: &Scratch) -> dwellmq_store::Inspection {
    let before = contents(&dir.db_file());
    let lock_before = std::fs::read(dir.path().join(dwellmq_store::LOCK_FILE)).ok();
    let inspection = inspect(dir.path()).expect("inspected");
    assert!(
        contents(&dir.db_file()) == before,
        "inspect wrote to the file"
    );
    assert_eq!(
        std::fs::read(dir.path().join(dwellmq_store::LOCK_FILE)).ok(),
        lock_before,
        "inspect wrote a lock file"
    );
    inspection
}

fn counts_match_the_fixture(inspection: &dwellmq_store::Inspection, fixture: Fixture) {
    let what = fixture.dir;
    let tally = inspection
        .tally
        .as_ref()
        .expect("a format this build reads");
    assert_eq!(
        expected::sorted(tally.definitions.clone()),
        expected::definitions(),
        "{what}"
    );
    assert_eq!(
        (tally.users_deleted, tally.permissions_cleared),
        (1, 1),
        "{what}"
    );
    for q in data::QUEUES.iter().filter(|q| !q.deleted) {
        let got = tally
            .queues
            .iter()
            .find(|t| t.id == q.id)
            .unwrap_or_else(|| panic!("{what}: queue {}", q.name));
        assert_eq!(
            got.name,
            Some((q.vhost.to_string(), q.name.to_string())),
            "{what}"
        );
        let expected = expected::queue(q.id, fixture.format);
        assert_eq!(
            (got.messages, got.bytes),
            expected::queue_totals(q.id),
            "{what}: {}",
            q.name
        );
        let delivered = expected.iter().filter(|m| m.state.redelivered).count() as u64;
        let kept = expected
            .iter()
            .filter(|m| m.state.dead_letter_reason.is_some())
            .count() as u64;
        assert_eq!(
            (got.delivered, got.kept_dead_letters),
            (delivered, kept),
            "{what}: {}",
            q.name
        );
    }
    assert_eq!(tally.queues.len(), 6, "{what}: no messages without a queue");
    let mut held: Vec<(String, String, u64, u64)> = tally
        .held
        .iter()
        .map(|h| {
            let exchange = h.exchange.clone().expect("a named exchange");
            (h.vhost.clone(), exchange, h.messages, h.bytes)
        })
        .collect();
    held.sort();
    assert_eq!(held, expected::held_counts(), "{what}");
    let first_due = tally.held.iter().filter_map(|h| h.first_due_ms).min();
    assert_eq!(first_due, Some(data::BASE_MS + data::MINUTE_MS), "{what}");
    assert_eq!(inspection.problems, Vec::<String>::new(), "{what}");
    assert_eq!(inspection.pages, PageCheck::Verified, "{what}");
    assert!(!inspection.needs_repair, "{what}");
}

#[test]
fn every_fixture_is_inspected_in_its_own_format_without_a_write() {
    for fixture in ALL {
        let dir = fixture.copy();
        let inspection = inspected_untouched(&dir);
        assert_eq!(inspection.format, fixture.format, "{}", fixture.dir);
        // Every fixture predates format 5: each takes the step that creates the stream tables.
        let expected_steps = match fixture.dir {
            "format-2-first-layout" => 5,
            "format-2" => 4,
            "format-3" => 3,
            "format-4-without-queue-counts" => 2,
            _ => 1,
        };
        match &inspection.opens {
            Opens::AsIs => assert_eq!(expected_steps, 0, "{}", fixture.dir),
            Opens::Upgrading(steps) => assert_eq!(steps.len(), expected_steps, "{steps:?}"),
            Opens::Refused => panic!("{} refused", fixture.dir),
        }
        counts_match_the_fixture(&inspection, fixture);
        // And once upgraded, the same counts in the current format.
        Store::open(dir.path()).expect("upgrades").close();
        let upgraded = inspected_untouched(&dir);
        assert_eq!(
            (upgraded.format, &upgraded.opens),
            (FORMAT_VERSION, &Opens::AsIs),
            "{}",
            fixture.dir
        );
        counts_match_the_fixture(&upgraded, fixture);
    }
}

#[test]
fn a_new_store_is_inspected_empty() {
    let dir = Scratch::new("inspect-new");
    Store::open(dir.path()).expect("created").close();
    let inspection = inspected_untouched(&dir);
    assert_eq!(
        (inspection.format, &inspection.opens, &inspection.pages),
        (FORMAT_VERSION, &Opens::AsIs, &PageCheck::Verified)
    );
    let tally = inspection.tally.expect("tally");
    assert!(tally.definitions.queues.is_empty() && tally.held.is_empty());
    assert!(inspection.problems.is_empty(), "{:?}", inspection.problems);
}

#[test]
fn a_newer_store_is_inspected_as_refused_and_one_that_needs_a_repair_says_so() {
    let dir = ALL[4].copy();
    let image = crate::opening::crash_image_with_format(&dir.db_file(), FORMAT_VERSION + 1);
    std::fs::write(dir.db_file(), &image).unwrap();
    let inspection = inspected_untouched(&dir);
    assert_eq!(inspection.format, FORMAT_VERSION + 1);
    assert_eq!(inspection.opens, Opens::Refused);
    assert!(inspection.needs_repair);
    assert!(inspection.tally.is_none());

    let dir = ALL[2].copy();
    let image = crate::opening::crash_image_with_format(&dir.db_file(), 3);
    std::fs::write(dir.db_file(), &image).unwrap();
    let inspection = inspected_untouched(&dir);
    assert!(inspection.needs_repair);
    assert!(matches!(inspection.opens, Opens::Upgrading(_)));
    counts_match_the_fixture(
        &dwellmq_store::Inspection {
            needs_repair: false,
            ..inspection
        },
        ALL[2],
    );
}

#[test]
fn a_queue_count_that_disagrees_with_its_messages_is_a_problem() {
    let dir = ALL[4].copy();
    {
        let db = redb::Database::open(dir.db_file()).unwrap();
        let tx = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&[u8], &[u8]> =
                redb::TableDefinition::new("queue_counts");
            let mut counts = tx.open_table(def).unwrap();
            let mut row = [0u8; 16];
            row[7] = 1;
            counts.insert(&1u64.to_be_bytes()[..], &row[..]).unwrap();
        }
        tx.commit().unwrap();
    }
    let inspection = inspected_untouched(&dir);
    assert!(
        inspection
            .problems
            .iter()
            .any(|p| p.contains("queue_counts of queue id 1 says 1 messages")),
        "{:?}",
        inspection.problems
    );
}

#[test]
fn a_directory_in_use_or_without_a_store_is_refused() {
    let dir = ALL[4].copy();
    let store = Store::open(dir.path()).expect("opens");
    let err = inspect(dir.path()).expect_err("in use");
    assert!(matches!(err, StoreError::Locked { .. }), "{err:?}");
    store.close();
    inspect(dir.path()).expect("free again");
    let empty = Scratch::new("inspect-nothing");
    std::fs::create_dir_all(empty.path()).unwrap();
    assert!(inspect(empty.path()).is_err());
    assert!(!empty.db_file().exists(), "nothing created");
}
