//! A look at the messages of a queue without taking them (the test double's peek).

use dwellmq_codec::BasicProperties;

use super::BrokerHandle;

/// A ready message, as [`BrokerHandle::peek_messages`] shows it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PeekedMessage {
    /// The exchange it was published to.
    pub exchange: String,
    /// Its routing key.
    pub routing_key: String,
    /// Its properties, headers included (`x-death` for a dead-lettered message).
    pub properties: BasicProperties,
    /// Its body.
    pub body: Vec<u8>,
    /// Whether it was delivered before.
    pub redelivered: bool,
    /// When it expires (ms since 1970), if it has a TTL.
    pub expires_at_ms: Option<u64>,
}

impl BrokerHandle {
    /// Up to `limit` ready messages of a queue from its head, left in place; empty if the
    /// queue does not exist.
    pub fn peek_messages(&self, vhost: &str, queue: &str, limit: usize) -> Vec<PeekedMessage> {
        let Some(queue) = self.state.vhost(vhost).and_then(|v| v.queue(queue).ok()) else {
            return Vec::new();
        };
        queue
            .peek(limit)
            .into_iter()
            .map(|entry| {
                let m = &entry.message;
                let mut body = Vec::with_capacity(m.body_len());
                for chunk in m.body.chunks() {
                    body.extend_from_slice(chunk);
                }
                PeekedMessage {
                    exchange: m.exchange.to_string(),
                    routing_key: m.routing_key.to_string(),
                    properties: m.properties.clone(),
                    body,
                    redelivered: entry.redelivered,
                    expires_at_ms: entry.expires_at,
                }
            })
            .collect()
    }

    /// Up to `limit` dead-lettered messages a queue keeps because not every dead-letter
    /// target took them yet (at-least-once dead-lettering), oldest first, as they were in the
    /// queue; empty if the queue does not exist.
    pub fn peek_kept_dead_letters(
        &self,
        vhost: &str,
        queue: &str,
        limit: usize,
    ) -> Vec<PeekedMessage> {
        let Some(queue) = self.state.vhost(vhost).and_then(|v| v.queue(queue).ok()) else {
            return Vec::new();
        };
        queue
            .kept_dead_letters(limit)
            .into_iter()
            .map(|m| {
                let mut body = Vec::with_capacity(m.body_len());
                for chunk in m.body.chunks() {
                    body.extend_from_slice(chunk);
                }
                PeekedMessage {
                    exchange: m.exchange.to_string(),
                    routing_key: m.routing_key.to_string(),
                    properties: m.properties.clone(),
                    body,
                    redelivered: false,
                    expires_at_ms: None,
                }
            })
            .collect()
    }

    /// How many messages the store holds spilled (what queues left on disk under memory
    /// pressure, see `Limits::queue_window_messages`), over every queue this broker has had,
    /// deleted ones included: what a purge or a delete dropped is gone from here once its
    /// write has committed. 0 without a data directory.
    pub fn spilled_in_store(&self) -> Result<u64, dwellmq_store::StoreError> {
        let Some(store) = self.state.store() else {
            return Ok(0);
        };
        let snapshot = store.snapshot()?;
        let mut count = 0;
        for spill in 1..=self.state.queue_services().spill_ids_issued() {
            count += snapshot.spilled_messages(spill, 0, usize::MAX)?.len() as u64;
        }
        Ok(count)
    }
}
