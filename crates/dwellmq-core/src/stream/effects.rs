//! What a stream asks its owner to do: the effects of one command.
//!
//! Invariants (the shell keeps them, see the module documentation of [`crate::stream`]):
//! - `Append`s are submitted to the store in offset order, under the stream's lock, each with
//!   its publisher's confirm; their completions go to the [`super::StreamProgress`].
//! - `Truncate` is submitted after the appends before it (same lock, same order).
//! - `Read`s are carried out off the lock, from a snapshot, and handed back as a command.
//! - `Deliver`s come in offset order per consumer; their credit is counted.

use std::sync::Arc;

use bytes::Bytes;

use super::header::with_offset_header;
use super::read::ReadRequest;
use crate::message::Message;
use crate::packed::PackedMessage;

/// A message on its way to a stream consumer: read from the store, or handed over from memory
/// when the consumer was waiting at the tail as it committed.
#[derive(Debug, Clone)]
pub enum StreamMessage {
    /// Read from the store.
    Stored(PackedMessage),
    /// As published (a consumer at the tail gets it without a store read).
    Live(Arc<Message>),
}

/// One delivery: the record's offset and its message.
#[derive(Debug, Clone)]
pub struct StreamDelivery {
    /// Its offset (what the `x-stream-offset` header says).
    pub offset: u64,
    /// The message.
    pub message: StreamMessage,
}

impl StreamDelivery {
    /// The message as the consumer gets it: as published, with the `x-stream-offset` header
    /// (`long`) in its properties. Nothing is copied but the properties; the body stays what
    /// it was (the store read's buffer, or the publisher's). `None` for a stored record that
    /// does not unpack (a damaged store: the shell skips it).
    pub fn into_message(self) -> Option<Arc<Message>> {
        let offset = self.offset;
        match self.message {
            StreamMessage::Stored(packed) => {
                packed.unpack_replacing_properties(|encoded| with_offset_header(encoded, offset))
            }
            StreamMessage::Live(message) => {
                let encoded: Bytes = with_offset_header(&message.properties_encoded, offset);
                let properties =
                    dwellmq_codec::BasicProperties::decode(&encoded).unwrap_or_else(|_| {
                        // Never: the header was spliced into properties this process encoded.
                        message.properties.clone()
                    });
                Some(Message::from_parts(
                    message.exchange.clone(),
                    message.routing_key.clone(),
                    properties,
                    encoded,
                    message.body.clone(),
                    None,
                    message.deaths.clone(),
                ))
            }
        }
    }

    /// The body's length in octets.
    pub fn body_len(&self) -> usize {
        match &self.message {
            StreamMessage::Stored(p) => p.body_len(),
            StreamMessage::Live(m) => m.body_len(),
        }
    }
}

/// One effect. `C` is the shell's handle for a consumer.
#[derive(Debug)]
pub enum StreamEffect<C> {
    /// Store hook: append the record (`Op::StreamAppend`), with the publisher's confirm
    /// waiting for its commit; the completion goes to the stream's
    /// [`super::StreamProgress`] (`completed(offset, ok)`).
    Append {
        /// Its offset.
        offset: u64,
        /// Its timestamp (ms since the epoch).
        timestamp_ms: u64,
        /// The first offset of its segment.
        segment: u64,
        /// The first offset of its index entry (chunk).
        chunk: u64,
        /// The message.
        message: Arc<Message>,
    },
    /// Store hook: retention dropped every segment before this offset
    /// (`Op::StreamTruncate`; a removal, retried until written).
    Truncate {
        /// The first offset kept.
        before_offset: u64,
    },
    /// Read for a consumer, off the lock, and hand the result back with
    /// [`super::StreamState::read_done`] (or [`super::StreamState::read_failed`]).
    Read(ReadRequest),
    /// Write this delivery to `consumer` (`basic.deliver`, with its `x-stream-offset` header:
    /// [`StreamDelivery::into_message`]). Its credit is already counted. A delivery the shell
    /// cannot carry out (the channel is closing) is simply dropped: the log still has it.
    Deliver {
        /// Who gets it.
        consumer: C,
        /// The consumer's id.
        consumer_id: u64,
        /// What it gets.
        delivery: StreamDelivery,
    },
    /// Call [`super::StreamState::tick`] at or after this time (retention by age, a read to
    /// retry); an early or extra tick is harmless.
    Arm {
        /// When (ms since the epoch).
        at_ms: u64,
    },
}

/// A reusable sink of effects.
#[derive(Debug)]
pub struct StreamEffects<C> {
    items: Vec<StreamEffect<C>>,
}

impl<C> Default for StreamEffects<C> {
    fn default() -> Self {
        StreamEffects { items: Vec::new() }
    }
}

impl<C> StreamEffects<C> {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn push(&mut self, effect: StreamEffect<C>) {
        self.items.push(effect);
    }

    /// Takes the effects out in order, leaving the sink empty (its buffer kept).
    pub fn drain(&mut self) -> std::vec::Drain<'_, StreamEffect<C>> {
        self.items.drain(..)
    }

    /// Whether no effect is pending.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The pending effects.
    pub fn as_slice(&self) -> &[StreamEffect<C>] {
        &self.items
    }
}
