//! One client connection: negotiation, the frame loop, heartbeats, blocking and teardown.
//!
//! This file runs a connection from its first byte to its last (the handshake, then the
//! frame loop, then closing its output and draining its input); `frame_loop` serves it once
//! open, `state` is what it owns, `dispatch` where each frame goes, `forced` a test's close.

mod dispatch;
mod forced;
mod frame_loop;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use dwellmq_codec::methods::ConnectionClose;
use dwellmq_codec::{decode_frame, FramePayload, Method, ShortStr};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::watch;
use tracing::Instrument;

use super::frames::{Fault, FaultOrExit};
use super::handshake::negotiate;
use super::outbound::{run_writer, Outbound};
use super::shutdown_requested;
use crate::broker::BrokerState;
use frame_loop::run;

/// How long to wait for `close-ok` after sending `connection.close`.
const CLOSE_OK_TIMEOUT: Duration = Duration::from_secs(3);

/// How long, once the connection is over, to keep reading until the client closes its side.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);

/// Serves one connection, given as the two halves of its byte stream (a TCP socket's, or an
/// in-memory stream's), until it closes.
pub(crate) async fn serve<R, W>(
    state: Arc<BrokerState>,
    reader: R,
    writer: W,
    ends: (SocketAddr, SocketAddr),
    shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_with_identity(state, reader, writer, ends, shutdown, None).await
}

/// [`serve`] for a connection whose peer proved an identity before AMQP began (the common
/// name of a verified TLS client certificate): the EXTERNAL mechanism is offered, for it.
pub(crate) async fn serve_with_identity<R, W>(
    state: Arc<BrokerState>,
    mut reader: R,
    writer: W,
    (peer, local): (SocketAddr, SocketAddr),
    shutdown: watch::Receiver<bool>,
    identity: Option<String>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let id = state.next_connection_id();
    let span = tracing::info_span!("conn", id, %peer);
    async move {
        let outbound = Arc::new(Outbound::new(Arc::clone(&state.memory)));
        let writer_task = tokio::spawn(run_writer(Arc::clone(&outbound), writer));
        {
            let mut outbounds = state.outbounds.lock();
            outbounds.retain(|o| o.strong_count() > 0);
            let probe: Arc<dyn crate::broker::IdleProbe> = Arc::clone(&outbound) as _;
            outbounds.push(Arc::downgrade(&probe));
        }
        let mut buf = BytesMut::with_capacity(64 * 1024);

        let mut shutdown = shutdown;
        // A peer still negotiating when the broker shuts down is dropped (as RabbitMQ does):
        // it must not hold up `BrokerHandle::shutdown` until the handshake timeout.
        let negotiated = tokio::select! {
            negotiated = tokio::time::timeout(
                state.config.limits.handshake_timeout,
                negotiate(&state, &mut reader, &mut buf, &outbound, peer, identity.as_deref()),
            ) => negotiated,
            _ = shutdown_requested(&mut shutdown) => {
                tracing::debug!("broker shutting down during the handshake");
                Ok(Ok(None))
            }
        };
        match negotiated {
            Ok(Ok(Some(n))) => {
                tracing::info!(user = %n.user, vhost = %n.vhost.name, "connection open");
                let shutdown = shutdown.clone();
                run(
                    id,
                    &state,
                    n,
                    (peer, local),
                    &mut reader,
                    &mut buf,
                    &outbound,
                    shutdown,
                )
                .await;
            }
            Ok(Ok(None)) | Ok(Err(FaultOrExit::Exit)) => {}
            Ok(Err(FaultOrExit::Fault(fault))) => {
                tracing::warn!(error = %fault.error, "negotiation failed");
                send_connection_close(&outbound, &fault);
            }
            Err(_) => tracing::warn!("handshake timed out"),
        }
        outbound.close();
        finish_writing(&outbound, writer_task).await;
        drain_until_peer_closes(&mut reader, &mut buf, &mut shutdown).await;
        tracing::debug!("connection closed");
    }
    .instrument(span)
    .await
}

/// Lets the writer send what is queued (the last `close` or `close-ok` among it) while the
/// client keeps reading; a client that reads nothing for [`CLOSE_OK_TIMEOUT`] gets the rest
/// dropped, or it would hold its connection, its buffer and the broker's shutdown forever.
async fn finish_writing(outbound: &Outbound, mut writer_task: tokio::task::JoinHandle<()>) {
    loop {
        let written = outbound.written_total();
        match tokio::time::timeout(CLOSE_OK_TIMEOUT, &mut writer_task).await {
            Ok(_) => return,
            Err(_) if outbound.written_total() == written => {
                tracing::warn!(
                    buffered = outbound.buffered(),
                    "client stopped reading; dropping its unwritten output"
                );
                writer_task.abort();
                outbound.abandon();
                return;
            }
            Err(_) => {}
        }
    }
}

fn send_connection_close(outbound: &Outbound, fault: &Fault) {
    outbound.send_method(
        0,
        &Method::ConnectionClose(ConnectionClose {
            reply_code: fault.error.reply_code(),
            reply_text: ShortStr::from(fault.error.reply_text()),
            class_id: fault.class_id,
            method_id: fault.method_id,
        }),
    );
}

/// After sending `connection.close`, discard frames until `close-ok` (or the peer's own
/// `close`) arrives, the socket ends, or the timeout passes.
async fn await_close_ok<R: AsyncRead + Unpin>(reader: &mut R, buf: &mut BytesMut, frame_max: u32) {
    let wait = async {
        loop {
            match decode_frame(buf, frame_max) {
                Ok(Some(frame)) => {
                    if matches!(
                        frame.payload,
                        FramePayload::Method(
                            Method::ConnectionCloseOk | Method::ConnectionClose(_)
                        )
                    ) {
                        return;
                    }
                    continue;
                }
                Ok(None) => {}
                // After a framing error the buffer holds the bad frame and would fail again
                // forever: drop it, so that the `close-ok` the client sends next is seen.
                Err(_) => buf.clear(),
            }
            match reader.read_buf(buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_OK_TIMEOUT, wait).await;
}

/// Once the last frame is written (and our side shut down), reads and discards until the
/// client closes its side, as RabbitMQ does, for at most [`DRAIN_TIMEOUT`] or until the
/// broker shuts down.
///
/// Closing a socket with unread input makes the kernel send a reset instead of a clean end,
/// and a reset can destroy the `close-ok` still on its way to the client: a client with
/// frames in flight after its `connection.close` (amqp091-go answering a channel close,
/// amqplib with a full write buffer) then sees EPIPE or EOF instead of its close completing.
async fn drain_until_peer_closes<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut BytesMut,
    shutdown: &mut watch::Receiver<bool>,
) {
    let drain = async {
        loop {
            buf.clear();
            if buf.capacity() < 4096 {
                buf.reserve(64 * 1024);
            }
            match reader.read_buf(buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::select! {
        _ = tokio::time::timeout(DRAIN_TIMEOUT, drain) => {}
        _ = shutdown_requested(shutdown) => {}
    }
}
