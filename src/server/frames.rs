//! Reading whole frames during negotiation, and the connection-level fault type.

use bytes::BytesMut;
use dwellmq_codec::{decode_frame, CodecError, FramePayload, Method};
use dwellmq_core::BrokerError;
use tokio::io::{AsyncRead, AsyncReadExt};

/// A connection-level error: closes the connection with `connection.close`.
#[derive(Debug)]
pub(crate) struct Fault {
    pub(crate) error: BrokerError,
    /// The method that caused it (0, 0 when none did).
    pub(crate) class_id: u16,
    pub(crate) method_id: u16,
}

impl Fault {
    pub(crate) fn new(error: BrokerError, class_id: u16, method_id: u16) -> Self {
        Fault {
            error,
            class_id,
            method_id,
        }
    }
}

impl From<CodecError> for Fault {
    fn from(e: CodecError) -> Self {
        let text = e.to_string();
        let (class_id, method_id) = match e {
            CodecError::MalformedMethod {
                class_id,
                method_id,
            }
            | CodecError::UnknownMethod {
                class_id,
                method_id,
            } => (class_id, method_id),
            _ => (0, 0),
        };
        let error = match e.reply_code() {
            502 => BrokerError::SyntaxError(text),
            503 => BrokerError::CommandInvalid(text),
            _ => BrokerError::FrameError(text),
        };
        Fault::new(error, class_id, method_id)
    }
}

/// Why a connection stops: a fault to report, or the socket is gone.
#[derive(Debug)]
pub(crate) enum FaultOrExit {
    Fault(Fault),
    Exit,
}

impl From<Fault> for FaultOrExit {
    fn from(f: Fault) -> Self {
        FaultOrExit::Fault(f)
    }
}

/// Reads until a whole method frame on channel 0 arrives (negotiation); heartbeats are skipped.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    frame_max: u32,
) -> Result<Method, FaultOrExit> {
    loop {
        match decode_frame(buf, frame_max).map_err(|e| FaultOrExit::Fault(e.into()))? {
            Some(frame) => match frame.payload {
                FramePayload::Method(m) if frame.channel == 0 => return Ok(m),
                FramePayload::Heartbeat => continue,
                _ => {
                    return Err(Fault::new(
                        BrokerError::UnexpectedFrame(
                            "expected a method frame on channel 0 during negotiation".into(),
                        ),
                        0,
                        0,
                    )
                    .into())
                }
            },
            None => {
                if reader.read_buf(buf).await.map_err(|_| FaultOrExit::Exit)? == 0 {
                    return Err(FaultOrExit::Exit);
                }
            }
        }
    }
}
