//! Messages held by `x-delayed-message` exchanges until their due time.
//!
//! One [`DelayedMessages`] per broker, in two tiers. Messages due within [`HORIZON_MS`] sit in
//! a timer wheel, their contents inside the wheel's entries; later ones wait in a map ordered by
//! (due time, sequence) and move into the wheel shortly before they are due, a batch at a time,
//! after the releases of the moment. So the wheel stays small and its cascades short however
//! many messages are held, and a release reads only what was touched at most a horizon ago:
//! the wheel, a small map of what is in it, and per-exchange counters. (On a virtual machine,
//! memory untouched for tens of seconds can cost hundreds of microseconds per page to read
//! again; a release that walked million-entry indexes paid that on the spot.) The ordered map
//! is also where the store's delayed table will take over.
//!
//! Small messages are held packed ([`dwellmq_core::PackedMessage`]): a message that waits a
//! minute must not keep the publisher's whole read buffer alive for that minute.
//!
//! Release routes each message through its exchange's bindings as they are then.

mod control;
mod held;
mod info;
pub(crate) mod lateness;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dwellmq_codec::ShortStr;
use dwellmq_core::routing::Destination;
use dwellmq_core::Message;
use dwellmq_timer::{Fired, TimerKey, TimerWheel};
use parking_lot::Mutex;

use super::exchange::Exchange;
use super::memory::MemoryMonitor;
use super::queue::Queue;
use super::vhost::VHost;
pub(crate) use control::ListPage;
use held::{ExchangeKey, Held, Kept, Target};
pub use info::{DelayedId, DelayedMessageInfo, ParseDelayedIdError};

/// How far ahead of now the wheel holds messages; later ones wait in the ordered map.
const HORIZON_MS: u64 = 1_000;

/// Messages moved into the wheel per lock hold: publishers wait for the lock meanwhile.
const MOVE_IN_BATCH: usize = 64;

/// Messages dropped per lock hold when an exchange is deleted or purged.
const PURGE_CHUNK: usize = 1024;

/// A wheel entry: the message's sequence number and the message.
type WheelEntry = (u64, Held);

/// Per delayed exchange: counts, and the due order of its messages beyond the horizon.
struct ExchangeIndex {
    /// What new messages of this exchange point at.
    target: Arc<Target>,
    /// (due, sequence) of this exchange's messages in the ordered map.
    beyond: BTreeSet<(u64, u64)>,
    count: usize,
    bytes: u64,
}

struct Inner {
    wheel: TimerWheel<WheelEntry>,
    /// Sequence number → wheel key, for the messages in the wheel (cancel, purge, listing).
    in_wheel: BTreeMap<u64, TimerKey>,
    /// Messages not yet in the wheel, by (due, sequence).
    beyond: BTreeMap<(u64, u64), Held>,
    /// Every message due at or before this is in the wheel (or released).
    horizon_ms: u64,
    /// B-trees, not hash maps: a hash map holding many entries stalls everything using it for
    /// milliseconds whenever it rehashes.
    exchanges: BTreeMap<ExchangeKey, ExchangeIndex>,
    next_seq: u64,
    unroutable: u64,
    fired: Vec<Fired<WheelEntry>>,
}

/// A message leaving the holder at release.
struct Released {
    due_ms: u64,
    seq: u64,
    held: Held,
}

/// Buffers `release_due` reuses, so a release allocates nothing in steady state.
#[derive(Default)]
struct ReleaseScratch {
    released: Vec<Released>,
    routes: Vec<Destination>,
    targets: Vec<Arc<Queue>>,
}

/// Every message held by every delayed exchange of one broker.
pub(crate) struct DelayedMessages {
    inner: Mutex<Inner>,
    memory: Arc<MemoryMonitor>,
    /// Taken before `inner` by the one releasing thread at a time.
    scratch: Mutex<ReleaseScratch>,
    /// How late messages were released.
    pub(crate) lateness: lateness::Lateness,
}

fn key_of(vhost: &ShortStr, exchange: &ShortStr) -> ExchangeKey {
    (vhost.clone(), exchange.clone())
}

impl DelayedMessages {
    pub(crate) fn new(now_ms: u64, memory: Arc<MemoryMonitor>) -> Self {
        DelayedMessages {
            inner: Mutex::new(Inner {
                wheel: TimerWheel::new(now_ms),
                in_wheel: BTreeMap::new(),
                beyond: BTreeMap::new(),
                horizon_ms: now_ms.saturating_add(HORIZON_MS),
                exchanges: BTreeMap::new(),
                next_seq: 1,
                unroutable: 0,
                fired: Vec::new(),
            }),
            memory,
            scratch: Mutex::new(ReleaseScratch::default()),
            lateness: lateness::Lateness::default(),
        }
    }

