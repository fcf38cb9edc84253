//! Closes a test asks for (fault injection): the broker closes the connection or one channel
//! with the reply code and text the test chose, exactly as it would on an error of its own.

use dwellmq_codec::methods::ChannelClose;
use dwellmq_codec::{Method, ShortStr};

use super::state::{ChannelSlot, Connection};
use super::Fault;
use crate::broker::connections::ForcedClose;

impl Connection {
    /// Closes the channel `close` names (a missing or closing one is left alone), or returns
    /// the fault that closes the whole connection.
    pub(super) fn force_close(&mut self, close: ForcedClose) -> Option<Fault> {
        let Some(id) = close.channel else {
            return Some(Fault::new(close.error, 0, 0));
        };
        let (mut cx, channels) = self.context();
        let Some(ChannelSlot::Open(channel)) = channels.get_mut(&id) else {
            return None;
        };
        tracing::info!(channel = id, error = %close.error, "closing a channel as a test asked");
        channel.flush_confirms(cx.outbound);
        channel.close(&mut cx);
        cx.outbound.send_method(
            id,
            &Method::ChannelClose(ChannelClose {
                reply_code: close.error.reply_code(),
                reply_text: ShortStr::from(close.error.reply_text()),
                class_id: 0,
                method_id: 0,
            }),
        );
        channels.insert(id, ChannelSlot::Closing);
        self.state.stats.flush(&mut self.counts);
        None
    }
}
