//! Choosing consumers: prefetch, priority and turns, exclusive and single active consumers,
//! returns to the queue.

use super::*;

#[test]
fn reject_without_requeue_dead_letters_and_requeue_goes_back_in_place() {
    let mut q = Q::new(
        QueueSettings {
            dead_letter: dlx(),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    for b in ["a", "b"] {
        q.publish(message(b, None), 0, &mut fx);
    }
    let (a, _) = q.get(false, 0, &mut fx).unwrap();
    let (b, _) = q.get(false, 0, &mut fx).unwrap();
    q.requeue([a], ReturnCause::Nacked, 0, &mut fx);
    q.reject([b], 0, &mut fx);
    assert_eq!(summary(&mut fx), ["dead rejected b"]);
    assert_eq!((q.ready(), q.unacked()), (1, 0));
    let (again, _) = q.get(true, 0, &mut fx).unwrap();
    assert!(again.redelivered);
}

#[test]
fn prefetch_limits_deliveries_and_acks_release_more() {
    let mut q = Q::new(QueueSettings::default(), false, 0);
    let mut fx = Effects::new();
    let consumer = slot(7, 1);
    let credit = Arc::clone(&consumer.credit);
    q.consume(consumer, 0, &mut fx).unwrap();
    q.publish(message("a", None), 0, &mut fx);
    q.publish(message("b", None), 0, &mut fx);
    let delivered: Vec<QueueEntry> = fx
        .drain()
        .filter_map(|e| match e {
            Effect::Deliver { entry, .. } => Some(entry),
            _ => None,
        })
        .collect();
    assert_eq!(delivered.len(), 1);
    credit.settled(1);
    q.ack(&delivered, 0, &mut fx);
    assert_eq!(summary(&mut fx), ["deliver 7 b"]);
}

#[test]
fn consumers_take_turns_and_higher_priority_goes_first() {
    let mut q = Q::new(QueueSettings::default(), false, 0);
    let mut fx = Effects::new();
    q.consume(slot(1, 0), 0, &mut fx).unwrap();
    q.consume(slot(2, 0), 0, &mut fx).unwrap();
    for b in ["a", "b", "c"] {
        q.publish(message(b, None), 0, &mut fx);
    }
    assert_eq!(
        summary(&mut fx),
        ["deliver 1 a", "deliver 2 b", "deliver 1 c"]
    );
    let mut high = slot(3, 0);
    high.priority = 5;
    q.consume(high, 0, &mut fx).unwrap();
    q.publish(message("d", None), 0, &mut fx);
    assert_eq!(summary(&mut fx), ["deliver 3 d"]);
}

#[test]
fn an_exclusive_consumer_keeps_others_out() {
    let mut q = Q::new(QueueSettings::default(), false, 0);
    let mut fx = Effects::new();
    let mut exclusive = slot(1, 0);
    exclusive.exclusive = true;
    q.consume(exclusive, 0, &mut fx).unwrap();
    assert_eq!(
        q.consume(slot(2, 0), 0, &mut fx),
        Err(ConsumeRefused::ExclusiveInUse)
    );
}

#[test]
fn a_single_active_consumer_gets_everything_until_it_leaves() {
    let mut q = Q::new(
        QueueSettings {
            single_active_consumer: true,
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.consume(slot(1, 0), 0, &mut fx).unwrap();
    let mut eager = slot(2, 0);
    eager.priority = 10;
    q.consume(eager, 0, &mut fx).unwrap();
    for b in ["a", "b"] {
        q.publish(message(b, None), 0, &mut fx);
    }
    assert_eq!(summary(&mut fx), ["deliver 1 a", "deliver 1 b"]);
    q.cancel(1, 0, &mut fx);
    q.publish(message("c", None), 0, &mut fx);
    assert_eq!(summary(&mut fx), ["deliver 2 c"]);
}
