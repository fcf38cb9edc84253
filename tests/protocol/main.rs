//! Protocol edges a library client never reaches, driven with raw AMQP frames: protocol
//! headers, negotiation, framing errors, channel state, heartbeats, blocking, connection limits
//! and shutdown. One test binary (one link, as CI's build time wants) with a module per feature.

#[path = "../common/mod.rs"]
mod common;

mod backpressure;
mod channels;
mod framing;
mod lifecycle;
mod negotiation;
