//! The network side: accepting sockets and running one task per connection.

pub(crate) mod channel;
pub(crate) mod commit_wait;
pub(crate) mod connection;
pub(crate) mod delivery;
pub(crate) mod frames;
pub(crate) mod handshake;
pub(crate) mod outbound;
#[cfg(feature = "tls")]
pub(crate) mod tls;
#[cfg(not(feature = "tls"))]
#[path = "tls_off.rs"]
pub(crate) mod tls;
pub(crate) mod tls_error;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::broker::BrokerState;

/// Accepts connections until `shutdown` turns true, then waits for every connection to end.
pub(crate) async fn accept_loop(
    state: Arc<BrokerState>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let local = stream.local_addr().unwrap_or(peer);
                    let (reader, writer) = stream.into_split();
                    let ends = (peer, local);
                    spawn_connection(&mut connections, &state, reader, writer, ends, &shutdown);
                }
                Err(error) => {
                    // Usually EMFILE: back off briefly instead of spinning.
                    tracing::error!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown_requested(&mut shutdown) => break,
        }
    }
    while connections.join_next().await.is_some() {}
}

/// Serves the in-memory streams `BrokerHandle::connect_in_memory` hands over, like accepted
/// sockets, until `shutdown` turns true; then waits for every such connection to end.
pub(crate) async fn in_memory_loop(
    state: Arc<BrokerState>,
    mut incoming: mpsc::UnboundedReceiver<DuplexStream>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            Some(stream) = incoming.recv() => {
                let (reader, writer) = tokio::io::split(stream);
                let ends = (IN_MEMORY_PEER, IN_MEMORY_PEER);
                spawn_connection(&mut connections, &state, reader, writer, ends, &shutdown);
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown_requested(&mut shutdown) => break,
        }
    }
    while connections.join_next().await.is_some() {}
}

/// The peer address an in-memory connection reports: it comes from this very process, so it
/// counts as loopback (guest may use it).
const IN_MEMORY_PEER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

/// Serves one connection on `connections` unless the connection limit is reached (then the
/// stream is dropped unserved, which closes it).
fn spawn_connection<R, W>(
    connections: &mut JoinSet<()>,
    state: &Arc<BrokerState>,
    reader: R,
    writer: W,
    ends: (SocketAddr, SocketAddr),
    shutdown: &watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let limit = state.config.limits.max_connections;
    if state.open_connections.load(Ordering::Relaxed) >= limit {
        tracing::warn!(peer = %ends.0, limit, "connection refused: connection limit reached");
        return;
    }
    state.open_connections.fetch_add(1, Ordering::Relaxed);
    let state = Arc::clone(state);
    let shutdown = shutdown.clone();
    connections.spawn(async move {
        connection::serve(Arc::clone(&state), reader, writer, ends, shutdown).await;
        state.open_connections.fetch_sub(1, Ordering::Relaxed);
    });
}

/// Resolves once `BrokerHandle::shutdown` has been called (at once if it already was).
///
/// Never resolves when the handle was dropped without calling it: dropping the handle does
/// not stop the broker (a bare `changed()` would fail at once then, and stop everything).
pub(crate) async fn shutdown_requested(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|&stop| stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}
