//! Messages held by `x-delayed-message` exchanges until their due time.
//!
//! One [`DelayedMessages`] per broker, in two tiers: messages due within [`HORIZON_MS`] sit in
//! a timer wheel; later ones wait in an ordered index (due time, id) and move into the wheel as
//! the horizon advances, a few at a time on every release. The wheel therefore stays small, and
//! its cascades (moving a slot's entries to a finer level) stay short however many messages are
//! held: a wheel holding a minute of messages would cascade tens of thousands at once and release
//! late meanwhile. The ordered index is also where the store's delayed table will take over.
//!
//! A per-exchange index (due order) serves counts, listing, cancel and purge. Release routes
//! each message through its exchange's bindings as they are then.
//!
//! Small messages are held packed ([`PackedMessage`]): a message that waits a minute must not
//! keep the publisher's whole read buffer alive for that minute.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::routing::Destination;
use dwellmq_core::{Message, PackedMessage};
use dwellmq_timer::{Fired, TimerKey, TimerWheel};
use parking_lot::Mutex;

use super::exchange::Exchange;
use super::memory::MemoryMonitor;
use super::queue::Queue;
use super::vhost::VHost;

/// How far ahead of now the wheel holds messages; later ones wait in the ordered index.
const HORIZON_MS: u64 = 1_000;

/// Bodies up to this size are packed (copied once into a buffer of their own) while held.
/// Larger bodies fill most of the read buffers they arrived in, so keeping their slices wastes
/// little, and copying them would cost more than it saves.
const PACK_BODY_MAX: usize = 16 * 1024;

/// A held message's contents.
enum Kept {
    /// Copied into one exact-sized buffer; its memory is charged in bulk by `DelayedMessages`.
    Packed(PackedMessage),
    /// As published (a large body), carrying its own memory charge.
    Shared(Arc<Message>),
}

impl Kept {
    fn body_len(&self) -> usize {
        match self {
            Kept::Packed(packed) => packed.body_len(),
            Kept::Shared(message) => message.body_len(),
        }
    }
}

/// Identifies a delayed exchange: (vhost, exchange name).
type ExchangeKey = (ShortStr, ShortStr);

/// A message waiting for its due time.
struct Held {
    due_ms: u64,
    vhost: Arc<VHost>,
    exchange: Arc<Exchange>,
    message: Kept,
    /// Set once the message is in the wheel; `None` while it waits beyond the horizon.
    timer: Option<TimerKey>,
}

/// A held message as the inspection API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayedMessageInfo {
    /// Id for [`crate::BrokerHandle::cancel_delayed`].
    pub id: u64,
    /// When it will be routed, milliseconds since the Unix epoch.
    pub due_ms: u64,
    /// The routing key it was published with.
    pub routing_key: String,
    /// Its headers (with `x-delay` already set to the negated delay, as it will be delivered).
    pub headers: Option<FieldTable>,
    /// Body size in octets.
    pub body_size: usize,
}

#[derive(Default)]
struct ExchangeIndex {
    /// (due, id): due-time order for listing.
    by_due: BTreeSet<(u64, u64)>,
    bytes: u64,
}

struct Inner {
    wheel: TimerWheel<u64>,
    /// Messages due after `horizon_ms`, as (due, id).
    beyond_horizon: BTreeSet<(u64, u64)>,
    /// Everything due at or before this is in the wheel.
    horizon_ms: u64,
    /// By id. A B-tree, not a hash map: ids only grow, and a hash map holding a million
    /// messages would stall publishers and releases for tens of milliseconds whenever it
    /// rehashes.
    held: BTreeMap<u64, Held>,
    /// A B-tree: comparing two short names is cheaper than hashing them on every release.
    exchanges: BTreeMap<ExchangeKey, ExchangeIndex>,
    next_id: u64,
    unroutable: u64,
    fired: Vec<Fired<u64>>,
}

/// Buffers `release_due` reuses, so a release allocates nothing in steady state.
#[derive(Default)]
struct ReleaseScratch {
    released: Vec<Held>,
    routes: Vec<Destination>,
    targets: Vec<Arc<Queue>>,
}

