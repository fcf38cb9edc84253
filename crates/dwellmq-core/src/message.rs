//! A published message as the broker holds it: shared by every queue it was routed to.

use std::sync::Arc;

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
        })
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
