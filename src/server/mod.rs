//! The network side: accepting sockets and running one task per connection.

pub(crate) mod channel;
pub(crate) mod connection;
pub(crate) mod delivery;
pub(crate) mod frames;
pub(crate) mod handshake;
pub(crate) mod outbound;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
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
                    let limit = state.config.limits.max_connections;
                    if state.open_connections.load(Ordering::Relaxed) >= limit {
                        tracing::warn!(%peer, limit, "connection refused: connection limit reached");
                        continue;
                    }
                    state.open_connections.fetch_add(1, Ordering::Relaxed);
                    let state = Arc::clone(&state);
                    let shutdown = shutdown.clone();
                    connections.spawn(async move {
                        connection::serve(Arc::clone(&state), stream, peer, shutdown).await;
                        state.open_connections.fetch_sub(1, Ordering::Relaxed);
                    });
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

/// Resolves once `BrokerHandle::shutdown` has been called (at once if it already was).
///
/// Never resolves when the handle was dropped without calling it: dropping the handle does
/// not stop the broker (a bare `changed()` would fail at once then, and stop everything).
pub(crate) async fn shutdown_requested(shutdown: &mut watch::Receiver<bool>) {
    if shutdown.wait_for(|&stop| stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}
