//! The HTTP listener, capped: at most [`MAX_HTTP_CONNECTIONS`] connections at once, so that
//! HTTP clients (slow, idle or hostile) cannot take the file descriptors AMQP clients need.
//! A connection beyond the cap is closed at once, and one that sends nothing for
//! [`IDLE_TIMEOUT`] while the server waits to read is closed, so that idle or trickling
//! clients cannot hold every slot for long.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Concurrent HTTP connections at most.
pub(crate) const MAX_HTTP_CONNECTIONS: usize = 256;

/// A connection silent this long while a request (or the next one) is awaited is closed.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A TCP listener that hands out at most `permits` connections at a time.
pub(crate) struct CappedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    idle_timeout: Duration,
}

impl CappedListener {
    pub(crate) fn new(inner: TcpListener, max: usize, idle_timeout: Duration) -> Self {
        CappedListener {
            inner,
            permits: Arc::new(Semaphore::new(max)),
            idle_timeout,
        }
    }
}

/// An accepted connection; its permit goes back when it is dropped.
pub(crate) struct CappedStream {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
    idle_timeout: Duration,
    /// Fires when the peer has sent nothing for `idle_timeout`; reset by every read.
    idle: Pin<Box<Sleep>>,
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
                    let idle = Box::pin(tokio::time::sleep(self.idle_timeout));
                    return (
                        CappedStream {
                            stream,
                            _permit: permit,
                            idle_timeout: self.idle_timeout,
                            idle,
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
        let this = &mut *self;
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Pending => match this.idle.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "HTTP client idle too long",
                ))),
                Poll::Pending => Poll::Pending,
            },
            ready => {
                let deadline = Instant::now() + this.idle_timeout;
                this.idle.as_mut().reset(deadline);
                ready
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_silent_connection_is_closed_and_its_slot_freed() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut listener = CappedListener::new(inner, 1, Duration::from_millis(50));
        let _client = TcpStream::connect(addr).await.unwrap();
        let (mut served, _) = listener.accept().await;
        assert_eq!(listener.permits.available_permits(), 0);
        let mut buf = [0u8; 8];
        let read = tokio::time::timeout(Duration::from_secs(5), served.read(&mut buf))
            .await
            .expect("the idle timeout ends the read");
        assert_eq!(read.unwrap_err().kind(), io::ErrorKind::TimedOut);
        drop(served);
        assert_eq!(listener.permits.available_permits(), 1);
    }
}
