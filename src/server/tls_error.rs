//! The errors of TLS settings, in every build: `StartError::Tls` carries one, so the public
//! API is the same with and without the `tls` feature.

/// Why the TLS settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read or holds no usable PEM.
    #[error("tls: cannot read {what} '{path}': {reason}")]
    File {
        /// `certfile`, `keyfile` or `cacertfile`.
        what: &'static str,
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// `verify = verify_peer` needs `cacertfile`.
    #[error("tls: verify = verify_peer needs a cacertfile to verify client certificates with")]
    NoCaCertFile,
    /// rustls refused the configuration (a key that does not match the certificate, say).
    #[error("tls: {0}")]
    Rustls(String),
}
