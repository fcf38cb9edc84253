//! TTL, head-only expiry and an unused queue's `x-expires`.

use super::*;

#[test]
fn per_message_ttl_expires_on_time_behind_a_longer_one() {
    let mut q = Q::new(
        QueueSettings {
            dead_letter: dlx(),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.publish(message("long", Some("10000")), 0, &mut fx);
    q.publish(message("short", Some("100")), 0, &mut fx);
    assert_eq!(summary(&mut fx), ["arm 10000", "arm 100"]);
    q.tick(100, &mut fx);
    assert_eq!(summary(&mut fx), ["dead expired short", "arm 10000"]);
    assert_eq!(q.ready(), 1);
}

#[test]
fn head_only_mode_keeps_the_head_of_queue_trap() {
    let mut q = Q::new(
        QueueSettings {
            expiry_mode: ExpiryMode::HeadOnly,
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.publish(message("long", Some("10000")), 0, &mut fx);
    q.publish(message("short", Some("100")), 0, &mut fx);
    q.tick(100, &mut fx);
    assert_eq!(summary(&mut fx), ["arm 10000"]);
    assert_eq!(q.ready(), 2);
    q.tick(10_000, &mut fx);
    assert_eq!(summary(&mut fx), ["dropped expired", "dropped expired"]);
    assert_eq!(q.ready(), 0);
}

#[test]
fn queue_ttl_and_message_ttl_the_lower_wins() {
    let mut q = Q::new(
        QueueSettings {
            message_ttl: Some(500),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.publish(message("a", Some("2000")), 0, &mut fx);
    q.publish(message("b", Some("100")), 0, &mut fx);
    q.publish(message("c", None), 0, &mut fx);
    q.tick(100, &mut fx);
    assert_eq!(q.ready(), 2);
    q.tick(500, &mut fx);
    assert_eq!(q.ready(), 0);
}

#[test]
fn ttl_zero_reaches_only_a_consumer_that_can_take_it_at_once() {
    let mut q = Q::new(
        QueueSettings {
            dead_letter: dlx(),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.publish(message("nobody", Some("0")), 5, &mut fx);
    assert_eq!(summary(&mut fx), ["dead expired nobody"]);
    q.consume(slot(1, 0), 5, &mut fx).unwrap();
    q.publish(message("taken", Some("0")), 5, &mut fx);
    assert_eq!(summary(&mut fx), ["deliver 1 taken"]);
}

#[test]
fn basic_get_never_returns_an_expired_message() {
    let mut q = Q::new(QueueSettings::default(), false, 0);
    let mut fx = Effects::new();
    q.publish(message("old", Some("10")), 0, &mut fx);
    q.publish(message("new", None), 0, &mut fx);
    let (entry, remaining) = q.get(false, 10, &mut fx).unwrap();
    assert_eq!(body(&entry.message), "new");
    assert_eq!(remaining, 0);
    assert_eq!(q.unacked(), 1);
}

#[test]
fn a_requeued_message_keeps_its_expiry() {
    let mut q = Q::new(QueueSettings::default(), false, 0);
    let mut fx = Effects::new();
    q.publish(message("m", Some("100")), 0, &mut fx);
    let (entry, _) = q.get(false, 50, &mut fx).unwrap();
    q.requeue([entry], ReturnCause::Nacked, 60, &mut fx);
    fx.drain();
    q.tick(100, &mut fx);
    assert_eq!(summary(&mut fx), ["dropped expired"]);
}

#[test]
fn an_unused_queue_expires_and_use_postpones_it() {
    let mut q = Q::new(
        QueueSettings {
            expires: Some(1000),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.start(0, &mut fx);
    assert_eq!(summary(&mut fx), ["arm 1000"]);
    q.get(true, 600, &mut fx);
    q.tick(1000, &mut fx);
    assert_eq!(summary(&mut fx), ["arm 1600"]);
    q.consume(slot(1, 0), 1200, &mut fx).unwrap();
    q.tick(1600, &mut fx);
    assert!(summary(&mut fx).is_empty());
    q.cancel(1, 2000, &mut fx);
    assert_eq!(summary(&mut fx), ["arm 3000"]);
    q.tick(3000, &mut fx);
    assert_eq!(summary(&mut fx), ["expire"]);
}
