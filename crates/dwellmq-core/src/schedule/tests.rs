use super::*;

type S = Scheduler<&'static str>;

fn take(s: &mut S, now: u64) -> Vec<(u64, &'static str, bool)> {
    let mut out = Vec::new();
    s.take_due(now, &mut out);
    out.into_iter()
        .map(|d| (d.id.due_ms, d.item, d.from_far_tier))
        .collect()
}

#[test]
fn near_items_go_to_the_wheel_far_ones_wait_and_move_in_a_horizon_ahead() {
    let mut s = S::new(0);
    let (_, wake) = s.schedule(500, "near");
    assert!(wake);
    s.schedule(5_000, "far");
    assert_eq!(s.len(), 2);
    assert!(!s.is_far(s.in_wheel().next().unwrap().0));
    // The far one must move in at 4000.
    assert_eq!(take(&mut s, 500), [(500, "near", false)]);
    assert_eq!(s.next_wake(), Some(4_000));
    let mut moved = Vec::new();
    assert_eq!(
        s.move_in(4_000, 64, |id, item| moved.push((id.due_ms, *item))),
        MoveIn::Done
    );
    assert_eq!(moved, [(5_000, "far")]);
    assert_eq!(s.next_wake(), Some(5_000));
    assert_eq!(take(&mut s, 5_000), [(5_000, "far", false)]);
    assert!(s.is_empty());
}

#[test]
fn same_millisecond_items_keep_scheduling_order_across_both_tiers() {
    let mut s = S::new(0);
    s.schedule(3_000, "a");
    s.schedule(3_000, "b");
    assert_eq!(s.move_in(2_000, 1, |_, _| {}), MoveIn::More);
    // "a" moved in; "c", scheduled now for the same millisecond, must still follow "b".
    s.schedule(3_000, "c");
    let order: Vec<_> = take(&mut s, 3_000).into_iter().map(|(_, i, _)| i).collect();
    assert_eq!(order, ["a", "b", "c"]);
}

#[test]
fn a_clock_jump_releases_from_both_tiers_in_due_order() {
    let mut s = S::new(0);
    s.schedule(900, "wheel");
    s.schedule(50_000, "far-2");
    s.schedule(20_000, "far-1");
    assert_eq!(
        take(&mut s, 60_000),
        [
            (900, "wheel", false),
            (20_000, "far-1", true),
            (50_000, "far-2", true)
        ]
    );
}

#[test]
fn cancel_finds_an_item_in_either_tier_and_refuses_a_stale_id() {
    let mut s = S::new(0);
    let (near, _) = s.schedule(100, "near");
    let (far, _) = s.schedule(10_000, "far");
    assert_eq!(s.get(far), Some(&"far"));
    assert_eq!(s.cancel(far), Some("far"));
    assert_eq!(s.cancel(far), None);
    let stale = DeadlineId {
        due_ms: 99,
        seq: near.seq,
    };
    assert_eq!(s.cancel(stale), None);
    assert_eq!(s.cancel(near), Some("near"));
    assert!(s.is_empty());
    assert_eq!(s.next_wake(), None);
}

#[test]
fn drain_wheel_where_takes_only_matching_items() {
    let mut s = S::new(0);
    s.schedule(10, "x1");
    s.schedule(20, "y");
    s.schedule(30, "x2");
    let mut out = Vec::new();
    s.drain_wheel_where(|i| i.starts_with('x'), &mut out);
    out.sort();
    assert_eq!(out, ["x1", "x2"]);
    assert_eq!(take(&mut s, 100), [(20, "y", false)]);
}
