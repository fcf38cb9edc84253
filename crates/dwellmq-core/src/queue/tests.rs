//! Scenario tests: declare, publish, advance time, assert the effects. No sockets.

use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::{BasicProperties, ShortStr};

use super::*;
use crate::arguments::Overflow;

/// Consumers are named by a number in these tests.
type Q = QueueState<u32>;

fn message(body: &'static str, expiration: Option<&str>) -> Arc<Message> {
    Message::new(
        "ex".into(),
        "key".into(),
        BasicProperties {
            expiration: expiration.map(ShortStr::from),
            ..Default::default()
        },
        Bytes::from_static(body.as_bytes()).into(),
        None,
    )
}

fn dlx() -> Option<DeadLetterTarget> {
    Some(DeadLetterTarget {
        exchange: "dlx".into(),
        routing_key: None,
    })
}

fn channel() -> Arc<ChannelCredit> {
    Arc::new(ChannelCredit::new(Arc::new(Congestion::default())))
}

fn slot(id: u32, prefetch: u32) -> ConsumerSlot<u32> {
    ConsumerSlot {
        id: u64::from(id),
        handle: id,
        priority: 0,
        exclusive: false,
        credit: Arc::new(ConsumerCredit::new(channel(), prefetch, false)),
    }
}

/// A compact view of effects: ("deliver", consumer, body) / ("dead", reason, body) / ...
fn summary(fx: &mut Effects<u32>) -> Vec<String> {
    fx.drain()
        .map(|e| match e {
            Effect::Deliver {
                consumer,
                entry,
                forget,
            } => format!(
                "deliver {consumer} {}{}",
                body(&entry.message),
                if forget { " then forget" } else { "" }
            ),
            Effect::DeadLetter { message, reason } => {
                format!("dead {} {}", reason.name(), body(&message))
            }
            Effect::Dropped { reason } => format!("dropped {}", reason.name()),
            Effect::Arm { at_ms } => format!("arm {at_ms}"),
            Effect::Expire => "expire".into(),
            Effect::Persist { seq, delivered, .. } => {
                format!("persist {seq}{}", if delivered { " delivered" } else { "" })
            }
            Effect::SetState { seq, state } => format!(
                "state {seq} redelivered={} count={} acquired={} ready_at={:?}",
                state.redelivered, state.delivery_count, state.acquired_count, state.ready_at
            ),
            Effect::Forget { seq } => format!("forget {seq}"),
            Effect::ForgetRun { from_seq, end_seq } => format!("forget run {from_seq}..{end_seq}"),
            Effect::Spill { seq, .. } => format!("spill {seq}"),
            Effect::Unspill { from_seq, end_seq } => format!("unspill {from_seq}..{end_seq}"),
            Effect::Rewrite { seq, .. } => format!("rewrite {seq}"),
            Effect::RemovalsMark { mark } => format!("removals {mark}"),
        })
        .collect()
}

