//! The stream state machine, command by command.

use super::test_support::{Harness, Seen};
use super::*;

fn settings() -> StreamSettings {
    StreamSettings {
        max_segment_bytes: 10_000,
        ..StreamSettings::default()
    }
}

#[test]
fn every_message_takes_the_next_offset_and_consumers_see_it_once_committed() {
    let mut h = Harness::new(settings());
    h.consume(1, 10, OffsetSpec::First);
    assert_eq!(h.publish(b"a"), 0);
    assert_eq!(h.publish(b"b"), 1);
    // Not committed: nobody sees it.
    assert!(h.offsets_seen(1).is_empty());
    assert_eq!(h.state.message_count(), 0);
    h.complete(1, true);
    assert_eq!(h.offsets_seen(1), [0]);
    h.commit_all();
    // Handed over from memory: the consumer was at the tail, no store read.
    assert!(h.reads.is_empty());
    assert_eq!(
        h.seen[&1],
        [
            Seen {
                offset: 0,
                body: b"a".to_vec()
            },
            Seen {
                offset: 1,
                body: b"b".to_vec()
            }
        ]
    );
    assert_eq!(h.state.message_count(), 2);
}

#[test]
fn a_consumer_from_first_reads_the_log_from_the_store_in_windows() {
    let mut h = Harness::new(settings());
    for i in 0..10u8 {
        h.publish(&[i]);
    }
    h.commit_all();
    h.consume(1, 4, OffsetSpec::First);
    let read = h.reads[0];
    assert_eq!((read.from_offset, read.end_offset, read.limit), (0, 10, 4));
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [0, 1, 2, 3]);
    // Its credit is used up; the next window was read ahead, and no more than that.
    assert_eq!(h.state.consumer_position(1), Some((8, 4)));
    assert!(h.reads.is_empty());
    h.settle(1, 1);
    assert_eq!(
        h.offsets_seen(1),
        [0, 1, 2, 3, 4],
        "from the window, no read"
    );
    assert!(h.reads.is_empty());
    h.settle(1, 2);
    assert_eq!(
        h.reads.len(),
        1,
        "half the window left: the next read is asked for"
    );
    h.serve_reads();
    h.settle(1, 4);
    h.settle(1, 4);
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), (0..10).collect::<Vec<_>>());
    assert_eq!(h.state.consumer_position(1), Some((10, 0)));
}

#[test]
fn next_sees_only_what_is_published_after_it() {
    let mut h = Harness::new(settings());
    h.publish(b"old");
    h.publish(b"in flight");
    h.complete(1, true);
    h.consume(1, 10, OffsetSpec::Next);
    h.publish(b"new");
    h.commit_all();
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [2]);
}

#[test]
fn last_starts_at_the_last_committed_message() {
    let mut h = Harness::new(settings());
    h.consume(9, 10, OffsetSpec::Last);
    for i in 0..5u8 {
        h.publish(&[i]);
    }
    h.commit_all();
    assert_eq!(
        h.offsets_seen(9),
        [0, 1, 2, 3, 4],
        "on an empty log, last is next"
    );
    h.publish(b"pending");
    h.consume(1, 10, OffsetSpec::Last);
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [4]);
    h.commit_all();
    assert_eq!(h.offsets_seen(1), [4, 5]);
}

#[test]
fn a_numeric_offset_starts_there_or_waits_for_it() {
    let mut h = Harness::new(settings());
    for i in 0..5u8 {
        h.publish(&[i]);
    }
    h.commit_all();
    h.consume(1, 10, OffsetSpec::Offset(3));
    h.consume(2, 10, OffsetSpec::Offset(7));
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [3, 4]);
    assert!(h.offsets_seen(2).is_empty());
    for i in 5..9u8 {
        h.publish(&[i]);
    }
    h.commit_all();
    h.serve_reads();
    assert_eq!(h.offsets_seen(2), [7, 8]);
}

