//! Where each frame read goes: connection methods on channel 0, a channel's opening and
//! closing handshake, and everything else to its open channel.

use std::collections::HashMap;
use std::sync::Arc;

use dwellmq_codec::methods::ChannelClose;
use dwellmq_codec::{Frame, FramePayload, Method, ShortStr};
use dwellmq_core::BrokerError;

use super::state::{ChannelSlot, Connection, Flow};
use super::Fault;
use crate::server::channel::{Channel, ConnContext};
use crate::server::delivery::DeliveryChannel;

impl Connection {
    pub(super) fn on_frame(&mut self, frame: Frame) -> Result<Flow, Fault> {
        if frame.channel == 0 {
            return self.on_connection_frame(frame.payload);
        }
        let id = frame.channel;
        if matches!(frame.payload, FramePayload::Heartbeat) {
            return Err(Fault::new(
                BrokerError::FrameError("heartbeat frame on a non-zero channel".into()),
                0,
                0,
            ));
        }
        // The method a channel error names: a content frame's is `basic.publish`'s.
        let ids = match &frame.payload {
            FramePayload::Method(m) => (m.class_id(), m.method_id()),
            _ => (60, 40),
        };
        if matches!(frame.payload, FramePayload::Method(Method::BasicPublish(_))) {
            self.has_published = true;
        }
        let limits = (self.channel_max, self.frame_max);
        let (mut cx, channels) = self.context();
        match channels.get_mut(&id) {
            None => open_channel(&mut cx, channels, id, frame.payload, ids, limits),
            Some(ChannelSlot::Closing) => Ok(on_closing_channel(&cx, channels, id, frame.payload)),
            Some(ChannelSlot::Open(channel)) => match frame.payload {
                FramePayload::Method(Method::ChannelOpen) => Err(Fault::new(
                    BrokerError::ChannelError("second 'channel.open' seen".into()),
                    20,
                    10,
                )),
                FramePayload::Method(Method::ChannelClose(_)) => {
                    channel.close(&mut cx);
                    cx.outbound.send_method(id, &Method::ChannelCloseOk);
                    channels.remove(&id);
                    Ok(Flow::Continue)
                }
                FramePayload::Method(Method::ChannelCloseOk) => Ok(Flow::Continue),
                payload => {
                    let result = match payload {
                        FramePayload::Method(method) => channel.on_method(&mut cx, method),
                        FramePayload::Header(header) => channel.on_header(&mut cx, header),
                        FramePayload::Body(body) => channel.on_body(&mut cx, body),
                        FramePayload::Heartbeat => Ok(()),
                    };
                    match result {
                        Ok(()) => Ok(Flow::Continue),
                        Err(error) if error.is_connection_error() => {
                            Err(Fault::new(error, ids.0, ids.1))
                        }
                        Err(error) => {
                            close_channel(&mut cx, channels, id, &error, ids);
                            Ok(Flow::Continue)
                        }
                    }
                }
            },
        }
    }

    fn on_connection_frame(&mut self, payload: FramePayload) -> Result<Flow, Fault> {
        match payload {
            FramePayload::Heartbeat => Ok(Flow::Continue),
            FramePayload::Method(Method::ConnectionClose(close)) => {
                tracing::debug!(code = close.reply_code, text = %close.reply_text, "client closed the connection");
                self.outbound.send_method(0, &Method::ConnectionCloseOk);
                Ok(Flow::Closed)
            }
            FramePayload::Method(Method::ConnectionCloseOk) => Ok(Flow::Closed),
            FramePayload::Method(Method::ConnectionUpdateSecret(_)) => {
                self.outbound
                    .send_method(0, &Method::ConnectionUpdateSecretOk);
                Ok(Flow::Continue)
            }
            FramePayload::Method(Method::ConnectionBlocked(_) | Method::ConnectionUnblocked) => {
                Ok(Flow::Continue)
            }
            // RabbitMQ's answer to any other method on channel 0 once the connection is open.
            FramePayload::Method(m) => Err(Fault::new(
                BrokerError::ChannelError("unexpected method in connection state running".into()),
                m.class_id(),
                m.method_id(),
            )),
            FramePayload::Header(_) | FramePayload::Body(_) => Err(Fault::new(
                BrokerError::UnexpectedFrame("content frame on channel 0".into()),
                0,
                0,
            )),
        }
    }
}

/// A frame on a channel that is not open: only `channel.open` is expected there.
fn open_channel(
    cx: &mut ConnContext<'_>,
    channels: &mut HashMap<u16, ChannelSlot>,
    id: u16,
    payload: FramePayload,
    (class_id, method_id): (u16, u16),
    (channel_max, frame_max): (u16, u32),
) -> Result<Flow, Fault> {
    if !matches!(payload, FramePayload::Method(Method::ChannelOpen)) {
        return Err(Fault::new(
            BrokerError::ChannelError("expected 'channel.open'".into()),
            class_id,
            method_id,
        ));
    }
    // As RabbitMQ 3.10: channel_max bounds how many channels are open (closing ones
    // included), not the channel number a client picks.
    let open = channels.len();
    if open >= usize::from(channel_max) {
        return Err(Fault::new(
            BrokerError::NotAllowed(format!(
                "number of channels opened ({open}) has reached the negotiated channel_max ({channel_max})"
            )),
            0,
            0,
        ));
    }
    let delivery = Arc::new(DeliveryChannel::new(id, Arc::clone(cx.outbound), frame_max));
    channels.insert(id, ChannelSlot::Open(Box::new(Channel::new(delivery))));
    cx.counts.channels_opened += 1;
    cx.outbound.send_method(id, &Method::ChannelOpenOk);
    Ok(Flow::Continue)
}

/// A frame on a channel we closed: its `close-ok` ends it, a crossing `channel.close` is
/// answered, anything else is dropped.
fn on_closing_channel(
    cx: &ConnContext<'_>,
    channels: &mut HashMap<u16, ChannelSlot>,
    id: u16,
    payload: FramePayload,
) -> Flow {
    match payload {
        FramePayload::Method(Method::ChannelCloseOk) => {
            channels.remove(&id);
        }
        FramePayload::Method(Method::ChannelClose(_)) => {
            cx.outbound.send_method(id, &Method::ChannelCloseOk);
        }
        _ => {}
    }
    Flow::Continue
}

/// Closes channel `id` for `error` (a channel error): `channel.close` goes out and the channel
/// waits for `close-ok`.
pub(super) fn close_channel(
    cx: &mut ConnContext<'_>,
    channels: &mut HashMap<u16, ChannelSlot>,
    id: u16,
    error: &BrokerError,
    (class_id, method_id): (u16, u16),
) {
    tracing::debug!(channel = id, %error, "channel error");
    if let Some(ChannelSlot::Open(channel)) = channels.get_mut(&id) {
        // Publishes handled before the error are confirmed before the close, as RabbitMQ
        // (which confirms after every method) does.
        channel.flush_confirms(cx.outbound);
        channel.close(cx);
    }
    cx.outbound.send_method(
        id,
        &Method::ChannelClose(ChannelClose {
            reply_code: error.reply_code(),
            reply_text: ShortStr::from(error.reply_text()),
            class_id,
            method_id,
        }),
    );
    channels.insert(id, ChannelSlot::Closing);
}
