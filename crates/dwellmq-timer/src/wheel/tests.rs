//! Edge cases of `TimerWheel`; `tests/model.rs` covers random sequences.

use super::*;

const SECOND: u64 = 1_000;
const DAY: u64 = 86_400 * SECOND;
const YEAR: u64 = 365 * DAY;

fn advance_collect<T>(wheel: &mut TimerWheel<T>, now_ms: u64) -> Vec<(u64, T)> {
    let mut fired = Vec::new();
    wheel.advance(now_ms, &mut fired);
    fired.into_iter().map(|f| (f.due_ms, f.value)).collect()
}

#[test]
fn new_wheel_is_empty() {
    let wheel: TimerWheel<()> = TimerWheel::new(42);
    assert_eq!(wheel.now(), 42);
    assert_eq!(wheel.len(), 0);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_due(), None);
}

#[test]
fn fires_in_due_order_at_the_right_advance() {
    let mut wheel = TimerWheel::new(0);
    wheel.insert(300, "c");
    wheel.insert(5, "a");
    wheel.insert(70, "b");
    assert_eq!(wheel.len(), 3);
    assert_eq!(wheel.next_due(), Some(5));

    assert_eq!(advance_collect(&mut wheel, 4), vec![]);
    assert_eq!(advance_collect(&mut wheel, 5), vec![(5, "a")]);
    assert_eq!(wheel.next_due(), Some(70));
    assert_eq!(
        advance_collect(&mut wheel, 1_000),
        vec![(70, "b"), (300, "c")]
    );
    assert!(wheel.is_empty());
    assert_eq!(wheel.now(), 1_000);
}

#[test]
fn equal_due_times_fire_in_insertion_order_across_cascades() {
    let due = 10_000;
    let mut wheel = TimerWheel::new(0);
    // Inserted at three different `now`s, so the first two cascade down
    // from level 2 before the third arrives.
    wheel.insert(due, 1);
    wheel.insert(due + 1, 100);
    assert_eq!(advance_collect(&mut wheel, 5_000), vec![]);
    wheel.insert(due, 2);
    wheel.insert(due - 1, 0);
    assert_eq!(advance_collect(&mut wheel, 9_000), vec![]);
    wheel.insert(due, 3);
    assert_eq!(advance_collect(&mut wheel, 9_990), vec![]);
    wheel.insert(due, 4);

    assert_eq!(
        advance_collect(&mut wheel, due + 1),
        vec![
            (due - 1, 0),
            (due, 1),
            (due, 2),
            (due, 3),
            (due, 4),
            (due + 1, 100)
        ]
    );
}

#[test]
fn due_in_the_past_fires_on_next_advance_sorted_by_due() {
    let mut wheel = TimerWheel::new(1_000);
    wheel.insert(1_000, "now-1");
    wheel.insert(500, "past-500-a");
    wheel.insert(0, "past-0");
    wheel.insert(500, "past-500-b");
    wheel.insert(1_000, "now-2");
    wheel.insert(1_001, "future");
    assert_eq!(wheel.next_due(), Some(0));

    assert_eq!(
        advance_collect(&mut wheel, 1_000),
        vec![
            (0, "past-0"),
            (500, "past-500-a"),
            (500, "past-500-b"),
            (1_000, "now-1"),
            (1_000, "now-2"),
        ]
    );
    assert_eq!(wheel.next_due(), Some(1_001));
}

#[test]
fn advancing_backwards_keeps_time_but_fires_already_due_timers() {
    let mut wheel = TimerWheel::new(1_000);
    wheel.insert(1_500, "future");
    assert_eq!(advance_collect(&mut wheel, 10), vec![]);
    assert_eq!(wheel.now(), 1_000);

    wheel.insert(900, "overdue");
    wheel.insert(1_000, "due-now");
    assert_eq!(
        advance_collect(&mut wheel, 10),
        vec![(900, "overdue"), (1_000, "due-now")]
    );
    assert_eq!(wheel.now(), 1_000);
    assert_eq!(wheel.len(), 1);
    assert_eq!(advance_collect(&mut wheel, 1_500), vec![(1_500, "future")]);
}