#[test]
fn a_timestamp_or_an_interval_starts_at_the_first_message_from_then() {
    let mut h = Harness::new(StreamSettings {
        max_segment_bytes: 400,
        ..settings()
    });
    let start = h.now;
    for i in 0..40u64 {
        h.now = start + i * 1000;
        h.publish(&[i as u8]);
    }
    h.commit_all();
    h.consume(1, 100, OffsetSpec::Timestamp { ms: start + 25_000 });
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), (25..40).collect::<Vec<_>>());
    // 10.5 s before the last message's time: from offset 29 on.
    h.consume(2, 100, OffsetSpec::Ago { ms: 10_500 });
    h.serve_reads();
    assert_eq!(h.offsets_seen(2), (29..40).collect::<Vec<_>>());
    // A time after everything: only what comes.
    h.consume(3, 100, OffsetSpec::Timestamp { ms: h.now + 5000 });
    h.serve_reads();
    h.publish(b"early");
    h.now += 6000;
    h.publish(b"later");
    h.commit_all();
    h.serve_reads();
    assert_eq!(h.offsets_seen(3), [41]);
}

#[test]
fn acks_nacks_and_rejects_only_give_credit_back() {
    let mut h = Harness::new(settings());
    h.consume(1, 2, OffsetSpec::First);
    for i in 0..5u8 {
        h.publish(&[i]);
    }
    h.commit_all();
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [0, 1]);
    // Whatever the shell settles them with, nothing comes back and nothing is removed.
    h.settle(1, 2);
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [0, 1, 2, 3]);
    assert_eq!(h.state.message_count(), 5);
    h.settle(1, 2);
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [0, 1, 2, 3, 4]);
}

#[test]
fn consumers_read_independently() {
    let mut h = Harness::new(settings());
    for i in 0..6u8 {
        h.publish(&[i]);
    }
    h.commit_all();
    h.consume(1, 100, OffsetSpec::First);
    h.consume(2, 2, OffsetSpec::Offset(2));
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [0, 1, 2, 3, 4, 5]);
    assert_eq!(h.offsets_seen(2), [2, 3]);
    assert_eq!(h.state.cancel(2), Some(2));
    h.publish(b"x");
    h.commit_all();
    assert_eq!(h.offsets_seen(1).len(), 7);
    assert_eq!(h.offsets_seen(2), [2, 3]);
}

#[test]
fn a_failed_append_leaves_a_gap_no_one_sees_and_no_offset_is_reused() {
    let mut h = Harness::new(settings());
    h.consume(1, 10, OffsetSpec::First);
    h.publish(b"a");
    h.publish(b"lost");
    h.publish(b"c");
    h.complete(1, true);
    h.complete(1, false);
    h.complete(1, true);
    assert_eq!(h.offsets_seen(1), [0, 2]);
    assert_eq!(h.state.message_count(), 2);
    assert_eq!(h.publish(b"d"), 3);
    h.consume(2, 10, OffsetSpec::First);
    h.serve_reads();
    assert_eq!(h.offsets_seen(2), [0, 2]);
}

#[test]
fn retention_by_size_drops_whole_head_segments_when_a_segment_starts() {
    let mut h = Harness::new(StreamSettings {
        max_segment_bytes: 300,
        max_length_bytes: Some(700),
        ..settings()
    });
    let mut offsets = Vec::new();
    for i in 0..30u8 {
        offsets.push(h.publish(&[i; 60]));
        h.commit_all();
    }
    let segments: Vec<(u64, u64, u64)> = h.state.segments().collect();
    let bytes: u64 = segments.iter().map(|s| s.2).sum();
    assert!(bytes <= 700 || segments.len() == 1, "{segments:?}");
    assert!(h.truncated_before > 0);
    assert_eq!(h.state.first_offset(), h.truncated_before);
    assert_eq!(h.store.len() as u64, h.state.message_count());
    h.consume(1, 100, OffsetSpec::First);
    h.serve_reads();
    assert_eq!(
        h.offsets_seen(1),
        (h.truncated_before..30).collect::<Vec<_>>()
    );
}