/// Every message held by every delayed exchange of one broker.
pub(crate) struct DelayedMessages {
    inner: Mutex<Inner>,
    memory: Arc<MemoryMonitor>,
    /// Taken before `inner` by the one releasing thread at a time.
    scratch: Mutex<ReleaseScratch>,
}

fn key_of(vhost: &VHost, exchange: &Exchange) -> ExchangeKey {
    (vhost.name.clone(), exchange.name.clone())
}

impl DelayedMessages {
    pub(crate) fn new(now_ms: u64, memory: Arc<MemoryMonitor>) -> Self {
        DelayedMessages {
            memory,
            inner: Mutex::new(Inner {
                wheel: TimerWheel::new(now_ms),
                beyond_horizon: BTreeSet::new(),
                horizon_ms: now_ms.saturating_add(HORIZON_MS),
                held: BTreeMap::new(),
                exchanges: BTreeMap::new(),
                next_id: 1,
                unroutable: 0,
                fired: Vec::new(),
            }),
            scratch: Mutex::new(ReleaseScratch::default()),
        }
    }

    /// Holds `message` until `due_ms`. Returns true when the timer task must wake sooner than
    /// it planned (re-arm).
    pub(crate) fn hold(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<Message>,
        due_ms: u64,
    ) -> bool {
        let message = if message.body_len() <= PACK_BODY_MAX {
            // Packed outside the lock; the published message (and its charge) goes away.
            let packed = PackedMessage::pack(&message);
            self.memory.charge_bytes(packed.body_len());
            Kept::Packed(packed)
        } else {
            Kept::Shared(message)
        };
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let next_wake = inner.next_wake();
        let (timer, wake_ms) = if due_ms <= inner.horizon_ms {
            (Some(inner.wheel.insert(due_ms, id)), due_ms)
        } else {
            inner.beyond_horizon.insert((due_ms, id));
            (None, due_ms.saturating_sub(HORIZON_MS))
        };
        // Re-arm the timer task when this message needs it sooner, including the moment it
        // must move into the wheel: moving in late would move a large batch at once.
        let earliest = next_wake.is_none_or(|next| wake_ms < next);
        let index = inner.exchanges.entry(key_of(vhost, exchange)).or_default();
        index.by_due.insert((due_ms, id));
        index.bytes += message.body_len() as u64;
        inner.held.insert(
            id,
            Held {
                due_ms,
                vhost: Arc::clone(vhost),
                exchange: Arc::clone(exchange),
                message,
                timer,
            },
        );
        earliest
    }