    /// Holds `message` until `due_ms`. Returns true when the timer thread must wake sooner than
    /// it planned.
    pub(crate) fn hold(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<Message>,
        due_ms: u64,
    ) -> bool {
        // Packed outside the lock; the published message (and its charge) goes away.
        let message = Kept::new(message);
        self.memory.charge_bytes(message.charged_by_holder());
        let body_len = message.body_len() as u64;
        let mut guard = self.inner.lock();
        let inner = &mut *guard;
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let next_wake = inner.next_wake();
        let index = inner
            .exchanges
            .entry(key_of(&vhost.name, &exchange.name))
            .or_insert_with(|| ExchangeIndex {
                target: Target::new(vhost, exchange),
                beyond: BTreeSet::new(),
                count: 0,
                bytes: 0,
            });
        if !index.target.is(vhost, exchange) {
            // A publish that raced with the exchange's deletion left an index for the old
            // exchange; its messages are dropped at release, and new ones point here.
            index.target = Target::new(vhost, exchange);
        }
        index.count += 1;
        index.bytes += body_len;
        let held = Held {
            target: Arc::clone(&index.target),
            message,
        };
        let wake_ms = if due_ms <= inner.horizon_ms {
            let key = inner.wheel.insert(due_ms, (seq, held));
            inner.in_wheel.insert(seq, key);
            due_ms
        } else {
            index.beyond.insert((due_ms, seq));
            inner.beyond.insert((due_ms, seq), held);
            // It must move into the wheel a horizon ahead of its due time.
            due_ms.saturating_sub(HORIZON_MS)
        };
        next_wake.is_none_or(|next| wake_ms < next)
    }

    /// When the timer thread must next act: the earliest due time in the wheel, or the moment
    /// the next message beyond the horizon must move in.
    pub(crate) fn next_wake(&self) -> Option<u64> {
        self.inner.lock().next_wake()
    }

    /// Releases everything due at `now_ms`, in due order (publish order within a millisecond),
    /// routing each through its exchange's current bindings. Returns how many were released.
    pub(crate) fn release_due(&self, now_ms: u64) -> usize {
        let mut scratch = self.scratch.lock();
        let ReleaseScratch {
            released,
            routes,
            targets,
        } = &mut *scratch;
        {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            let mut fired = std::mem::take(&mut inner.fired);
            inner.wheel.advance(now_ms, &mut fired);
            for Fired {
                due_ms,
                value: (seq, held),
            } in fired.drain(..)
            {
                inner.in_wheel.remove(&seq);
                inner.forget(&held, None);
                released.push(Released { due_ms, seq, held });
            }
            inner.fired = fired;
            // Messages due that never moved in (the clock jumped, or moving in fell behind).
            let mut caught_up = false;
            while let Some(entry) = inner.beyond.first_entry() {
                let (due_ms, seq) = *entry.key();
                if due_ms > now_ms {
                    break;
                }
                let held = entry.remove();
                inner.forget(&held, Some((due_ms, seq)));
                released.push(Released { due_ms, seq, held });
                caught_up = true;
            }
            if caught_up {
                inner.horizon_ms = inner.horizon_ms.max(now_ms);
                released.sort_by_key(|r| (r.due_ms, r.seq));
            }
        }
        let count = released.len();
        let mut unroutable = 0;
        let mut lateness = lateness::LatenessBatch::default();
        for Released { held, due_ms, .. } in released.drain(..) {
            lateness.record(now_ms.saturating_sub(due_ms));
            let Target {
                vhost, exchange, ..
            } = &*held.target;
            if !vhost.is_current(exchange) {
                // Its exchange was deleted while a purge of its messages was under way.
                self.discard(held.message);
                continue;
            }
            let Some(message) = self.message_to_release(held.message) else {
                continue;
            };
            targets.clear();
            let headers = message.properties.headers.as_ref();
            vhost.route(exchange, &message.routing_key, headers, routes, targets);
            if targets.is_empty() {
                unroutable += 1;
            }
            for queue in targets.drain(..) {
                queue.publish(Arc::clone(&message));
            }
        }
        if count > 0 {
            self.lateness.add(&lateness);
        }
        if unroutable > 0 {
            tracing::debug!(
                unroutable,
                "delayed messages found no route at release and were dropped"
            );
            self.inner.lock().unroutable += unroutable;
        }
        count
    }

