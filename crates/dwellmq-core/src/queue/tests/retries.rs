//! Quorum queues' delayed retries: back-off, retry types, delivery limit, waiting messages.

use super::*;

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