    /// When the timer task must next call [`DelayedMessages::release_due`]: the earliest due
    /// time in the wheel, or the moment the next message beyond the horizon must move in.
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
            let mut inner = self.inner.lock();
            inner.extend_horizon(now_ms);
            let mut fired = std::mem::take(&mut inner.fired);
            inner.wheel.advance(now_ms, &mut fired);
            released.extend(fired.drain(..).filter_map(|f| inner.take(f.value)));
            inner.fired = fired;
        }
        let count = released.len();
        let mut unroutable = 0;
        for held in released.drain(..) {
            let Some(message) = self.into_message(held.message) else {
                continue;
            };
            targets.clear();
            let headers = message.properties.headers.as_ref();
            held.vhost.route(
                &held.exchange,
                &message.routing_key,
                headers,
                routes,
                targets,
            );
            if targets.is_empty() {
                unroutable += 1;
            }
            for queue in targets.drain(..) {
                queue.publish(Arc::clone(&message));
            }
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

    /// Drops every message held by the exchange (it was deleted, or an operator purged it).
    pub(crate) fn purge_exchange(&self, vhost: &ShortStr, exchange: &ShortStr) -> usize {
        let mut inner = self.inner.lock();
        let Some(index) = inner.exchanges.remove(&(vhost.clone(), exchange.clone())) else {
            return 0;
        };
        for &(due_ms, id) in &index.by_due {
            if let Some(held) = inner.held.remove(&id) {
                inner.forget_timer(due_ms, id, held.timer);
                self.discard(held.message);
            }
        }
        index.by_due.len()
    }

    /// Cancels one held message; false if it is unknown or already released.
    pub(crate) fn cancel(&self, id: u64) -> bool {
        let mut inner = self.inner.lock();
        match inner.take(id) {
            Some(held) => {
                inner.forget_timer(held.due_ms, id, held.timer);
                self.discard(held.message);
                true
            }
            None => false,
        }
    }

    /// (count, body bytes) held by an exchange.
    pub(crate) fn stats(&self, vhost: &str, exchange: &str) -> (usize, u64) {
        let inner = self.inner.lock();
        inner
            .exchanges
            .get(&(ShortStr::from(vhost), ShortStr::from(exchange)))
            .map(|i| (i.by_due.len(), i.bytes))
            .unwrap_or((0, 0))
    }

    /// Held messages of an exchange in due order, at most `limit`.
    pub(crate) fn list(
        &self,
        vhost: &str,
        exchange: &str,
        limit: usize,
    ) -> Vec<DelayedMessageInfo> {
        let inner = self.inner.lock();
        let Some(index) = inner
            .exchanges
            .get(&(ShortStr::from(vhost), ShortStr::from(exchange)))
        else {
            return Vec::new();
        };
        index
            .by_due
            .iter()
            .take(limit)
            .filter_map(|&(due_ms, id)| {
                let held = inner.held.get(&id)?;
                let (routing_key, headers) = match &held.message {
                    Kept::Packed(packed) => (
                        packed.routing_key().unwrap_or_default(),
                        packed.properties().and_then(|p| p.headers),
                    ),
                    Kept::Shared(message) => (
                        message.routing_key.clone(),
                        message.properties.headers.clone(),
                    ),
                };
                Some(DelayedMessageInfo {
                    id,
                    due_ms,
                    routing_key: routing_key.to_string(),
                    headers,
                    body_size: held.message.body_len(),
                })
            })
            .collect()
    }

    /// Messages that found no route when released, since start.
    pub(crate) fn unroutable(&self) -> u64 {
        self.inner.lock().unroutable
    }

    /// Messages held in all exchanges.
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().held.len()
    }

    /// The message to route at release; a packed one takes its memory charge along.
    fn into_message(&self, kept: Kept) -> Option<Arc<Message>> {
        match kept {
            Kept::Shared(message) => Some(message),
            Kept::Packed(packed) => {
                let len = packed.body_len();
                let guard = Box::new(self.memory.charge(len));
                self.memory.release_bytes(len);
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
        if let Kept::Packed(packed) = kept {
            self.memory.release_bytes(packed.body_len());
        }
    }
}

impl Inner {
    fn next_wake(&self) -> Option<u64> {
        let moving_in = self
            .beyond_horizon
            .first()
            .map(|&(due, _)| due.saturating_sub(HORIZON_MS));
        match (self.wheel.next_due(), moving_in) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves every message due by `now_ms + HORIZON_MS` into the wheel, in (due, id) order, so
    /// equal due times keep publish order.
    fn extend_horizon(&mut self, now_ms: u64) {
        let horizon = now_ms.saturating_add(HORIZON_MS);
        if horizon <= self.horizon_ms {
            return;
        }
        self.horizon_ms = horizon;
        while let Some(&(due_ms, id)) = self.beyond_horizon.first() {
            if due_ms > horizon {
                break;
            }
            self.beyond_horizon.pop_first();
            let key = self.wheel.insert(due_ms, id);
            if let Some(held) = self.held.get_mut(&id) {
                held.timer = Some(key);
            }
        }
    }

    /// Removes a held message's entry from whichever tier holds it.
    fn forget_timer(&mut self, due_ms: u64, id: u64, timer: Option<TimerKey>) {
        match timer {
            Some(key) => {
                self.wheel.cancel(key);
            }
            None => {
                self.beyond_horizon.remove(&(due_ms, id));
            }
        }
    }

    /// Removes a held message and its index entry (not its timer).
    fn take(&mut self, id: u64) -> Option<Held> {
        let held = self.held.remove(&id)?;
        let key = key_of(&held.vhost, &held.exchange);
        if let Some(index) = self.exchanges.get_mut(&key) {
            index.by_due.remove(&(held.due_ms, id));
            index.bytes -= held.message.body_len() as u64;
            if index.by_due.is_empty() {
                self.exchanges.remove(&key);
            }
        }
        Some(held)
    }
}