    /// Moves the messages due within the horizon of `now_ms` into the wheel, in (due,
    /// sequence) order and in batches, touching their contents so that release finds them
    /// warm. Stops early once `budget` is spent or a moved message is already due; returns
    /// whether it finished.
    pub(crate) fn move_in(&self, now_ms: u64, budget: Option<Duration>) -> bool {
        let target = now_ms.saturating_add(HORIZON_MS);
        let started = Instant::now();
        loop {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            for _ in 0..MOVE_IN_BATCH {
                let Some(entry) = inner.beyond.first_entry() else {
                    inner.horizon_ms = inner.horizon_ms.max(target);
                    return true;
                };
                let (due_ms, seq) = *entry.key();
                if due_ms > target {
                    inner.horizon_ms = inner.horizon_ms.max(target);
                    return true;
                }
                let held = entry.remove();
                held.message.warm_up();
                if let Some(index) = inner.exchanges.get_mut(held.exchange_key()) {
                    index.beyond.remove(&(due_ms, seq));
                }
                let key = inner.wheel.insert(due_ms, (seq, held));
                inner.in_wheel.insert(seq, key);
                // Everything due before this message is in; later ones with its due time may
                // not be, so a new message due then must still queue behind them.
                inner.horizon_ms = inner.horizon_ms.max(due_ms.saturating_sub(1));
            }
            // Moved-in messages already due (moving in fell behind) are released first.
            let release_due = inner.wheel.next_due().is_some_and(|due| due <= now_ms);
            drop(guard);
            if release_due || budget.is_some_and(|b| started.elapsed() >= b) {
                return false;
            }
        }
    }

    /// The message to route at release; a packed one takes its memory charge along.
    fn message_to_release(&self, kept: Kept) -> Option<Arc<Message>> {
        match kept {
            Kept::Shared(message) => Some(message),
            Kept::Packed(packed) => {
                let guard = Box::new(self.memory.adopt(packed.body_len()));
                let message = packed.unpack(Some(guard));
                if message.is_none() {
                    // Unreachable for a message packed in this process; a store could feed
                    // a corrupt one. Dropping it beats failing every release after it.
                    tracing::error!("a held message could not be unpacked and was dropped");
                }
                message
            }
        }
    }

    /// Drops a held message that will never be released (cancelled or purged).
    fn discard(&self, kept: Kept) {
        self.memory.release_bytes(kept.charged_by_holder());
    }
}

impl Inner {
    fn next_wake(&self) -> Option<u64> {
        let moving_in = self
            .beyond
            .first_key_value()
            .map(|(&(due, _), _)| due.saturating_sub(HORIZON_MS));
        match (self.wheel.next_due(), moving_in) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes a message leaving the holder out of its exchange's counts (and, for one still
    /// beyond the horizon, out of its exchange's due order).
    fn forget(&mut self, held: &Held, beyond: Option<(u64, u64)>) {
        let key = held.exchange_key();
        if let Some(index) = self.exchanges.get_mut(key) {
            if let Some(due_seq) = beyond {
                index.beyond.remove(&due_seq);
            }
            // Saturating: a message of a deleted exchange released while a new exchange of
            // the same name already holds messages is counted against the new index.
            index.count = index.count.saturating_sub(1);
            index.bytes = index.bytes.saturating_sub(held.message.body_len() as u64);
            if index.count == 0 {
                self.exchanges.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::exchange::ExchangeKind;
    use crate::broker::vhost::{ExchangeSpec, QueueSpec};
    use dwellmq_codec::{BasicProperties, FieldTable};
    use dwellmq_core::routing::{Binding, RoutingKind};

    /// A vhost with a delayed fanout exchange `d` bound to queue `q`.
    fn setup() -> (Arc<VHost>, Arc<Exchange>, Arc<Queue>) {
        let vhost = Arc::new(VHost::new("/".into()));
        let exchange = vhost
            .declare_exchange(ExchangeSpec {
                name: "d".into(),
                kind: ExchangeKind::Delayed(RoutingKind::Fanout),
                passive: false,
                durable: false,
                auto_delete: false,
                internal: false,
                arguments: FieldTable::new(),
            })
            .unwrap();
        let queue = vhost
            .declare_queue(
                QueueSpec {
                    name: "q".into(),
                    passive: false,
                    durable: false,
                    exclusive: false,
                    auto_delete: false,
                    arguments: FieldTable::new(),
                },
                1,
            )
            .unwrap();
        vhost
            .bind(Binding {
                source: "d".into(),
                destination: Destination::Queue("q".into()),
                routing_key: "".into(),
                arguments: FieldTable::new(),
            })
            .unwrap();
        (vhost, exchange, queue)
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
        assert_eq!(memory.used(), 7);
        // Deleted, and its purge not yet done: what falls due meanwhile must not be routed
        // through the dead exchange's bindings.
        vhost.delete_exchange("d", false).unwrap();
        assert_eq!(delayed.release_due(10), 1);
        assert_eq!(queue.message_count(), 0);
        assert_eq!(delayed.unroutable(), 0);
        assert_eq!(delayed.purge_exchange(&"/".into(), &"d".into()), 1);
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
        assert_eq!(queue.message_count(), 102);
        assert_eq!(delayed.next_wake(), None);
    }
}
