//! A published message as the broker holds it: shared by every queue it was routed to.

use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};

use crate::body::Body;
use crate::dead_letter::Death;
use dwellmq_codec::{BasicProperties, ShortStr};

/// What a message carries to be dropped with it: the embedding broker's accounting.
pub type MessageGuard = Box<dyn std::fmt::Debug + Send + Sync>;

/// A message after routing: immutable, shared (`Arc`) by every queue that holds it.
///
/// The properties are encoded once at publish time so that every delivery copies a ready-made
/// header instead of re-encoding it; the body is a slice of the publisher's read buffer.
#[derive(Debug)]
pub struct Message {
    /// The exchange the client published to.
    pub exchange: ShortStr,
    /// The routing key the client published with.
    pub routing_key: ShortStr,
    /// Decoded properties (headers are read for routing, TTL and delays).
    pub properties: BasicProperties,
    /// The same properties, encoded (flags word first) for the content header frame.
    pub properties_encoded: Bytes,
    /// The body: slices of the publisher's read buffer.
    pub body: Body,
    /// Dropped with the message: the embedding broker's accounting (e.g. a memory charge).
    pub guard: Option<MessageGuard>,
    /// The broker's own dead-letter history, most recent first (what `x-death` is written
    /// from). Empty for a message a client published: an `x-death` header it sent is not
    /// history.
    pub deaths: Vec<Death>,
    /// The keys of the `BCC` header it was published with: the header is removed before anyone
    /// sees the message, but dead-lettering routes by these keys too, as RabbitMQ does.
    pub bcc: Box<[ShortStr]>,
    /// The charge of a message unpacked from a queue's ready list (see [`Message::charge_late`]):
    /// the queue charged it packed, in bulk, and cannot name the monitor from here.
    late_guard: OnceLock<MessageGuard>,
}

impl Message {
    /// Builds a shared message, encoding its properties once.
    pub fn new(
        exchange: ShortStr,
        routing_key: ShortStr,
        properties: BasicProperties,
        body: Body,
        guard: Option<MessageGuard>,
    ) -> Arc<Message> {
        Message::with_bcc(
            exchange,
            routing_key,
            properties,
            body,
            guard,
            Box::default(),
        )
    }

    /// A published message whose `BCC` header (already removed from `properties`) named `bcc`.
    pub fn with_bcc(
        exchange: ShortStr,
        routing_key: ShortStr,
        properties: BasicProperties,
        body: Body,
        guard: Option<MessageGuard>,
        bcc: Box<[ShortStr]>,
    ) -> Arc<Message> {
        let mut encoded = BytesMut::with_capacity(32);
        properties.encode(&mut encoded);
        Arc::new(Message {
            exchange,
            routing_key,
            properties,
            properties_encoded: encoded.freeze(),
            body,
            guard,
            deaths: Vec::new(),
            bcc,
            late_guard: OnceLock::new(),
        })
    }

    /// A message with the broker's dead-letter history (`deaths`, possibly empty): a
    /// dead-lettered one, or one rebuilt on its way out of a delayed exchange. `properties`
    /// already carry the `x-death` headers written from `deaths`.
    pub fn dead_lettered(
        exchange: ShortStr,
        routing_key: ShortStr,
        properties: BasicProperties,
        body: Body,
        guard: Option<MessageGuard>,
        deaths: Vec<Death>,
    ) -> Arc<Message> {
        let mut encoded = BytesMut::with_capacity(64);
        properties.encode(&mut encoded);
        Arc::new(Message {
            exchange,
            routing_key,
            properties,
            properties_encoded: encoded.freeze(),
            body,
            guard,
            deaths,
            bcc: Box::default(),
            late_guard: OnceLock::new(),
        })
    }

    /// Assembles a message from its parts (for the unpacking in this crate).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        exchange: ShortStr,
        routing_key: ShortStr,
        properties: BasicProperties,
        properties_encoded: Bytes,
        body: Body,
        guard: Option<MessageGuard>,
        deaths: Vec<Death>,
    ) -> Arc<Message> {
        Arc::new(Message {
            exchange,
            routing_key,
            properties,
            properties_encoded,
            body,
            guard,
            deaths,
            bcc: Box::default(),
            late_guard: OnceLock::new(),
        })
    }

    /// Whether the message is charged to no one: unpacked from a queue's ready list and not yet
    /// given a charge with [`Message::charge_late`].
    pub fn is_uncharged(&self) -> bool {
        self.guard.is_none() && self.late_guard.get().is_none()
    }

    /// Gives a message unpacked from a queue its charge now that it is delivered (it may stay
    /// unacknowledged for long); a message already charged keeps its charge and drops `guard`.
    pub fn charge_late(&self, guard: MessageGuard) {
        if self.is_uncharged() {
            let _ = self.late_guard.set(guard);
        }
    }

    /// Whether the publisher asked for persistence (`delivery-mode` 2).
    pub fn is_persistent(&self) -> bool {
        self.properties.is_persistent()
    }

    /// Body size in octets (what `x-max-length-bytes` and memory accounting count).
    pub fn body_len(&self) -> usize {
        self.body.len()
    }
}
