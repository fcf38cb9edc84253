//! `server::tls` in a build without the `tls` feature: no TLS listener can exist. The
//! acceptor type has no values, so the accept loop cannot be reached; `Broker::start` refuses
//! `BrokerConfig::tls` before it gets here (`handle/start.rs`), and so does `acceptor`.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::BrokerState;
use crate::config::TlsConfig;
use crate::handle::StartError;

/// Stands for rustls's acceptor; uninhabited.
#[derive(Clone)]
pub(crate) enum TlsAcceptor {}

/// Always refuses: TLS is not built in.
pub(crate) fn acceptor(_config: &TlsConfig) -> Result<TlsAcceptor, StartError> {
    Err(StartError::NotBuilt {
        setting: "TLS (BrokerConfig::tls)",
        feature: "tls",
    })
}

/// Never runs: there is no acceptor to call it with.
pub(crate) async fn accept_loop(
    _state: Arc<BrokerState>,
    _listener: TcpListener,
    acceptor: TlsAcceptor,
    _shutdown: watch::Receiver<bool>,
) {
    match acceptor {}
}
