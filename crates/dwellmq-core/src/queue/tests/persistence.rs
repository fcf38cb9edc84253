//! A durable queue's store effects: persist, delivery state, forget.

use super::*;

#[test]
fn persistent_messages_on_a_durable_queue_are_persisted_then_forgotten() {
    let mut q = Q::new(
        QueueSettings {
            durable: true,
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    let persistent = Message::new(
        "".into(),
        "q".into(),
        BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        },
        Bytes::from_static(b"p").into(),
        None,
    );
    q.publish(persistent, 0, &mut fx);
    q.publish(message("transient", None), 0, &mut fx);
    assert_eq!(summary(&mut fx), ["persist 0"]);
    let (entry, _) = q.get(false, 0, &mut fx).unwrap();
    q.ack([&entry], 0, &mut fx);
    assert_eq!(
        summary(&mut fx),
        [
            "state 0 redelivered=true count=0 acquired=0 ready_at=None",
            "forget 0"
        ]
    );
}

#[test]
fn a_first_delivery_is_recorded_in_the_persist_or_as_a_state_write() {
    let mut q = Q::new(
        QueueSettings {
            durable: true,
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    // No consumer: persisted as never delivered.
    q.publish(persistent("waiting"), 0, &mut fx);
    assert_eq!(summary(&mut fx), ["persist 0"]);
    // Delivered later: a state write says so.
    q.consume(slot(1, 2), 0, &mut fx).unwrap();
    assert_eq!(
        summary(&mut fx),
        [
            "state 0 redelivered=true count=0 acquired=0 ready_at=None",
            "deliver 1 waiting"
        ]
    );
    // Published to the waiting consumer: the persist says so, no state write.
    q.publish(persistent("at once"), 0, &mut fx);
    assert_eq!(
        summary(&mut fx),
        ["persist 1 delivered", "deliver 1 at once"]
    );
    // A consumer without acks takes it for good: forgotten, no state.
    let mut q = Q::new(
        QueueSettings {
            durable: true,
            ..Default::default()
        },
        false,
        0,
    );
    q.publish(persistent("no ack"), 0, &mut fx);
    fx.drain();
    let (entry, _) = q.get(true, 0, &mut fx).unwrap();
    assert_eq!(summary(&mut fx), ["forget 0"]);
    // A classic queue's requeue writes nothing: the first delivery already did.
    q.publish(persistent("again"), 0, &mut fx);
    let (entry2, _) = q.get(false, 0, &mut fx).unwrap();
    fx.drain();
    q.requeue([entry2], ReturnCause::Nacked, 0, &mut fx);
    assert!(summary(&mut fx).is_empty());
    let (again, _) = q.get(false, 0, &mut fx).unwrap();
    assert!(again.redelivered);
    assert!(
        summary(&mut fx).is_empty(),
        "redelivered: nothing new to write"
    );
    drop(entry);
}

#[test]
fn a_no_ack_delivery_forgets_its_stored_message_only_once_delivered() {
    let mut q = Q::new(
        QueueSettings {
            durable: true,
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.publish(persistent("kept"), 0, &mut fx);
    fx.drain();
    let no_ack = ConsumerSlot {
        credit: Arc::new(ConsumerCredit::new(channel(), 0, true)),
        ..slot(1, 0)
    };
    let credit = Arc::clone(&no_ack.credit);
    q.consume(no_ack, 0, &mut fx).unwrap();
    // No forget of its own: the removal goes with the delivery.
    let mut effects: Vec<_> = fx.drain().collect();
    assert_eq!(effects.len(), 1, "{effects:?}");
    let Some(Effect::Deliver { entry, forget, .. }) = effects.pop() else {
        panic!("a delivery");
    };
    assert!(forget, "the shell forgets it once delivered");
    // The channel was closing: handed back, it is still there (and still stored).
    q.undelivered(&credit, entry);
    assert_eq!(q.ready(), 1);
}
