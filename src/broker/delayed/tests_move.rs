//! Moving a held message: wherever it is held (wheel, far tier, disk) to wherever its new due
//! time puts it, released once at that time with its contents, its memory and counts kept
//! right, and a durable one's old and new holds in one store submission.

use std::sync::Arc;

use dwellmq_codec::{BasicProperties, FieldTable, FieldValue};
use dwellmq_core::Message;

use super::tests_disk::{on_disk, TempStore};
use super::{DelayedId, DelayedMessages, DelayedMove, MoveDelayedError};
use crate::broker::memory::{held_footprint, MemoryMonitor};
use crate::broker::queue::Queue;
use crate::broker::vhost::VHost;

const DAY_MS: u64 = 86_400_000;

fn message(body: &str) -> Arc<Message> {
    let mut headers = FieldTable::new();
    headers.insert("x-delay", FieldValue::I64(1_000));
    headers.insert("trace", FieldValue::from(body));
    Message::new(
        "d".into(),
        "k".into(),
        BasicProperties {
            headers: Some(headers),
            ..BasicProperties::default()
        },
        bytes::Bytes::from(body.as_bytes().to_vec()).into(),
        None,
    )
}

/// The bodies of what `queue` holds, taken out.
fn bodies(vhost: &VHost, queue: &Arc<Queue>) -> Vec<String> {
    let mut out = Vec::new();
    while let Some((entry, _)) = queue.get(vhost, true) {
        out.push(String::from_utf8_lossy(&entry.message.body.chunks().concat()).to_string());
    }
    out
}

/// Serves every deadline up to `until_ms` at its time, as a manual clock does.
fn serve_until(delayed: &DelayedMessages, until_ms: u64) -> usize {
    let mut released = 0;
    while let Some(now) = delayed.next_wake().filter(|&at| at <= until_ms) {
        released += delayed.release_due(now);
        delayed.move_in(now, None);
    }
    released
}

fn only_id(delayed: &DelayedMessages) -> DelayedId {
    let listed = delayed.list("/", "d", 10);
    assert_eq!(listed.len(), 1, "one message held");
    listed[0].id
}

#[test]
fn a_transient_message_moves_between_wheel_and_far_tier_and_is_released_once_at_its_new_time() {
    let (vhost, exchange, queue) = super::tests::setup_with(false);
    let memory = MemoryMonitor::new(u64::MAX);
    let delayed = DelayedMessages::new(0, Arc::clone(&memory));
    delayed.hold(&vhost, &exchange, message("m"), 500);
    let charged = memory.used();
    assert_eq!(charged as usize, held_footprint(1));

    // Later, beyond the horizon: out of the wheel into the far tier.
    let id = only_id(&delayed);
    let later = delayed.move_held(id, None, 60_000).expect("moved");
    assert_eq!(later.due_ms, 60_000);
    assert_ne!(later, id);
    assert!(!delayed.cancel(id), "the old id is gone");
    assert_eq!(delayed.next_due("/", "d"), Some(60_000));
    assert_eq!(serve_until(&delayed, 59_999), 0);
    // Earlier again, into the wheel.
    let sooner = delayed
        .move_held(later, Some(("/", "d")), 59_000 + 300)
        .expect("moved");
    assert_eq!(only_id(&delayed), sooner);
    assert_eq!((delayed.len(), delayed.stats("/", "d")), (1, (1, 1)));
    assert_eq!(memory.used(), charged, "still charged once");

    assert_eq!(serve_until(&delayed, 59_299), 0);
    assert_eq!(serve_until(&delayed, 60_000), 1);
    assert_eq!(bodies(&vhost, &queue), ["m"]);
    let released = delayed.lateness.snapshot();
    assert_eq!((released.count, released.sum_ms), (1, 0), "on time");
    assert_eq!(serve_until(&delayed, 120_000), 0, "once");
    assert_eq!(delayed.len(), 0);
}

#[test]
fn a_moved_message_keeps_its_headers_and_body() {
    let (vhost, exchange, queue) = super::tests::setup_with(false);
    let delayed = DelayedMessages::new(0, MemoryMonitor::new(u64::MAX));
    delayed.hold(&vhost, &exchange, message("keep me"), 1_000);
    let moved = delayed
        .move_held(only_id(&delayed), None, 5_000)
        .expect("moved");
    assert_eq!(serve_until(&delayed, 5_000), 1);
    let (entry, _) = queue.get(&*vhost, true).expect("released");
    assert_eq!(entry.message.body.chunks().concat(), b"keep me");
    let headers = entry.message.properties.headers.clone().expect("headers");
    assert_eq!(headers.get("trace"), Some(&FieldValue::from("keep me")));
    // As published, negated at release: the move does not rewrite it.
    assert_eq!(headers.get("x-delay"), Some(&FieldValue::I32(-1_000)));
    assert_eq!(moved.due_ms, 5_000);
}

