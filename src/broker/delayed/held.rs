//! One held message: where it goes at release, and its contents.

use std::sync::Arc;

use dwellmq_codec::{FieldTable, ShortStr};
use dwellmq_core::{Message, PackedMessage};

use crate::broker::exchange::Exchange;
use crate::broker::memory::held_footprint;
use crate::broker::vhost::VHost;

/// Bodies up to this size are packed (copied once into a buffer of their own) while held.
/// Larger bodies fill most of the read buffers they arrived in, so keeping their slices wastes
/// little, and copying them would cost more than it saves.
const PACK_BODY_MAX: usize = 16 * 1024;

/// A held message's contents.
pub(super) enum Kept {
    /// Copied into one exact-sized buffer; its memory is charged in bulk by the holder.
    Packed(PackedMessage),
    /// As published (a large body), carrying its own memory charge.
    Shared(Arc<Message>),
}

impl Kept {
    /// Packs `message` if it is small enough to be worth it.
    pub(super) fn new(message: Arc<Message>) -> Kept {
        if message.body_len() <= PACK_BODY_MAX {
            Kept::Packed(PackedMessage::pack(&message))
        } else {
            Kept::Shared(message)
        }
    }

    pub(super) fn body_len(&self) -> usize {
        match self {
            Kept::Packed(packed) => packed.body_len(),
            Kept::Shared(message) => message.body_len(),
        }
    }

    /// Octets the holder charges to the memory monitor itself (packed messages only: a shared
    /// one carries its own charge), counted as for a queued message.
    pub(super) fn charged_by_holder(&self) -> usize {
        match self {
            Kept::Packed(packed) => held_footprint(packed.body_len()),
            Kept::Shared(_) => 0,
        }
    }

    /// Reads the first octet of the contents, so that release, a second later, finds them in
    /// memory that was recently touched. On a virtual machine, memory left untouched for tens of
    /// seconds can cost hundreds of microseconds per page at first access.
    pub(super) fn warm_up(&self) {
        let first = match self {
            Kept::Packed(packed) => packed.as_slice().first().copied(),
            Kept::Shared(message) => message.properties_encoded.first().copied(),
        };
        std::hint::black_box(first);
    }

    /// Routing key and headers, for listing.
    pub(super) fn key_and_headers(&self) -> (ShortStr, Option<FieldTable>) {
        match self {
            Kept::Packed(packed) => (
                packed.routing_key().unwrap_or_default(),
                packed.properties().and_then(|p| p.headers),
            ),
            Kept::Shared(message) => (
                message.routing_key.clone(),
                message.properties.headers.clone(),
            ),
        }
    }
}

/// The exchange incarnation a held message was published to, shared by all its held messages
/// (one pointer per message instead of three).
pub(super) struct Target {
    pub(super) vhost: Arc<VHost>,
    pub(super) exchange: Arc<Exchange>,
    /// (vhost, exchange name), built once rather than per message at every release.
    pub(super) key: ExchangeKey,
    /// The exchange's incarnation the messages are held for: once the exchange is at another
    /// (purged) or retired (deleted), they are not its own any more.
    pub(super) incarnation: u64,
}

/// A message waiting for its due time.
pub(crate) struct Held {
    pub(super) target: Arc<Target>,
    pub(super) message: Kept,
    /// Whether the store holds it (a durable exchange's message): its release, cancel or
    /// purge removes it there too. Under its scheduler id, except for a message caught up with
    /// after a restart, whose stored id is in the holder's side map (rare: kept out of here, so
    /// that every held message does not grow by an id).
    pub(super) stored: bool,
}

/// Identifies a delayed exchange: (vhost, exchange name).
pub(super) type ExchangeKey = (ShortStr, ShortStr);

impl Target {
    pub(super) fn new(
        vhost: &Arc<VHost>,
        exchange: &Arc<Exchange>,
        incarnation: u64,
    ) -> Arc<Target> {
        Arc::new(Target {
            vhost: Arc::clone(vhost),
            exchange: Arc::clone(exchange),
            key: (vhost.name.clone(), exchange.name.clone()),
            incarnation,
        })
    }

    /// Whether the exchange is still at this incarnation: one atomic load on the exchange,
    /// which a release touches anyway (cheaper than asking the vhost's exchange table).
    pub(super) fn is_current(&self) -> bool {
        self.exchange.incarnation() == self.incarnation
    }
}

impl Held {
    pub(super) fn exchange_key(&self) -> &ExchangeKey {
        &self.target.key
    }

    pub(super) fn incarnation(&self) -> u64 {
        self.target.incarnation
    }

    pub(super) fn belongs_to(&self, key: &ExchangeKey) -> bool {
        self.target.key == *key
    }
}
