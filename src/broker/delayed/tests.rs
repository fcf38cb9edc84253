//! The holder with transient exchanges: shared set-up for the other test modules, and
//! releases racing deletions and move-in budgets.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::broker::exchange::{DeclaredBy, DeclaredType};
use crate::broker::memory::held_footprint;
use crate::broker::queue::Queue;
use crate::broker::vhost::{ExchangeSpec, QueueSpec};
use dwellmq_codec::{BasicProperties, FieldTable, FieldValue};
use dwellmq_core::routing::{Binding, Destination};
use dwellmq_core::Message;

/// A vhost with a delayed fanout exchange `d` bound to queue `q`.
fn setup() -> (Arc<VHost>, Arc<Exchange>, Arc<Queue>) {
    setup_with(false)
}

/// As [`setup`], with the exchange durable or not (the disk tier's tests use a durable
/// one).
pub(super) fn setup_with(durable: bool) -> (Arc<VHost>, Arc<Exchange>, Arc<Queue>) {
    let vhost = Arc::new(VHost::new("/".into()));
    let (exchange, queue) = declare_bound(&vhost, durable, "q");
    (vhost, exchange, queue)
}

/// Declares the delayed fanout exchange `d` (durable or not) and a queue named `queue`
/// bound to it.
pub(super) fn declare_bound(
    vhost: &Arc<VHost>,
    durable: bool,
    queue: &str,
) -> (Arc<Exchange>, Arc<Queue>) {
    let exchange = vhost
        .declare_exchange(ExchangeSpec {
            name: "d".into(),
            kind: DeclaredType::Delayed,
            passive: false,
            durable,
            auto_delete: false,
            internal: false,
            arguments: [("x-delayed-type", FieldValue::from("fanout"))]
                .into_iter()
                .collect(),
            declared_by: DeclaredBy::user("guest"),
        })
        .unwrap();
    let spec = QueueSpec {
        name: queue.into(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        arguments: FieldTable::new(),
    };
    let bound = vhost.declare_queue(spec, 1).unwrap();
    vhost
        .bind(Binding {
            source: "d".into(),
            destination: Destination::Queue(queue.into()),
            routing_key: "".into(),
            arguments: FieldTable::new(),
        })
        .unwrap();
    (exchange, bound)
}

fn message(body: &'static [u8]) -> Arc<Message> {
    Message::new(
        "d".into(),
        "k".into(),
        BasicProperties::default(),
        bytes::Bytes::from_static(body).into(),
        None,
    )
}

#[test]
fn a_release_racing_an_exchange_deletion_drops_the_message() {
    let (vhost, exchange, queue) = setup();
    let memory = MemoryMonitor::new(u64::MAX);
    let delayed = DelayedMessages::new(0, Arc::clone(&memory));
    delayed.hold(&vhost, &exchange, message(b"near"), 10);
    delayed.hold(&vhost, &exchange, message(b"far"), 5_000);
    assert_eq!(
        memory.used() as usize,
        held_footprint(4) + held_footprint(3)
    );
    // Deleted, and its purge not yet done: what falls due meanwhile must not be routed
    // through the dead exchange's bindings.
    vhost.delete_exchange("d", false).unwrap();
    assert_eq!(delayed.release_due(10), 1);
    assert_eq!(queue.message_count(&*vhost), 0);
    assert_eq!(delayed.unroutable(), 0);
    assert_eq!(delayed.forget_exchange(&"/".into(), &"d".into()), 1);
    assert_eq!(delayed.len(), 0);
    assert_eq!(memory.used(), 0);
}

#[test]
fn moving_in_is_bounded_by_the_budget_and_release_catches_up() {
    let (vhost, exchange, queue) = setup();
    let delayed = DelayedMessages::new(0, MemoryMonitor::new(u64::MAX));
    for _ in 0..100 {
        delayed.hold(&vhost, &exchange, message(b"m"), 1_500);
    }
    delayed.hold(&vhost, &exchange, message(b"m"), 1_700);
    // Nothing moved in yet: the timer must wake when the first one enters the horizon.
    assert_eq!(delayed.next_wake(), Some(500));
    // A spent budget stops after one batch, and the timer is still needed at once.
    assert!(!delayed.move_in(600, Some(Duration::ZERO)));
    assert_eq!(delayed.next_wake(), Some(500));
    assert!(delayed.move_in(600, None));
    // Now the wheel's earliest (1500) or the next move-in (1700 - horizon), whichever first.
    assert_eq!(delayed.next_wake(), Some(700));
    // Released straight from either tier once due, even with no move-in in between.
    delayed.hold(&vhost, &exchange, message(b"m"), 9_000);
    assert_eq!(delayed.release_due(10_000), 102);
    assert_eq!(queue.message_count(&*vhost), 102);
    assert_eq!(delayed.next_wake(), None);
}
