//! What a held message becomes when it is released: its headers as the plugin writes them.

use std::sync::Arc;

use dwellmq_codec::ShortStr;
use dwellmq_core::arguments::{parse_x_delay, released_x_delay};
use dwellmq_core::routing::{bcc_keys, extra_routing_keys, BCC};
use dwellmq_core::{Message, MessageGuard};

use crate::broker::memory::MemoryMonitor;

/// The message as delivered at release, with `extra_keys` set to the `CC` and `BCC` keys it is
/// routed with.
///
/// Its `x-delay` becomes −delay, as the plugin writes it at release (and only then: a
/// `basic.return` at publish shows the header as sent), and its `BCC` header, kept while held
/// so that the release routes by it, is removed.
pub(super) fn release_form(
    message: Arc<Message>,
    memory: &Arc<MemoryMonitor>,
    extra_keys: &mut Vec<ShortStr>,
) -> Arc<Message> {
    extra_keys.clear();
    let headers = message.properties.headers.as_ref();
    // Both were read without error at publish; the same headers read the same now.
    let delay = parse_x_delay(headers).unwrap_or(0);
    if let Ok(keys) = extra_routing_keys(headers) {
        extra_keys.extend(keys);
    }
    let has_bcc = headers.is_some_and(|h| h.contains_key(BCC));
    if delay <= 0 && !has_bcc {
        return message;
    }
    let (exchange, routing_key, mut properties, body, guard, deaths) =
        match Arc::try_unwrap(message) {
            Ok(m) => (
                m.exchange,
                m.routing_key,
                m.properties,
                m.body,
                m.guard,
                m.deaths,
            ),
            Err(shared) => {
                // Still shared (a large message also delivered at once, or held by two delayed
                // exchanges): the copy charges its own body.
                let charge: MessageGuard = Box::new(memory.charge_message(shared.body_len()));
                (
                    shared.exchange.clone(),
                    shared.routing_key.clone(),
                    shared.properties.clone(),
                    shared.body.clone(),
                    Some(charge),
                    shared.deaths.clone(),
                )
            }
        };
    let mut bcc = None;
    if let Some(headers) = properties.headers.as_mut() {
        if delay > 0 {
            headers.insert("x-delay", released_x_delay(delay));
        }
        bcc = headers.remove(BCC);
    }
    // The dead-letter history goes along: a later death continues it.
    let mut released =
        Message::dead_lettered(exchange, routing_key, properties, body, guard, deaths);
    if let (Some(bcc), Some(fresh)) = (bcc, Arc::get_mut(&mut released)) {
        // Removed from the header now, kept for dead-lettering as at a plain publish.
        fresh.bcc = bcc_keys(&bcc);
    }
    released
}
