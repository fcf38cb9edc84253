//! AMQP over TLS with lapin (`amqps://`): certificates generated here with rcgen (a CA, the
//! server's for `localhost`, clients' by common name), the server's certificate verified by the
//! client, client certificates verified by the server with `verify_peer`, and the EXTERNAL
//! mechanism logging in as the certificate's CN.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dwellmq::{Broker, BrokerConfig, BrokerHandle, StartError, TlsConfig, TlsVerify};
use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::tcp::{OwnedIdentity, OwnedTLSConfig};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A CA with a server certificate and client certificates, as PEM files in a directory.
struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    fn new() -> Pki {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "dwellmq-tls-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "dwellmq test CA");
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        let pki = Pki { dir, ca };
        let (cert, key) = pki.issue("localhost", true);
        std::fs::write(pki.path("server.pem"), cert).unwrap();
        std::fs::write(pki.path("server.key"), key).unwrap();
        pki
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A certificate (PEM) and its PKCS#8 key (PEM) for `common_name`, signed by the CA.
    fn issue(&self, common_name: &str, server: bool) -> (String, String) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        if server {
            params
                .subject_alt_names
                .push(SanType::DnsName("localhost".try_into().unwrap()));
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    fn tls(&self, verify: TlsVerify, fail_if_no_peer_cert: bool) -> TlsConfig {
        TlsConfig {
            cacertfile: Some(self.path("ca.pem")),
            verify,
            fail_if_no_peer_cert,
            ..TlsConfig::new(
                "127.0.0.1:0".parse().unwrap(),
                self.path("server.pem"),
                self.path("server.key"),
            )
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn broker(tls: TlsConfig) -> BrokerHandle {
    let config = BrokerConfig {
        tls: Some(tls),
        ..BrokerConfig::ephemeral()
    };
    Broker::start(config).await.expect("broker starts with TLS")
}

/// `amqps://` to the broker's TLS port by name (the certificate is for `localhost`).
fn url(broker: &BrokerHandle, credentials: &str, query: &str) -> String {
    let port = broker.tls_local_addr().unwrap().port();
    format!("amqps://{credentials}localhost:{port}/%2f{query}")
}

async fn connect(url: &str, tls: OwnedTLSConfig) -> lapin::Result<Connection> {
    let runtime = lapin::runtime::default_runtime()?;
    Connection::connect_with_config(url, ConnectionProperties::default(), tls, runtime).await
}

fn trusting(pki: &Pki) -> OwnedTLSConfig {
    OwnedTLSConfig {
        identity: None,
        cert_chain: Some(pki.ca_pem()),
    }
}

fn with_identity(pki: &Pki, common_name: &str) -> OwnedTLSConfig {
    let (pem, key) = pki.issue(common_name, false);
    OwnedTLSConfig {
        identity: Some(OwnedIdentity::PKCS8 {
            pem: pem.into_bytes(),
            key: key.into_bytes(),
        }),
        cert_chain: Some(pki.ca_pem()),
    }
}

/// Declares, publishes and gets one message back over `connection`.
async fn round_trip(connection: &Connection) {
    let channel = connection.create_channel().await.unwrap();
    channel
        .queue_declare(
            "over-tls".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .basic_publish(
            "".into(),
            "over-tls".into(),
            BasicPublishOptions::default(),
            b"secret",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let message = channel
        .basic_get("over-tls".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("the message");
    assert_eq!(message.delivery.data, b"secret");
    channel.close(200, "done".into()).await.unwrap();
}

#[tokio::test]
async fn lapin_publishes_and_gets_over_amqps() {
    let pki = Pki::new();
    let broker = broker(pki.tls(TlsVerify::VerifyNone, false)).await;
    assert!(broker
        .amqps_url()
        .unwrap()
        .starts_with("amqps://127.0.0.1:"));
    let connection = connect(&url(&broker, "guest:guest@", ""), trusting(&pki))
        .await
        .expect("TLS connection");
    round_trip(&connection).await;
    connection.close(200, "bye".into()).await.unwrap();
    // The plain listener serves as before, alongside.
    let plain = Connection::connect(
        &format!("{}/%2f", broker.amqp_url()),
        ConnectionProperties::default(),
    )
    .await
    .unwrap();
    plain.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_certificate_is_not_served() {
    let pki = Pki::new();
    let broker = broker(pki.tls(TlsVerify::VerifyNone, false)).await;
    let other = Pki::new();
    // A certificate from another CA: the client refuses the handshake.
    let refused = connect(&url(&broker, "guest:guest@", ""), trusting(&other))
        .await
        .expect_err("refused");
    assert!(
        refused.to_string().contains("invalid peer certificate"),
        "a certificate refusal, not another failure: {refused}"
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn external_logs_in_as_the_verified_certificates_common_name() {
    let pki = Pki::new();
    let broker = broker(pki.tls(TlsVerify::VerifyPeer, true)).await;
    // guest exists (loopback only, and this is loopback): the certificate's CN names it.
    let connection = connect(
        &url(&broker, "", "?auth_mechanism=external"),
        with_identity(&pki, "guest"),
    )
    .await
    .expect("EXTERNAL login as guest");
    round_trip(&connection).await;
    connection.close(200, "bye".into()).await.unwrap();

    // A CN that names no user is refused, as RabbitMQ does (403 ACCESS_REFUSED).
    let refused = connect(
        &url(&broker, "", "?auth_mechanism=external"),
        with_identity(&pki, "nobody"),
    )
    .await
    .expect_err("unknown user refused");
    assert_eq!(
        crate::common::amqp_error(&refused),
        (
            403,
            "ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL. \
             User 'nobody' does not exist"
                .into()
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn fail_if_no_peer_cert_refuses_clients_without_one() {
    let pki = Pki::new();
    let broker = broker(pki.tls(TlsVerify::VerifyPeer, true)).await;
    let refused = connect(&url(&broker, "guest:guest@", ""), trusting(&pki))
        .await
        .expect_err("refused");
    // The server asks for a certificate during the handshake and ends it with TLS 1.3's
    // certificate_required alert when none comes.
    assert!(
        refused.to_string().contains("CertificateRequired"),
        "the handshake refused for want of a certificate: {refused}"
    );
    broker.shutdown().await;

    // Without fail_if_no_peer_cert, a client without a certificate logs in with a password,
    // and EXTERNAL is not offered to it.
    let broker = self::broker(pki.tls(TlsVerify::VerifyPeer, false)).await;
    let connection = connect(&url(&broker, "guest:guest@", ""), trusting(&pki))
        .await
        .expect("password login without a client certificate");
    round_trip(&connection).await;
    connection.close(200, "bye".into()).await.unwrap();
    let refused = connect(
        &url(&broker, "", "?auth_mechanism=external"),
        trusting(&pki),
    )
    .await
    .expect_err("refused");
    // EXTERNAL is not among the mechanisms offered without a verified certificate: RabbitMQ's
    // answer to a mechanism it does not offer.
    assert_eq!(
        crate::common::amqp_error(&refused),
        (
            403,
            "ACCESS_REFUSED - unsupported authentication mechanism 'EXTERNAL'".into()
        )
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn unusable_tls_settings_stop_the_start_with_a_clear_error() {
    let pki = Pki::new();
    let mut tls = pki.tls(TlsVerify::VerifyNone, false);
    tls.keyfile = pki.path("missing.key");
    let error = Broker::start(BrokerConfig {
        tls: Some(tls),
        ..BrokerConfig::ephemeral()
    })
    .await
    .err()
    .expect("refused");
    assert!(matches!(error, StartError::Tls(_)));
    assert!(error.to_string().contains("keyfile"), "{error}");

    let mut tls = pki.tls(TlsVerify::VerifyPeer, false);
    tls.cacertfile = None;
    let error = Broker::start(BrokerConfig {
        tls: Some(tls),
        ..BrokerConfig::ephemeral()
    })
    .await
    .err()
    .expect("refused");
    assert!(error.to_string().contains("cacertfile"), "{error}");
}

/// Reads until the broker closes `stream` (EOF or reset) and returns what it sent first.
async fn read_until_closed(stream: &mut tokio::net::TcpStream, within: Duration) -> Vec<u8> {
    let mut sent = Vec::new();
    let mut chunk = [0u8; 4096];
    tokio::time::timeout(within, async {
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => sent.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await
    .expect("the broker closes the socket");
    sent
}

/// A TLS alert record (content type 21), as a TLS stack answers bytes it cannot accept.
fn is_tls_alert(record: &[u8]) -> bool {
    record.first() == Some(&0x15) && record.get(1) == Some(&0x03)
}

#[tokio::test]
async fn plaintext_amqp_on_the_tls_port_is_refused_and_the_broker_serves_on() {
    let pki = Pki::new();
    let broker = broker(pki.tls(TlsVerify::VerifyNone, false)).await;
    let mut plain = tokio::net::TcpStream::connect(broker.tls_local_addr().unwrap())
        .await
        .unwrap();
    plain
        .write_all(crate::common::raw::AMQP_0_9_1)
        .await
        .unwrap();
    // Not an AMQP conversation (no protocol header back, no connection.start): at most a TLS
    // alert, and the socket closes at once, well before the 10 s handshake timeout.
    let answer = read_until_closed(&mut plain, Duration::from_secs(5)).await;
    assert!(
        answer.is_empty() || is_tls_alert(&answer),
        "a TLS refusal, not {answer:?}"
    );
    let connection = connect(&url(&broker, "guest:guest@", ""), trusting(&pki))
        .await
        .expect("TLS clients are served after the refusal");
    round_trip(&connection).await;
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn a_client_certificate_from_another_ca_is_refused_even_with_a_password() {
    let pki = Pki::new();
    let other = Pki::new();
    // verify_peer without fail_if_no_peer_cert: a client without a certificate may log in with
    // a password, but a certificate the CA did not sign fails the handshake (as with Erlang's
    // ssl under verify_peer), whatever credentials follow.
    let broker = broker(pki.tls(TlsVerify::VerifyPeer, false)).await;
    let (pem, key) = other.issue("guest", false);
    let foreign = OwnedTLSConfig {
        identity: Some(OwnedIdentity::PKCS8 {
            pem: pem.into_bytes(),
            key: key.into_bytes(),
        }),
        // The client trusts the server: only its own certificate is wrong.
        cert_chain: Some(pki.ca_pem()),
    };
    let refused = connect(&url(&broker, "guest:guest@", ""), foreign)
        .await
        .expect_err("refused");
    // The server's alert: UnknownCA for an issuer it has never heard of; here the other CA
    // bears the same name as the trusted one, so the chain's signature is what fails.
    let refused = refused.to_string();
    assert!(
        refused.contains("received fatal alert: DecryptError")
            || refused.contains("received fatal alert: UnknownCA"),
        "the handshake refused for the certificate's issuer: {refused}"
    );
    // The same login with a certificate from the broker's CA is served.
    let connection = connect(
        &url(&broker, "guest:guest@", ""),
        with_identity(&pki, "guest"),
    )
    .await
    .expect("a certificate from the right CA");
    round_trip(&connection).await;
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn a_stalled_tls_handshake_is_dropped_after_the_handshake_timeout_and_others_are_served() {
    let pki = Pki::new();
    // Long, so that the other client is surely served within it however slow the machine;
    // the test then moves tokio's clock over it rather than waiting (the broker runs on the
    // test's runtime, whose timers the paused clock drives).
    let handshake_timeout = Duration::from_secs(60);
    let broker = Broker::start(BrokerConfig {
        tls: Some(pki.tls(TlsVerify::VerifyNone, false)),
        limits: dwellmq::Limits {
            handshake_timeout,
            ..dwellmq::Limits::default()
        },
        ..BrokerConfig::ephemeral()
    })
    .await
    .unwrap();
    let mut stalled = tokio::net::TcpStream::connect(broker.tls_local_addr().unwrap())
        .await
        .unwrap();
    let opened = tokio::time::Instant::now();
    // The start of a ClientHello record (handshake, TLS 1.0 record version, 512 octets
    // announced), then nothing more.
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    // Meanwhile another client is served from start to finish.
    let connection = connect(&url(&broker, "guest:guest@", ""), trusting(&pki))
        .await
        .expect("served while a handshake stalls");
    round_trip(&connection).await;
    connection.close(200, "bye".into()).await.unwrap();
    // ... while the stalled one was still waiting, its socket open: handshakes do not queue
    // behind one another.
    let mut octet = [0u8; 1];
    assert!(
        matches!(stalled.try_read(&mut octet), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the stalled handshake was still pending when the other client was done"
    );
    // The stalled one is dropped, silently, once its handshake timeout has passed: the clock
    // is moved to it (the broker's timer fires in order), then real time resumes.
    tokio::time::pause();
    tokio::time::advance(handshake_timeout.saturating_sub(opened.elapsed())).await;
    let answer = read_until_closed(&mut stalled, Duration::from_secs(10)).await;
    assert!(
        opened.elapsed() >= handshake_timeout,
        "dropped after {:?}, before the handshake timeout",
        opened.elapsed()
    );
    tokio::time::resume();
    assert!(
        answer.is_empty(),
        "nothing sent to a stalled peer: {answer:?}"
    );
    let connection = connect(&url(&broker, "guest:guest@", ""), trusting(&pki))
        .await
        .expect("served after the drop");
    round_trip(&connection).await;
    connection.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;
}