fn body(m: &Message) -> String {
    String::from_utf8_lossy(&m.body.chunks()[0]).into_owned()
}

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
fn drop_head_dead_letters_the_oldest() {
    let mut q = Q::new(
        QueueSettings {
            max_length: Some(2),
            dead_letter: dlx(),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    for b in ["a", "b", "c"] {
        assert_eq!(
            q.publish(message(b, None), 0, &mut fx),
            PublishOutcome::Accepted
        );
    }
    assert_eq!(summary(&mut fx), ["dead maxlen a"]);
    assert_eq!(q.ready(), 2);
}

#[test]
fn max_length_bytes_counts_bodies() {
    let mut q = Q::new(
        QueueSettings {
            max_length_bytes: Some(5),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.publish(message("abc", None), 0, &mut fx);
    q.publish(message("def", None), 0, &mut fx);
    assert_eq!(summary(&mut fx), ["dropped maxlen"]);
    assert_eq!(q.ready_bytes(), 3);
}

#[test]
fn reject_publish_refuses_and_reject_publish_dlx_also_dead_letters() {
    for (overflow, expected) in [
        (Overflow::RejectPublish, vec![]),
        (
            Overflow::RejectPublishDlx,
            vec!["dead maxlen b".to_string()],
        ),
    ] {
        let mut q = Q::new(
            QueueSettings {
                max_length: Some(1),
                overflow,
                dead_letter: dlx(),
                ..Default::default()
            },
            false,
            0,
        );
        let mut fx = Effects::new();
        assert_eq!(
            q.publish(message("a", None), 0, &mut fx),
            PublishOutcome::Accepted
        );
        assert_eq!(
            q.publish(message("b", None), 0, &mut fx),
            PublishOutcome::Rejected
        );
        assert_eq!(summary(&mut fx), expected);
        assert_eq!(q.ready(), 1);
    }
}

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

fn persistent(body: &'static str) -> Arc<Message> {
    Message::new(
        "".into(),
        "q".into(),
        BasicProperties {
            delivery_mode: Some(2),
            ..Default::default()
        },
        Bytes::from_static(body.as_bytes()).into(),
        None,
    )
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

#[test]
fn a_quorum_return_records_its_counts_and_its_retry_time() {
    use crate::arguments::RetryKind;
    let mut q = quorum(retry(RetryKind::Failed, 5_000, 5_000), None);
    let mut fx = Effects::new();
    q.publish(persistent("job"), 100, &mut fx);
    let (entry, _) = q.get(false, 100, &mut fx).unwrap();
    fx.drain();
    q.requeue([entry], ReturnCause::Rejected, 200, &mut fx);
    assert_eq!(
        summary(&mut fx)[0],
        "state 0 redelivered=true count=1 acquired=1 ready_at=Some(5200)"
    );
    q.tick(5_200, &mut fx);
    let (entry, _) = q.get(false, 5_200, &mut fx).unwrap();
    fx.drain();
    q.requeue([entry], ReturnCause::Nacked, 5_300, &mut fx);
    assert_eq!(
        summary(&mut fx)[0],
        "state 0 redelivered=true count=1 acquired=2 ready_at=None"
    );
}

#[test]
fn restored_messages_keep_their_retry_time_and_do_not_expire_until_ticked() {
    let mut q = Q::new(
        QueueSettings {
            durable: true,
            dead_letter: dlx(),
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    let entry = |seq, body, expires_at| QueueEntry {
        message: persistent(body),
        seq,
        redelivered: true,
        delivery_count: 0,
        acquired_count: 0,
        expires_at,
    };
    q.restore(
        [
            (entry(3, "expired", Some(500)), None),
            (entry(7, "retry", None), Some(2_000)),
        ],
        9,
        1_000,
        &mut fx,
    );
    assert_eq!((q.ready(), q.retrying()), (1, 1));
    assert_eq!(summary(&mut fx), ["arm 1000"]);
    q.tick(1_000, &mut fx);
    assert_eq!(
        summary(&mut fx),
        ["forget 3", "dead expired expired", "arm 2000"]
    );
    q.tick(2_000, &mut fx);
    assert_eq!((q.ready(), q.retrying()), (1, 0));
    fx.drain();
    q.publish(persistent("next"), 2_000, &mut fx);
    assert_eq!(summary(&mut fx)[0], "persist 9");
}

fn quorum(retry: crate::arguments::DelayedRetry, limit: Option<u64>) -> Q {
    Q::new(
        QueueSettings {
            queue_type: crate::arguments::QueueType::Quorum,
            delivery_limit: limit,
            delayed_retry: retry,
            dead_letter: dlx(),
            durable: true,
            ..Default::default()
        },
        false,
        0,
    )
}

fn retry(
    kind: crate::arguments::RetryKind,
    min_ms: u64,
    max_ms: u64,
) -> crate::arguments::DelayedRetry {
    crate::arguments::DelayedRetry {
        kind,
        min_ms,
        max_ms,
    }
}

#[test]
fn failed_retries_back_off_linearly_up_to_the_maximum() {
    use crate::arguments::RetryKind;
    let mut q = quorum(retry(RetryKind::Failed, 30_000, 120_000), None);
    let mut fx = Effects::new();
    q.publish(message("job", None), 0, &mut fx);
    let mut now = 0;
    let mut waits = Vec::new();
    for _ in 0..5 {
        let (entry, _) = q.get(false, now, &mut fx).unwrap();
        q.requeue([entry], ReturnCause::Rejected, now, &mut fx);
        assert_eq!((q.ready(), q.retrying()), (0, 1));
        let ready_at = q.next_retry_at().unwrap();
        waits.push(ready_at - now);
        assert!(
            q.get(false, ready_at - 1, &mut fx).is_none(),
            "invisible until due"
        );
        now = ready_at;
        q.tick(now, &mut fx);
        assert_eq!((q.ready(), q.retrying()), (1, 0));
    }
    assert_eq!(waits, [30_000, 60_000, 90_000, 120_000, 120_000]);
    let (entry, _) = q.get(false, now, &mut fx).unwrap();
    assert_eq!((entry.delivery_count, entry.acquired_count), (5, 5));
}

#[test]
fn retry_types_choose_which_returns_wait() {
    use crate::arguments::RetryKind;
    for (kind, rejected_waits, nacked_waits) in [
        (RetryKind::All, true, true),
        (RetryKind::Failed, true, false),
        (RetryKind::Returned, false, true),
        (RetryKind::Disabled, false, false),
    ] {
        for (cause, waits) in [
            (ReturnCause::Rejected, rejected_waits),
            (ReturnCause::ConsumerGone, rejected_waits),
            (ReturnCause::Nacked, nacked_waits),
        ] {
            let mut q = quorum(retry(kind, 1_000, 1_000), None);
            let mut fx = Effects::new();
            q.publish(message("m", None), 0, &mut fx);
            let (entry, _) = q.get(false, 0, &mut fx).unwrap();
            q.requeue([entry], cause, 0, &mut fx);
            assert_eq!(q.retrying() == 1, waits, "{kind:?} {cause:?}");
        }
    }
}

#[test]
fn past_the_delivery_limit_a_message_is_dead_lettered_before_any_retry() {
    use crate::arguments::RetryKind;
    let mut q = quorum(retry(RetryKind::Failed, 10, 10), Some(1));
    let mut fx = Effects::new();
    q.publish(message("poison", None), 0, &mut fx);
    let (entry, _) = q.get(false, 0, &mut fx).unwrap();
    q.requeue([entry], ReturnCause::Rejected, 0, &mut fx);
    q.tick(10, &mut fx);
    fx.drain();
    let (entry, _) = q.get(false, 10, &mut fx).unwrap();
    // A nack does not count: the limit is not reached.
    q.requeue([entry], ReturnCause::Nacked, 10, &mut fx);
    let (entry, _) = q.get(false, 10, &mut fx).unwrap();
    fx.drain();
    q.requeue([entry], ReturnCause::Rejected, 10, &mut fx);
    // A quorum queue stores every message, a transient one too: it leaves the store as it
    // dies.
    assert_eq!(summary(&mut fx), ["forget 0", "dead delivery_limit poison"]);
    assert_eq!((q.ready(), q.retrying()), (0, 0));
}

#[test]
fn a_message_waiting_for_a_retry_does_not_block_the_next_one() {
    use crate::arguments::RetryKind;
    let mut q = quorum(retry(RetryKind::All, 5_000, 5_000), None);
    let mut fx = Effects::new();
    q.publish(message("first", None), 0, &mut fx);
    q.publish(message("second", None), 0, &mut fx);
    let (first, _) = q.get(false, 0, &mut fx).unwrap();
    q.requeue([first], ReturnCause::Rejected, 0, &mut fx);
    let (next, remaining) = q.get(false, 0, &mut fx).unwrap();
    assert_eq!((body(&next.message).as_str(), remaining), ("second", 0));
}

#[test]
fn x_opt_delivery_time_sets_the_exact_retry_time() {
    let mut q = quorum(crate::arguments::DelayedRetry::default(), None);
    let mut fx = Effects::new();
    let mut headers = dwellmq_codec::FieldTable::new();
    headers.insert(
        DELIVERY_TIME_HEADER,
        dwellmq_codec::FieldValue::I64(86_400_000),
    );
    let m = Message::new(
        "".into(),
        "q".into(),
        BasicProperties {
            headers: Some(headers),
            ..Default::default()
        },
        Bytes::from_static(b"tomorrow").into(),
        None,
    );
    q.publish(m, 0, &mut fx);
    let (entry, _) = q.get(false, 1_000, &mut fx).unwrap();
    q.requeue([entry], ReturnCause::Nacked, 1_000, &mut fx);
    assert_eq!(q.next_retry_at(), Some(86_400_000));
    assert_eq!(q.purge(&mut fx), 1, "purge removes waiting messages");
}

#[test]
fn waiting_messages_count_toward_max_length() {
    use crate::arguments::RetryKind;
    let mut q = Q::new(
        QueueSettings {
            queue_type: crate::arguments::QueueType::Quorum,
            delayed_retry: retry(RetryKind::All, 1_000, 1_000),
            max_length: Some(1),
            overflow: Overflow::RejectPublish,
            ..Default::default()
        },
        false,
        0,
    );
    let mut fx = Effects::new();
    q.publish(message("a", None), 0, &mut fx);
    let (entry, _) = q.get(false, 0, &mut fx).unwrap();
    q.requeue([entry], ReturnCause::Nacked, 0, &mut fx);
    assert_eq!(
        q.publish(message("b", None), 0, &mut fx),
        PublishOutcome::Rejected
    );
    assert_eq!(q.release_retries(0, &mut fx), 1);
    assert_eq!(q.ready(), 1);
}

#[test]
fn new_settings_apply_at_once_to_length_and_deadlines() {
    let mut q = Q::new(QueueSettings::default(), false, 0);
    let mut fx = Effects::new();
    for b in ["a", "b", "c"] {
        q.publish(message(b, None), 0, &mut fx);
    }
    q.set_settings(
        QueueSettings {
            max_length: Some(1),
            expires: Some(500),
            ..Default::default()
        },
        100,
        &mut fx,
    );
    assert_eq!(
        summary(&mut fx),
        ["dropped maxlen", "dropped maxlen", "arm 600"]
    );
    assert_eq!(q.ready(), 1);
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