#[test]
fn cancel_returns_value_once() {
    let mut wheel = TimerWheel::new(0);
    let key = wheel.insert(100, "x");
    assert!(wheel.contains(key));
    assert_eq!(wheel.cancel(key), Some("x"));
    assert!(!wheel.contains(key));
    assert_eq!(wheel.cancel(key), None);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_due(), None);
    assert_eq!(advance_collect(&mut wheel, 1_000), vec![]);
}

#[test]
fn cancel_of_fired_key_returns_none() {
    let mut wheel = TimerWheel::new(0);
    let key = wheel.insert(10, 'a');
    assert_eq!(advance_collect(&mut wheel, 10), vec![(10, 'a')]);
    assert_eq!(wheel.cancel(key), None);
}

#[test]
fn stale_key_does_not_cancel_a_recycled_slot() {
    let mut wheel = TimerWheel::new(0);
    let old = wheel.insert(10, "old");
    assert_eq!(wheel.cancel(old), Some("old"));
    let new = wheel.insert(20, "new");
    assert_ne!(old, new, "generation must distinguish reused storage");
    assert_eq!(wheel.cancel(old), None);
    assert_eq!(wheel.len(), 1);
    assert_eq!(wheel.cancel(new), Some("new"));
}

#[test]
fn cancel_from_the_middle_keeps_the_rest_in_order() {
    let mut wheel = TimerWheel::new(0);
    let keys: Vec<_> = (0..5).map(|i| wheel.insert(7_000, i)).collect();
    assert_eq!(wheel.cancel(keys[2]), Some(2));
    assert_eq!(wheel.cancel(keys[0]), Some(0));
    assert_eq!(wheel.cancel(keys[4]), Some(4));
    assert_eq!(
        advance_collect(&mut wheel, 7_000),
        vec![(7_000, 1), (7_000, 3)]
    );
}

#[test]
fn next_due_is_exact_after_cancelling_a_slot_minimum() {
    let mut wheel = TimerWheel::new(0);
    // All three share one level-2 slot (4096..8192).
    let first = wheel.insert(5_000, 'a');
    let second = wheel.insert(6_000, 'b');
    wheel.insert(7_000, 'c');
    assert_eq!(wheel.next_due(), Some(5_000));
    wheel.cancel(first);
    assert_eq!(wheel.next_due(), Some(6_000));
    wheel.cancel(second);
    assert_eq!(wheel.next_due(), Some(7_000));
    wheel.insert(6_500, 'd');
    assert_eq!(wheel.next_due(), Some(6_500));
}

#[test]
fn next_due_is_exact_for_overdue_entries_after_cancel() {
    let mut wheel = TimerWheel::new(1_000);
    let early = wheel.insert(100, ());
    wheel.insert(300, ());
    wheel.insert(200, ());
    assert_eq!(wheel.next_due(), Some(100));
    wheel.cancel(early);
    assert_eq!(wheel.next_due(), Some(200));
}

#[test]
fn u64_max_due_time_is_supported() {
    let mut wheel = TimerWheel::new(0);
    wheel.insert(u64::MAX, "end");
    wheel.insert(u64::MAX - 1, "almost");
    assert_eq!(wheel.next_due(), Some(u64::MAX - 1));
    assert_eq!(advance_collect(&mut wheel, u64::MAX - 2), vec![]);
    assert_eq!(
        advance_collect(&mut wheel, u64::MAX - 1),
        vec![(u64::MAX - 1, "almost")]
    );
    assert_eq!(
        advance_collect(&mut wheel, u64::MAX),
        vec![(u64::MAX, "end")]
    );
    assert_eq!(wheel.now(), u64::MAX);

    // At the end of time, new timers are due now or overdue.
    wheel.insert(u64::MAX, "again");
    wheel.insert(0, "ancient");
    assert_eq!(wheel.next_due(), Some(0));
    assert_eq!(
        advance_collect(&mut wheel, u64::MAX),
        vec![(0, "ancient"), (u64::MAX, "again")]
    );
}

