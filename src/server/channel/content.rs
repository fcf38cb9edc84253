//! Assembling a published message from its method, content header and body frames.

use bytes::{Bytes, BytesMut};
use dwellmq_codec::methods::BasicPublish;
use dwellmq_codec::ContentHeader;
use dwellmq_core::{Body, BrokerError, BrokerResult};

use super::{unexpected_frame, Channel, ConnContext};
use crate::broker::access::{Operation, ResourceKind};
use crate::broker::publish;

/// A `basic.publish` waiting for its content header and body.
pub(super) struct PendingPublish {
    pub(super) method: BasicPublish,
    pub(super) header: Option<ContentHeader>,
    pub(super) body: BodyParts,
}

/// Body frames as they arrive, kept as slices of the read buffer (no copy).
pub(super) enum BodyParts {
    Empty,
    One(Bytes),
    Many(Vec<Bytes>),
    /// A peer sending a great many tiny frames: joined, so a body cannot cost more in slice
    /// headers than in octets.
    Joined(BytesMut),
}

/// Beyond this many body frames the body is joined into one buffer.
const MAX_BODY_SLICES: usize = 1024;

impl BodyParts {
    pub(super) fn len(&self) -> usize {
        match self {
            BodyParts::Empty => 0,
            BodyParts::One(b) => b.len(),
            BodyParts::Many(chunks) => chunks.iter().map(Bytes::len).sum(),
            BodyParts::Joined(b) => b.len(),
        }
    }

    pub(super) fn push(&mut self, chunk: Bytes) {
        *self = match std::mem::replace(self, BodyParts::Empty) {
            BodyParts::Empty => BodyParts::One(chunk),
            BodyParts::One(first) => BodyParts::Many(vec![first, chunk]),
            BodyParts::Many(chunks) if chunks.len() >= MAX_BODY_SLICES => {
                let total = chunks.iter().map(Bytes::len).sum::<usize>() + chunk.len();
                let mut joined = BytesMut::with_capacity(total);
                for c in &chunks {
                    joined.extend_from_slice(c);
                }
                joined.extend_from_slice(&chunk);
                BodyParts::Joined(joined)
            }
            BodyParts::Many(mut chunks) => {
                chunks.push(chunk);
                BodyParts::Many(chunks)
            }
            BodyParts::Joined(mut joined) => {
                joined.extend_from_slice(&chunk);
                BodyParts::Joined(joined)
            }
        }
    }

    pub(super) fn into_body(self) -> Body {
        match self {
            BodyParts::Empty => Body::default(),
            BodyParts::One(b) => Body::Single(b),
            BodyParts::Many(chunks) => Body::from_chunks(chunks),
            BodyParts::Joined(joined) => Body::Single(joined.freeze()),
        }
    }
}

impl Channel {
    /// `basic.publish`: the content header and body frames follow.
    pub(super) fn basic_publish(
        &mut self,
        cx: &mut ConnContext<'_>,
        m: BasicPublish,
    ) -> BrokerResult<()> {
        if m.immediate {
            return Err(BrokerError::NotImplemented("immediate=true".into()));
        }
        // Write on the exchange (the default one as `amq.default`); a repeated exchange is a
        // cache hit, no pattern match.
        self.permit(cx, Operation::Write, ResourceKind::Exchange, &m.exchange)?;
        self.pending = Some(PendingPublish {
            method: m,
            header: None,
            body: BodyParts::Empty,
        });
        Ok(())
    }

    /// Handles a content header frame. Inline (one caller, the frame loop): the header is
    /// then moved into the pending publish without a copy of it on the way.
    #[inline]
    pub(crate) fn on_header(
        &mut self,
        cx: &mut ConnContext<'_>,
        header: ContentHeader,
    ) -> BrokerResult<()> {
        let Some(pending) = self.pending.as_mut() else {
            return Err(unexpected_frame(
                "expected method frame, got non method frame instead".into(),
            ));
        };
        if pending.header.is_some() {
            return Err(unexpected_frame(
                "expected content body, got non content body frame instead".into(),
            ));
        }
        if header.class_id != dwellmq_codec::constants::BASIC_CLASS_ID {
            return Err(unexpected_frame(format!(
                "expected content header for class 60, got one for class {} instead",
                header.class_id
            )));
        }
        // Refused from the header, before the body arrives.
        let max = cx.state.config.limits.max_message_size;
        if let Err(too_large) = publish::check_size(header.body_size, max) {
            self.pending = None;
            return Err(too_large);
        }
        let done = header.body_size == 0;
        pending.header = Some(header);
        if done {
            self.finish_publish(cx)?;
        }
        Ok(())
    }

    /// Handles a content body frame. Inline, as `on_header`.
    #[inline]
    pub(crate) fn on_body(&mut self, cx: &mut ConnContext<'_>, chunk: Bytes) -> BrokerResult<()> {
        let Some(pending) = self.pending.as_mut() else {
            return Err(unexpected_frame(
                "expected method frame, got non method frame instead".into(),
            ));
        };
        let Some(header) = &pending.header else {
            return Err(unexpected_frame(
                "expected content header for class 60, got non content header frame instead".into(),
            ));
        };
        let expected = header.body_size;
        pending.body.push(chunk);
        let received = pending.body.len() as u64;
        if received > expected {
            return Err(BrokerError::FrameError(
                "content body frame exceeds remaining content size".into(),
            ));
        }
        if received == expected {
            self.finish_publish(cx)?;
        }
        Ok(())
    }
}