#[test]
fn a_durable_message_moves_between_disk_and_wheel_in_one_submission_each_time() {
    let temp = TempStore::new("move-disk");
    let (vhost, exchange, queue) = super::tests::setup_with(true);
    let memory = MemoryMonitor::new(u64::MAX);
    let delayed = on_disk(&temp, Arc::clone(&memory));
    delayed.hold(&vhost, &exchange, message("far"), DAY_MS);
    temp.store.write(Vec::new()).expect("commit");
    assert_eq!(memory.used(), 0, "held on disk only");
    let stored = |temp: &TempStore| {
        temp.store.write(Vec::new()).expect("commit");
        let snapshot = temp.store.snapshot().expect("snapshot");
        let ids = snapshot.delayed_ids(None, 10).expect("ids");
        ids.iter().map(|id| (id.due_ms, id.seq)).collect::<Vec<_>>()
    };

    // Disk to disk: two days.
    let two_days = delayed
        .move_held(only_id(&delayed), None, 2 * DAY_MS)
        .expect("moved");
    assert_eq!(stored(&temp), [(two_days.due_ms, two_days.seq)]);
    assert_eq!(memory.used(), 0, "still on disk only");
    // Disk to wheel: now.
    let now = delayed.move_held(two_days, None, 0).expect("moved");
    assert_eq!(stored(&temp), [(now.due_ms, now.seq)]);
    assert!(memory.used() > 0, "in the wheel");
    // Wheel to disk: tomorrow again.
    let tomorrow = delayed.move_held(now, None, DAY_MS).expect("moved");
    assert_eq!(stored(&temp), [(tomorrow.due_ms, tomorrow.seq)]);
    assert_eq!(memory.used(), 0, "its memory went with it");
    assert_eq!(delayed.stats("/", "d"), (1, 3));

    assert_eq!(serve_until(&delayed, DAY_MS - 1), 0);
    assert_eq!(serve_until(&delayed, 3 * DAY_MS), 1);
    assert_eq!(bodies(&vhost, &queue), ["far"]);
    assert_eq!(stored(&temp), [], "its release removed the one hold");
    assert_eq!(delayed.disk_resident(), Some((0, 0)));
}

#[test]
fn a_move_refuses_unknown_ids_other_exchanges_and_purged_messages() {
    let (vhost, exchange, _queue) = super::tests::setup_with(false);
    let delayed = DelayedMessages::new(0, MemoryMonitor::new(u64::MAX));
    delayed.hold(&vhost, &exchange, message("m"), 5_000);
    let id = only_id(&delayed);
    let unknown = DelayedId {
        due_ms: 5_000,
        seq: id.seq + 100,
    };
    let not_found = |id| Err(MoveDelayedError::NotFound(id));
    assert_eq!(delayed.move_held(unknown, None, 0), not_found(unknown));
    assert_eq!(
        delayed.move_held(id, Some(("/", "other")), 0),
        not_found(id)
    );
    assert_eq!(
        delayed.move_held(id, Some(("other", "d")), 0),
        not_found(id)
    );
    assert_eq!(delayed.len(), 1, "a refused move takes nothing out");
    // A purge that has begun: the message is no longer the exchange's to move.
    delayed.pause_purges(super::PauseAt::Begun);
    delayed.purge_exchange(&"/".into(), &"d".into());
    assert_eq!(delayed.move_held(id, None, 0), not_found(id));
    assert_eq!(delayed.resume_purges(), 1);
}

#[test]
fn a_kept_exchanges_message_on_disk_cannot_be_moved() {
    let temp = TempStore::new("move-kept");
    let (vhost, exchange, _queue) = super::tests::setup_with(true);
    {
        let before = on_disk(&temp, MemoryMonitor::new(u64::MAX));
        before.hold(&vhost, &exchange, message("kept"), DAY_MS);
        temp.store.write(Vec::new()).expect("commit");
    }
    let delayed = DelayedMessages::new(0, MemoryMonitor::new(u64::MAX));
    delayed.set_store(Arc::clone(&temp.store));
    let snapshot = temp.store.snapshot().expect("snapshot");
    delayed.reserve_below(snapshot.next_delayed_seq().expect("seq"));
    delayed.keep_unrestored("/", "d");
    delayed.attach_disk(Arc::clone(&temp.store), 0);
    let ids = snapshot.delayed_ids(None, 1).expect("ids");
    let id = DelayedId {
        due_ms: ids[0].due_ms,
        seq: ids[0].seq,
    };
    assert_eq!(
        delayed.move_held(id, None, 0),
        Err(MoveDelayedError::NotFound(id))
    );
    temp.store.write(Vec::new()).expect("commit");
    let snapshot = temp.store.snapshot().expect("snapshot");
    assert_eq!(snapshot.delayed_count().expect("count"), 1, "still kept");
}

#[test]
fn a_due_time_is_checked_against_now_and_ten_years() {
    let now = 1_000_000;
    let ten_years = 315_360_000_000;
    assert_eq!(DelayedMove::Now.due_ms(now), Ok(now));
    assert_eq!(DelayedMove::At(now).due_ms(now), Ok(now));
    assert_eq!(DelayedMove::After(5).due_ms(now), Ok(now + 5));
    assert_eq!(
        DelayedMove::At(now - 1).due_ms(now),
        Err(MoveDelayedError::InThePast {
            due_ms: now - 1,
            now_ms: now
        })
    );
    assert_eq!(
        DelayedMove::At(now + ten_years).due_ms(now),
        Ok(now + ten_years)
    );
    let too_far = MoveDelayedError::TooFar {
        due_ms: now + ten_years + 1,
        latest_ms: now + ten_years,
    };
    assert_eq!(
        DelayedMove::At(now + ten_years + 1).due_ms(now),
        Err(too_far.clone())
    );
    assert_eq!(DelayedMove::After(ten_years + 1).due_ms(now), Err(too_far));
    assert!(DelayedMove::After(u64::MAX).due_ms(now).is_err());
}