#[test]
fn huge_jumps_fire_everything_in_order() {
    let start = 1_700_000_000_000; // a realistic epoch-millis "now"
    let mut wheel = TimerWheel::new(start);
    let delays = [10 * YEAR, 1, DAY, YEAR, 7 * DAY, u64::from(u32::MAX), 0];
    for (i, delay) in delays.iter().enumerate() {
        wheel.insert(start + delay, i);
    }
    let mut expected: Vec<_> = delays
        .iter()
        .enumerate()
        .map(|(i, delay)| (start + delay, i))
        .collect();
    expected.sort();

    assert_eq!(advance_collect(&mut wheel, start + 10 * YEAR), expected);
    assert!(wheel.is_empty());
}

#[test]
fn advancing_a_year_in_day_steps_fires_each_timer_on_its_day() {
    let mut wheel = TimerWheel::new(0);
    for day in (3..365).step_by(30) {
        wheel.insert(day * DAY + 123, day);
    }
    for day in 1..=365 {
        let fired = advance_collect(&mut wheel, day * DAY + 200);
        if day >= 3 && (day - 3) % 30 == 0 {
            assert_eq!(fired, vec![(day * DAY + 123, day)]);
        } else {
            assert_eq!(fired, vec![], "day {day}");
        }
    }
    assert!(wheel.is_empty());
}

#[test]
fn sparse_timers_across_all_of_time_are_cheap_to_reach() {
    // One timer per level, then a single advance over the whole u64 range:
    // this must skip the empty time rather than walk it.
    let mut wheel = TimerWheel::new(0);
    let dues: Vec<u64> = (0..64).map(|bit| 1u64 << bit).collect();
    for &due in &dues {
        wheel.insert(due, due);
    }
    let fired = advance_collect(&mut wheel, u64::MAX);
    let expected: Vec<_> = dues.iter().map(|&due| (due, due)).collect();
    assert_eq!(fired, expected);
}

#[test]
fn advance_with_matches_advance() {
    let mut collected = TimerWheel::new(0);
    let mut called = TimerWheel::new(0);
    for (i, due) in [50, 10, 10, 4_000, 3].into_iter().enumerate() {
        collected.insert(due, i);
        called.insert(due, i);
    }
    let mut via_callback = Vec::new();
    called.advance_with(5_000, |due, value| via_callback.push((due, value)));
    assert_eq!(advance_collect(&mut collected, 5_000), via_callback);
}

#[test]
fn panicking_callback_leaves_remaining_timers_pending() {
    let mut wheel = TimerWheel::new(0);
    wheel.insert(5, 1);
    wheel.insert(5, 2);
    wheel.insert(6, 3);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wheel.advance_with(10, |_, value| {
            if value == 2 {
                panic!("consumer failed");
            }
        });
    }));
    assert!(outcome.is_err());
    // Value 1 fired, value 2 was handed over (and dropped by the panic);
    // value 3 is still pending and the wheel still works.
    assert_eq!(wheel.len(), 1);
    assert_eq!(advance_collect(&mut wheel, 10), vec![(6, 3)]);
}

#[test]
fn storage_is_reused_after_firing() {
    let mut wheel = TimerWheel::new(0);
    for round in 0..10u64 {
        for i in 0..100 {
            wheel.insert(round * 1_000 + i, i);
        }
        advance_collect(&mut wheel, round * 1_000 + 999);
    }
    assert!(wheel.is_empty());
    let key = wheel.insert(20_000, 0);
    // 100 nodes were ever needed at once, so the new key reuses one.
    assert!(key.index < 100);
}

#[test]
fn get_sees_pending_timers_only() {
    let mut wheel = TimerWheel::new(0);
    let fires = wheel.insert(10, "fires");
    let cancelled = wheel.insert(20, "cancelled");
    assert_eq!(wheel.get(fires), Some((10, &"fires")));
    assert_eq!(wheel.cancel(cancelled), Some("cancelled"));
    assert_eq!(wheel.get(cancelled), None);
    advance_collect(&mut wheel, 10);
    assert_eq!(wheel.get(fires), None);
    // The storage is reused; the stale key still does not match.
    let reused = wheel.insert(30, "new");
    assert_eq!(wheel.get(fires), None);
    assert_eq!(wheel.get(reused), Some((30, &"new")));
}
