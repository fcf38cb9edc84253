//! The queue state machine against random command sequences: nothing is lost or duplicated,
//! nothing expired is handed out, and the counts agree with what the caller holds.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use dwellmq_codec::{BasicProperties, ShortStr};
use proptest::prelude::*;

use super::*;
use crate::arguments::{DelayedRetry, QueueType, RetryKind};

#[derive(Debug, Clone)]
enum Op {
    Publish { ttl: Option<u64> },
    Consume { prefetch: u32 },
    Cancel,
    Get { no_ack: bool },
    Ack,
    Requeue { rejected: bool },
    Reject,
    Advance { ms: u64 },
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::option::of(0u64..50).prop_map(|ttl| Op::Publish { ttl }),
        1 => (0u32..3).prop_map(|prefetch| Op::Consume { prefetch }),
        1 => Just(Op::Cancel),
        2 => any::<bool>().prop_map(|no_ack| Op::Get { no_ack }),
        2 => Just(Op::Ack),
        2 => any::<bool>().prop_map(|rejected| Op::Requeue { rejected }),
        1 => Just(Op::Reject),
        2 => (0u64..40).prop_map(|ms| Op::Advance { ms }),
        1 => Just(Op::Purge),
    ]
}

fn settings() -> impl Strategy<Value = QueueSettings> {
    (
        proptest::option::of(0u64..30),
        proptest::option::of(0u64..4),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(ttl, max_length, quorum, head_only, dlx)| QueueSettings {
            message_ttl: ttl,
            max_length,
            queue_type: if quorum {
                QueueType::Quorum
            } else {
                QueueType::Classic
            },
            delivery_limit: quorum.then_some(2),
            delayed_retry: DelayedRetry {
                kind: if quorum {
                    RetryKind::Failed
                } else {
                    RetryKind::Disabled
                },
                min_ms: 5,
                max_ms: 15,
            },
            expiry_mode: if head_only {
                ExpiryMode::HeadOnly
            } else {
                ExpiryMode::OnTime
            },
            dead_letter: dlx.then(|| DeadLetterTarget {
                exchange: "dlx".into(),
                routing_key: None,
            }),
            ..Default::default()
        })
}

fn message(id: u64, ttl: Option<u64>) -> Arc<Message> {
    Message::new(
        "".into(),
        "q".into(),
        BasicProperties {
            expiration: ttl.map(|t| ShortStr::from(t.to_string())),
            message_id: Some(ShortStr::from(id.to_string())),
            ..Default::default()
        },
        Bytes::from_static(b"x").into(),
        None,
    )
}

fn id_of(m: &Message) -> u64 {
    m.properties
        .message_id
        .as_ref()
        .and_then(|s| s.parse().ok())
        .expect("test messages carry their id")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn messages_are_conserved_and_never_handed_out_expired(
        settings in settings(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut q: QueueState<u64> = QueueState::new(settings, false, 0);
        let mut fx = Effects::new();
        let mut now = 0u64;
        let mut next_id = 0u64;
        let mut published = BTreeSet::new();
        // Ids that left the queue for good (acked, no-ack, died, purged).
        let mut gone = BTreeSet::new();
        // Delivered and not settled: (entry, consumer credit if any).
        let mut outstanding: Vec<(QueueEntry, Option<Arc<ConsumerCredit>>)> = Vec::new();
        let mut consumers: Vec<(u64, Arc<ConsumerCredit>)> = Vec::new();
        let channel = Arc::new(ChannelCredit::new(Arc::new(Congestion::default())));
        let mut next_consumer = 0u64;
        for op in ops {
            match op {
                Op::Publish { ttl } => {
                    let id = next_id;
                    next_id += 1;
                    published.insert(id);
                    if q.publish(message(id, ttl), now, &mut fx) == PublishOutcome::Rejected {
                        gone.insert(id);
                    }
                }
                Op::Consume { prefetch } => {
                    let credit = Arc::new(ConsumerCredit::new(Arc::clone(&channel), prefetch, false));
                    let id = next_consumer;
                    next_consumer += 1;
                    let slot = ConsumerSlot { id, handle: id, priority: 0, exclusive: false, credit: Arc::clone(&credit) };
                    if q.consume(slot, now, &mut fx).is_ok() {
                        consumers.push((id, credit));
                    }
                }
                Op::Cancel => {
                    if let Some((id, _)) = consumers.pop() {
                        q.cancel(id, now, &mut fx);
                    }
                }
                Op::Get { no_ack } => {
                    if let Some((entry, _)) = q.get(no_ack, now, &mut fx) {
                        prop_assert!(entry.expires_at.is_none_or(|at| at > now), "expired get");
                        if no_ack {
                            gone.insert(id_of(&entry.message));
                        } else {
                            outstanding.push((entry, None));
                        }
                    }
                }
                Op::Ack => {
                    if let Some((entry, credit)) = outstanding.pop() {
                        if let Some(c) = credit { c.settled(1); }
                        gone.insert(id_of(&entry.message));
                        q.ack([&entry], now, &mut fx);
                    }
                }
                Op::Requeue { rejected } => {
                    if let Some((entry, credit)) = outstanding.pop() {
                        if let Some(c) = credit { c.settled(1); }
                        let cause = if rejected { ReturnCause::Rejected } else { ReturnCause::Nacked };
                        q.requeue([entry], cause, now, &mut fx);
                    }
                }
                Op::Reject => {
                    if let Some((entry, credit)) = outstanding.pop() {
                        if let Some(c) = credit { c.settled(1); }
                        q.reject([entry], now, &mut fx);
                    }
                }
                Op::Advance { ms } => {
                    now += ms;
                    q.tick(now, &mut fx);
                }
                Op::Purge => {
                    // Purged messages are counted, not named: everything waiting goes.
                    let waiting: Vec<u64> = q
                        .ready_entries()
                        .map(|e| id_of(&e.to_entry().message))
                        .chain(q.retrying_entries().map(|(_, e)| id_of(&e.message)))
                        .collect();
                    prop_assert_eq!(q.purge(&mut fx), waiting.len());
                    gone.extend(waiting);
                }
            }
            // As the shell does after every command: what stayed is packed from now on.
            q.settle(now, &mut fx);
            for effect in fx.drain() {
                match effect {
                    Effect::Deliver { consumer, entry, .. } => {
                        prop_assert!(
                            entry.expires_at.is_none_or(|at| at >= now),
                            "expired delivery"
                        );
                        let credit = consumers.iter().find(|(id, _)| *id == consumer).map(|(_, c)| Arc::clone(c));
                        prop_assert!(credit.is_some(), "delivered to an unknown consumer");
                        outstanding.push((entry, credit));
                    }
                    Effect::DeadLetter { message, .. } => {
                        prop_assert!(gone.insert(id_of(&message)), "died twice");
                    }
                    Effect::Dropped { .. } => {}
                    _ => {}
                }
            }
            // Dropped effects do not name the message: recount from what is still held.
            let held: BTreeSet<u64> = q
                .ready_entries()
                .map(|e| id_of(&e.to_entry().message))
                .chain(q.retrying_entries().map(|(_, e)| id_of(&e.message)))
                .chain(outstanding.iter().map(|(e, _)| id_of(&e.message)))
                .collect();
            let held_count = q.ready() + q.retrying() + outstanding.len();
            prop_assert_eq!(held.len(), held_count, "a message is held twice");
            prop_assert_eq!(q.unacked(), outstanding.len());
            prop_assert!(held.is_disjoint(&gone), "a message both gone and held");
            prop_assert!(held.is_subset(&published));
        }
    }
}
