//! The HTTP listener, capped: at most [`MAX_HTTP_CONNECTIONS`] connections at once, so that
//! HTTP clients (slow, idle or hostile) cannot take the file descriptors AMQP clients need.
//! A connection beyond the cap is closed at once.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Concurrent HTTP connections at most.
pub(crate) const MAX_HTTP_CONNECTIONS: usize = 256;

/// A TCP listener that hands out at most `permits` connections at a time.
pub(crate) struct CappedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
}

impl CappedListener {
    pub(crate) fn new(inner: TcpListener, max: usize) -> Self {
        CappedListener {
            inner,
            permits: Arc::new(Semaphore::new(max)),
        }
    }
}

/// An accepted connection; its permit goes back when it is dropped.
pub(crate) struct CappedStream {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

/// The peer of a connection (what `ConnectInfo` carries to the handlers).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub(crate) SocketAddr);

impl Listener for CappedListener {
    type Io = CappedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (CappedStream, SocketAddr) {
        loop {
            let (stream, peer) = match self.inner.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Usually EMFILE: back off briefly instead of spinning.
                    tracing::error!(%error, "HTTP accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            match Arc::clone(&self.permits).try_acquire_owned() {
                Ok(permit) => {
                    let _ = stream.set_nodelay(true);
                    return (
                        CappedStream {
                            stream,
                            _permit: permit,
                        },
                        peer,
                    );
                }
                Err(_) => tracing::warn!(%peer, "HTTP connection refused: too many open"),
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl Connected<IncomingStream<'_, CappedListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, CappedListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

impl AsyncRead for CappedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for CappedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
