//! AMQP over TLS (RabbitMQ's port 5671): the rustls server configuration from the `[tls]`
//! settings, the accept loop, and the client certificate's common name for the EXTERNAL
//! mechanism. After the TLS handshake a connection is served by exactly the same code as a
//! plain one, over the two halves of the TLS stream.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
pub(crate) use tokio_rustls::TlsAcceptor;

use super::{connection, shutdown_requested};
use crate::broker::BrokerState;
use crate::config::{TlsConfig, TlsVerify};
use crate::server::tls_error::TlsError;

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let fail = |reason: String| TlsError::File {
        what,
        path: path.display().to_string(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| fail(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| fail(e.to_string()))?;
    if certs.is_empty() {
        return Err(fail("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// The acceptor for `config`: the server's certificate chain and key, and, with
/// `verify_peer`, client certificates checked against `cacertfile` (required with
/// `fail_if_no_peer_cert`, optional without).
pub(crate) fn acceptor(config: &TlsConfig) -> Result<TlsAcceptor, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = read_certs("certfile", &config.certfile)?;
    let key = PrivateKeyDer::from_pem_file(&config.keyfile).map_err(|e| TlsError::File {
        what: "keyfile",
        path: config.keyfile.display().to_string(),
        reason: e.to_string(),
    })?;
    let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    let builder = match config.verify {
        TlsVerify::VerifyNone => builder.with_no_client_auth(),
        TlsVerify::VerifyPeer => {
            let path = config.cacertfile.as_ref().ok_or(TlsError::NoCaCertFile)?;
            let mut roots = RootCertStore::empty();
            for ca in read_certs("cacertfile", path)? {
                roots.add(ca).map_err(|e| TlsError::Rustls(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if config.fail_if_no_peer_cert {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsError::Rustls(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let server = builder
        .with_single_cert(chain, key)
        .map_err(|e| TlsError::Rustls(e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// Accepts TLS connections until shutdown, then waits for every connection to end. The TLS
/// handshake runs in the connection's own task, under the AMQP handshake timeout, so a slow
/// or silent peer holds up no one else.
pub(crate) async fn accept_loop(
    state: Arc<BrokerState>,
    listener: TcpListener,
    acceptor: TlsAcceptor,
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
                    let _ = stream.set_nodelay(true);
                    let local = stream.local_addr().unwrap_or(peer);
                    state.open_connections.fetch_add(1, Ordering::Relaxed);
                    let (state, acceptor, shutdown) =
                        (Arc::clone(&state), acceptor.clone(), shutdown.clone());
                    connections.spawn(async move {
                        serve_tls(&state, acceptor, stream, (peer, local), shutdown).await;
                        state.open_connections.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(error) => {
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

async fn serve_tls(
    state: &Arc<BrokerState>,
    acceptor: TlsAcceptor,
    stream: tokio::net::TcpStream,
    ends: (SocketAddr, SocketAddr),
    shutdown: watch::Receiver<bool>,
) {
    let timeout = state.config.limits.handshake_timeout;
    let stream = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => {
            tracing::warn!(peer = %ends.0, %error, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::warn!(peer = %ends.0, "TLS handshake timed out");
            return;
        }
    };
    // Present only when the verifier accepted a client certificate.
    let identity = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|cert| common_name(cert));
    let (reader, writer) = tokio::io::split(stream);
    connection::serve_with_identity(Arc::clone(state), reader, writer, ends, shutdown, identity)
        .await;
}

/// The common name (the last CN attribute) of a DER certificate's subject, as RabbitMQ's
/// `ssl_cert_login_from = common_name` takes it. rustls has verified the certificate; this reads
/// only as much DER as it needs and gives up (`None`) on anything unexpected.
pub(crate) fn common_name(cert: &[u8]) -> Option<String> {
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    let (_, certificate, _) = der(cert)?;
    let (_, tbs, _) = der(certificate)?;
    let mut rest = tbs;
    // [0] version (optional), serial, signature algorithm, issuer, validity, subject.
    let mut fields = Vec::with_capacity(6);
    while fields.len() < 6 {
        let (tag, body, after) = der(rest)?;
        if fields.is_empty() && tag != 0xa0 {
            fields.push(&[][..]); // no explicit version
        }
        fields.push(body);
        rest = after;
    }
    let mut subject = fields[5];
    let mut name = None;
    while !subject.is_empty() {
        let (_, set, after) = der(subject)?;
        subject = after;
        let mut attributes = set;
        while !attributes.is_empty() {
            let (_, attribute, next) = der(attributes)?;
            attributes = next;
            let (oid_tag, oid, value) = der(attribute)?;
            if oid_tag == 0x06 && oid == CN {
                let (_, text, _) = der(value)?;
                name = Some(String::from_utf8_lossy(text).into_owned());
            }
        }
    }
    name
}

/// One DER element: (tag, contents, what follows).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let octets = usize::from(first & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let len = rest[..octets]
            .iter()
            .fold(0usize, |n, &b| (n << 8) | usize::from(b));
        (len, &rest[octets..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_name_is_read_from_the_subject() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "dwellmq");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(common_name(cert.der()), Some("alice".to_string()));

        let mut no_cn = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        no_cn.distinguished_name = rcgen::DistinguishedName::new();
        let cert = no_cn.self_signed(&key).unwrap();
        assert_eq!(common_name(cert.der()), None);
    }

    #[test]
    fn der_garbage_has_no_common_name() {
        assert_eq!(common_name(&[]), None);
        assert_eq!(common_name(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]), None);
        assert_eq!(common_name(&[0x30, 0x03, 0x30, 0x01]), None);
    }
}