#[test]
fn retention_by_age_runs_at_the_tick_it_asks_for_and_keeps_the_last_segment() {
    let mut h = Harness::new(StreamSettings {
        max_segment_bytes: 100,
        max_age_ms: Some(60_000),
        ..settings()
    });
    for i in 0..10u8 {
        h.publish(&[i; 80]);
        h.now += 1000;
    }
    h.commit_all();
    let newest_head = h.now - 9000 - 1000;
    assert_eq!(h.armed.last(), Some(&(newest_head + 60_001)));
    h.now += 120_000;
    h.tick();
    assert_eq!(h.state.segments().count(), 1, "the last segment stays");
    assert_eq!(h.state.message_count(), 1);
    assert_eq!(h.state.first_offset(), 9);
}

#[test]
fn a_failed_read_is_asked_again_after_a_while() {
    let mut h = Harness::new(settings());
    h.publish(b"a");
    h.commit_all();
    h.consume(1, 10, OffsetSpec::First);
    let request = h.reads.pop_front().expect("a read");
    let mut fx = StreamEffects::new();
    h.state.read_failed(&request, h.now, &mut fx);
    assert!(
        matches!(fx.as_slice(), [StreamEffect::Arm { at_ms }] if *at_ms == h.now + READ_RETRY_MS)
    );
    h.tick();
    assert!(h.reads.is_empty(), "not before its time");
    h.now += READ_RETRY_MS;
    h.tick();
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [0]);
}

#[test]
fn a_read_for_a_consumer_gone_is_dropped() {
    let mut h = Harness::new(settings());
    h.publish(b"a");
    h.commit_all();
    h.consume(1, 10, OffsetSpec::First);
    h.state.cancel(1);
    h.serve_reads();
    assert!(h.offsets_seen(1).is_empty());
}

#[test]
fn a_restored_stream_goes_on_after_the_last_offset() {
    let stored = StoredLog {
        next_offset: 50,
        chunks: vec![StoredChunk {
            segment: 40,
            first_offset: 40,
            end_offset: 45,
            count: 5,
            bytes: 500,
            first_ts: 1,
            last_ts: 2,
        }],
    };
    let mut h = Harness::restored(settings(), &stored);
    assert_eq!(h.state.message_count(), 5);
    assert_eq!(h.state.first_offset(), 40);
    assert_eq!(h.publish(b"next"), 50);
    h.consume(1, 10, OffsetSpec::Last);
    assert_eq!(h.reads[0].from_offset, 44);
}

#[test]
fn a_deleted_stream_refuses_consumers_and_returns_its_own() {
    let mut h = Harness::new(settings());
    h.consume(1, 10, OffsetSpec::First);
    assert_eq!(h.state.delete(), vec![1]);
    let slot = StreamConsumerSlot {
        id: 2,
        handle: 2,
        credit: super::test_support::credit(1),
    };
    let mut fx = StreamEffects::new();
    assert_eq!(
        h.state.consume(slot, OffsetSpec::First, h.now, &mut fx),
        Err(StreamConsumeRefused::Deleted)
    );
}

#[test]
fn appends_retention_dropped_before_they_committed_reach_no_consumer_and_it_reads_on() {
    // 34-octet records (one-octet bodies): three fill a segment.
    let mut h = Harness::new(StreamSettings {
        max_length_bytes: Some(100),
        max_segment_bytes: 100,
        ..StreamSettings::default()
    });
    for i in 0..3u8 {
        h.publish(&[i]);
    }
    h.consume(1, 1, OffsetSpec::Timestamp { ms: h.now });
    assert_eq!(h.state.consumer_position(1), Some((0, 0)));
    // Starts a segment: retention drops the first, its three appends still in flight.
    assert_eq!(h.publish(b"d"), 3);
    assert_eq!((h.truncated_before, h.state.first_offset()), (3, 3));
    h.complete(2, true);
    h.complete(2, false);
    h.serve_reads();
    // 0 and 1 committed (their publishers are confirmed) after their segment went: no one
    // sees them; 2 and 3 failed; the log holds nothing committed.
    assert!(h.offsets_seen(1).is_empty());
    assert_eq!(h.state.message_count(), 0);
    assert_eq!(h.state.committed_end(), h.state.next_offset());
    // The consumer, below the first offset, goes on from there.
    assert_eq!(h.publish(b"e"), 4);
    h.commit_all();
    h.serve_reads();
    assert_eq!(h.offsets_seen(1), [4]);
}
