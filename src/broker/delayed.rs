//! Messages held by `x-delayed-message` exchanges until their due time.
//!
//! One [`DelayedMessages`] per broker: a timer wheel keyed by held-message id, the held
//! messages themselves, and a per-exchange index (due time order) for counts, listing, cancel
//! and purge. Release routes each message through its exchange's bindings as they are then.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::Message;
use dwellmq_timer::{Fired, TimerKey, TimerWheel};
use parking_lot::Mutex;

use super::exchange::Exchange;
use super::queue::Queue;
use super::vhost::VHost;

/// Identifies a delayed exchange: (vhost, exchange name).
type ExchangeKey = (ShortStr, ShortStr);

/// A message waiting for its due time.
struct Held {
    due_ms: u64,
    vhost: Arc<VHost>,
    exchange: Arc<Exchange>,
    message: Arc<Message>,
    timer: TimerKey,
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
    held: HashMap<u64, Held>,
    exchanges: HashMap<ExchangeKey, ExchangeIndex>,
    next_id: u64,
    unroutable: u64,
    fired: Vec<Fired<u64>>,
}

/// Every message held by every delayed exchange of one broker.
pub(crate) struct DelayedMessages {
    inner: Mutex<Inner>,
}

fn key_of(vhost: &VHost, exchange: &Exchange) -> ExchangeKey {
    (vhost.name.clone(), exchange.name.clone())
}

impl DelayedMessages {
    pub(crate) fn new(now_ms: u64) -> Self {
        DelayedMessages {
            inner: Mutex::new(Inner {
                wheel: TimerWheel::new(now_ms),
                held: HashMap::new(),
                exchanges: HashMap::new(),
                next_id: 1,
                unroutable: 0,
                fired: Vec::new(),
            }),
        }
    }

    /// Holds `message` until `due_ms`. Returns true when it is now the earliest deadline (the
    /// timer task must re-arm).
    pub(crate) fn hold(
        &self,
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        message: Arc<Message>,
        due_ms: u64,
    ) -> bool {
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let earliest = inner.wheel.next_due().is_none_or(|next| due_ms < next);
        let timer = inner.wheel.insert(due_ms, id);
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

    /// The earliest due time of any held message.
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.inner.lock().wheel.next_due()
    }

    /// Releases everything due at `now_ms`, in due order (publish order within a millisecond),
    /// routing each through its exchange's current bindings. Returns how many were released.
    pub(crate) fn release_due(&self, now_ms: u64) -> usize {
        let released: Vec<Held> = {
            let mut inner = self.inner.lock();
            let mut fired = std::mem::take(&mut inner.fired);
            inner.wheel.advance(now_ms, &mut fired);
            let held: Vec<Held> = fired
                .drain(..)
                .filter_map(|f| inner.take(f.value))
                .collect();
            inner.fired = fired;
            held
        };
        let count = released.len();
        let mut scratch = Vec::new();
        let mut targets: Vec<Arc<Queue>> = Vec::new();
        let mut unroutable = 0;
        for held in released {
            targets.clear();
            let headers = held.message.properties.headers.as_ref();
            held.vhost.route(
                &held.exchange,
                &held.message.routing_key,
                headers,
                &mut scratch,
                &mut targets,
            );
            if targets.is_empty() {
                unroutable += 1;
            }
            for queue in targets.drain(..) {
                queue.publish(Arc::clone(&held.message));
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
        for (_, id) in &index.by_due {
            if let Some(held) = inner.held.remove(id) {
                inner.wheel.cancel(held.timer);
            }
        }
        index.by_due.len()
    }

    /// Cancels one held message; false if it is unknown or already released.
    pub(crate) fn cancel(&self, id: u64) -> bool {
        let mut inner = self.inner.lock();
        match inner.take(id) {
            Some(held) => {
                inner.wheel.cancel(held.timer);
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
                Some(DelayedMessageInfo {
                    id,
                    due_ms,
                    routing_key: held.message.routing_key.to_string(),
                    headers: held.message.properties.headers.clone(),
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
}

impl Inner {
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
