//! Connection negotiation: protocol header, start/start-ok (authentication), tune, open.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use dwellmq_codec::methods::{ConnectionStart, ConnectionTune};
use dwellmq_codec::{
    constants::{FRAME_MIN_SIZE, FRAME_OVERHEAD, PROTOCOL_HEADER},
    decode_protocol_header, FieldTable, FieldValue, Method, ProtocolHeader,
};
use dwellmq_core::BrokerError;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::frames::{read_frame, Fault, FaultOrExit};
use super::outbound::Outbound;
use crate::broker::vhost::VHost;
use crate::broker::BrokerState;
use crate::config::Limits;

/// The AMQP 0-9 protocol header. RabbitMQ serves it as 0-9-1 (the two differ in nothing a
/// client notices), and so does dwellmq.
const AMQP_0_9_HEADER: [u8; 8] = *b"AMQP\x01\x01\x00\x09";

/// What the client negotiated.
pub(crate) struct Negotiated {
    pub(crate) user: String,
    pub(crate) vhost: Arc<VHost>,
    pub(crate) frame_max: u32,
    pub(crate) channel_max: u16,
    pub(crate) heartbeat_secs: u16,
    pub(crate) capabilities: ClientCapabilities,
    /// What the client said about itself (product, version, platform...).
    pub(crate) client_properties: FieldTable,
}

/// Extensions the client announced in `client-properties.capabilities`.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ClientCapabilities {
    pub(crate) consumer_cancel_notify: bool,
    pub(crate) connection_blocked: bool,
}

/// Runs the handshake up to `connection.open-ok`.
///
/// `Ok(None)`: the peer spoke another protocol (our header has been queued) or left.
pub(crate) async fn negotiate<R: AsyncRead + Unpin>(
    state: &Arc<BrokerState>,
    reader: &mut R,
    buf: &mut BytesMut,
    outbound: &Outbound,
    peer: SocketAddr,
    external: Option<&str>,
) -> Result<Option<Negotiated>, FaultOrExit> {
    let mut handshake = Handshake {
        state,
        reader,
        buf,
        outbound,
    };
    if !handshake.protocol_header().await? {
        return Ok(None);
    }
    let limits = &state.config.limits;
    // Before tuning, frames are held to what the server will offer.
    let offered_frame_max = effective_frame_max(limits.frame_max, limits);
    let Some(started) = handshake.start(peer, external, offered_frame_max).await? else {
        return Ok(None);
    };
    let Some(tuned) = handshake.tune(offered_frame_max).await? else {
        return Ok(None);
    };
    let Some(vhost) = handshake.open(&started.user, tuned.frame_max).await? else {
        return Ok(None);
    };
    outbound.send_method(0, &Method::ConnectionOpenOk);
    Ok(Some(Negotiated {
        user: started.user,
        vhost,
        frame_max: tuned.frame_max,
        channel_max: tuned.channel_max,
        heartbeat_secs: tuned.heartbeat_secs,
        capabilities: started.capabilities,
        client_properties: started.client_properties,
    }))
}

/// The handshake's exchanges with one client: its frames read from `reader` into `buf`, ours
/// sent through `outbound`.
struct Handshake<'a, R> {
    state: &'a BrokerState,
    reader: &'a mut R,
    buf: &'a mut BytesMut,
    outbound: &'a Outbound,
}

/// What `connection.start-ok` settled: who the client is and what it can do.
struct Started {
    user: String,
    capabilities: ClientCapabilities,
    client_properties: FieldTable,
}

/// What `connection.tune-ok` settled.
struct Tuned {
    frame_max: u32,
    channel_max: u16,
    heartbeat_secs: u16,
}

impl<R: AsyncRead + Unpin> Handshake<'_, R> {
    /// Reads the protocol header: true for AMQP 0-9-1 (or 0-9); for anything else our header
    /// is queued, and false.
    async fn protocol_header(&mut self) -> Result<bool, FaultOrExit> {
        let header = loop {
            if let Some(header) = decode_protocol_header(self.buf) {
                break header;
            }
            let read = self.reader.read_buf(self.buf).await;
            if read.map_err(|_| FaultOrExit::Exit)? == 0 {
                return Ok(false);
            }
        };
        match header {
            ProtocolHeader::Amqp091 => Ok(true),
            ProtocolHeader::Other(AMQP_0_9_HEADER) => {
                tracing::debug!("AMQP 0-9 protocol header; speaking 0-9-1");
                Ok(true)
            }
            ProtocolHeader::Other(raw) => {
                tracing::debug!(?raw, "unsupported protocol header; answering with ours");
                self.outbound.with(|sink| sink.raw(PROTOCOL_HEADER));
                Ok(false)
            }
        }
    }

    /// `connection.start`, then the client's `start-ok`, authenticated.
    async fn start(
        &mut self,
        peer: SocketAddr,
        external: Option<&str>,
        frame_max: u32,
    ) -> Result<Option<Started>, FaultOrExit> {
        let mut start = server_start();
        if external.is_some() {
            // As rabbitmq_auth_mechanism_ssl: offered only to a peer with a verified certificate.
            start.mechanisms = Bytes::from_static(b"PLAIN AMQPLAIN EXTERNAL");
        }
        self.outbound
            .send_method(0, &Method::ConnectionStart(start));
        let start_ok = match read_frame(self.reader, self.buf, frame_max).await? {
            Method::ConnectionStartOk(m) => m,
            other => return unexpected(self.outbound, &other),
        };
        let capabilities = client_capabilities(&start_ok.client_properties);
        let user = match (start_ok.mechanism.as_str(), external) {
            ("EXTERNAL", Some(name)) => authenticate_external(self.state, name)?,
            _ => authenticate(self.state, &start_ok.mechanism, &start_ok.response, peer)?,
        };
        Ok(Some(Started {
            user,
            capabilities,
            client_properties: start_ok.client_properties,
        }))
    }

    /// `connection.tune`, then the client's `tune-ok`, checked as RabbitMQ checks it.
    async fn tune(&mut self, offered_frame_max: u32) -> Result<Option<Tuned>, FaultOrExit> {
        let limits = &self.state.config.limits;
        self.outbound.send_method(
            0,
            &Method::ConnectionTune(ConnectionTune {
                channel_max: limits.channel_max,
                frame_max: limits.frame_max,
                heartbeat: limits.heartbeat_secs,
            }),
        );
        let tune_ok = match read_frame(self.reader, self.buf, offered_frame_max).await? {
            Method::ConnectionTuneOk(m) => m,
            other => return unexpected(self.outbound, &other),
        };
        // As RabbitMQ's `validate_negotiated_integer_value`: frame_max first, then channel_max.
        check_tuned(
            "frame_max",
            tune_ok.frame_max,
            limits.frame_max,
            FRAME_MIN_SIZE,
        )?;
        check_tuned(
            "channel_max",
            u32::from(tune_ok.channel_max),
            u32::from(limits.channel_max),
            CHANNEL_MIN,
        )?;
        let frame_max = negotiate_limit(tune_ok.frame_max, limits.frame_max);
        // 0 on both sides means "no limit": every channel number is usable.
        let channel_max = match negotiate_limit(
            u32::from(tune_ok.channel_max),
            u32::from(limits.channel_max),
        ) {
            0 => u16::MAX,
            n => n as u16,
        };
        Ok(Some(Tuned {
            frame_max: effective_frame_max(frame_max, limits),
            channel_max,
            heartbeat_secs: tune_ok.heartbeat,
        }))
    }

    /// The client's `connection.open`: a vhost that exists and that `user` may open.
    async fn open(
        &mut self,
        user: &str,
        frame_max: u32,
    ) -> Result<Option<Arc<VHost>>, FaultOrExit> {
        let open = match read_frame(self.reader, self.buf, frame_max).await? {
            Method::ConnectionOpen(m) => m,
            other => return unexpected(self.outbound, &other),
        };
        let vhost_name = open.virtual_host.as_str();
        // RabbitMQ's vhost access: the user has permissions there (of any kind).
        let allowed = self.state.access.may_open(user, vhost_name);
        let refusal = match self.state.vhost(vhost_name) {
            Some(vhost) if allowed => return Ok(Some(vhost)),
            Some(_) => format!("access to vhost '{vhost_name}' refused for user '{user}'"),
            None => format!("vhost {vhost_name} not found"),
        };
        Err(Fault::new(BrokerError::NotAllowed(refusal), 10, 40).into())
    }
}

/// The smallest channel_max a client may ask for (RabbitMQ's `CHANNEL_MIN`); 0 means no limit.
const CHANNEL_MIN: u32 = 1;

/// A `connection.tune-ok` value the server cannot accept, refused as RabbitMQ refuses it: below
/// the minimum, or above what the server offered (where 0, "no limit", is above every limit).
/// RabbitMQ's text, and like RabbitMQ the fault names `connection.tune`.
fn check_tuned(field: &str, client: u32, server: u32, min: u32) -> Result<(), Fault> {
    let refusal = if client != 0 && client < min {
        format!("negotiated {field} = {client} is lower than the minimum allowed value ({min})")
    } else if server != 0 && (client == 0 || client > server) {
        // RabbitMQ spells out what 0 means for channel_max only.
        let detail = if client == 0 && field == "channel_max" {
            " (no limit)"
        } else {
            ""
        };
        format!(
            "negotiated {field} = {client}{detail} is higher than the maximum allowed value ({server})"
        )
    } else {
        return Ok(());
    };
    Err(Fault::new(BrokerError::NotAllowed(refusal), 10, 30))
}

/// The smaller non-zero value (0 means "no limit" on either side).
fn negotiate_limit(client: u32, server: u32) -> u32 {
    match (client, server) {
        (0, s) => s,
        (c, 0) => c,
        (c, s) => c.min(s),
    }
}

/// The frame size in force for a negotiated (or offered) `frame_max`: 0 means "no limit" in
/// AMQP, which is bounded here by the largest message accepted, so that a peer announcing a
/// huge frame cannot make the broker buffer more than one message's worth for it.
fn effective_frame_max(frame_max: u32, limits: &Limits) -> u32 {
    if frame_max != 0 {
        return frame_max;
    }
    let largest = limits
        .max_message_size
        .saturating_add(FRAME_OVERHEAD as u64);
    u32::try_from(largest)
        .unwrap_or(u32::MAX)
        .max(FRAME_MIN_SIZE)
}

/// A method out of the negotiation sequence. The client's own `connection.close` is answered
/// with `close-ok` (it is giving up, e.g. on the offered mechanisms); anything else is refused.
fn unexpected<T>(outbound: &Outbound, method: &Method) -> Result<Option<T>, FaultOrExit> {
    if let Method::ConnectionClose(close) = method {
        tracing::debug!(code = close.reply_code, text = %close.reply_text, "client closed during the handshake");
        outbound.send_method(0, &Method::ConnectionCloseOk);
        return Ok(None);
    }
    Err(Fault::new(
        BrokerError::CommandInvalid(format!(
            "expected a connection negotiation method, got {}",
            method.name()
        )),
        method.class_id(),
        method.method_id(),
    )
    .into())
}

fn server_start() -> ConnectionStart {
    let capabilities: FieldTable = [
        ("publisher_confirms", true),
        ("exchange_exchange_bindings", true),
        ("basic.nack", true),
        ("consumer_cancel_notify", true),
        ("connection.blocked", true),
        ("authentication_failure_close", true),
        ("per_consumer_qos", true),
        ("direct_reply_to", true),
    ]
    .into_iter()
    .collect();
    let mut properties = FieldTable::new();
    properties.insert("capabilities", FieldValue::Table(capabilities));
    properties.insert("product", "dwellmq");
    properties.insert("version", env!("CARGO_PKG_VERSION"));
    properties.insert("platform", "Rust");
    properties.insert("cluster_name", "dwellmq");
    properties.insert(
        "information",
        "An embedded AMQP 0-9-1 broker that does delayed messaging properly",
    );
    ConnectionStart {
        version_major: 0,
        version_minor: 9,
        server_properties: properties,
        mechanisms: Bytes::from_static(b"PLAIN AMQPLAIN"),
        locales: Bytes::from_static(b"en_US"),
    }
}

fn client_capabilities(properties: &FieldTable) -> ClientCapabilities {
    let Some(FieldValue::Table(caps)) = properties.get("capabilities") else {
        return ClientCapabilities::default();
    };
    let flag = |name: &str| matches!(caps.get(name), Some(FieldValue::Bool(true)));
    ClientCapabilities {
        consumer_cancel_notify: flag("consumer_cancel_notify"),
        connection_blocked: flag("connection.blocked"),
    }
}

/// Checks the credentials; returns the user name.
fn authenticate(
    state: &BrokerState,
    mechanism: &str,
    response: &[u8],
    peer: SocketAddr,
) -> Result<String, FaultOrExit> {
    let refused = |text: String| -> FaultOrExit {
        Fault::new(BrokerError::AccessRefused(text), 10, 11).into()
    };
    let credentials = match mechanism {
        "PLAIN" => parse_plain(response),
        "AMQPLAIN" => parse_amqplain(response),
        other => {
            return Err(refused(format!(
                "unsupported authentication mechanism '{other}'"
            )))
        }
    };
    let login_refused = || {
        refused(format!(
            "Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
        ))
    };
    let Some((name, password)) = credentials else {
        return Err(login_refused());
    };
    let Some(user) = state.user(&name) else {
        tracing::warn!(user = %name, %peer, "login refused: unknown user");
        return Err(login_refused());
    };
    if !user.check_password(&password) {
        tracing::warn!(user = %name, %peer, "login refused: invalid credentials");
        return Err(login_refused());
    }
    if user.loopback_only && !peer.ip().is_loopback() {
        tracing::warn!(user = %name, %peer, "login refused: user may only connect via localhost");
        return Err(refused(format!(
            "Login was refused using authentication mechanism {mechanism}. User '{name}' can only connect via localhost"
        )));
    }
    Ok(name)
}

/// EXTERNAL: the user named by the client certificate's common name, which must exist; no
/// password (the certificate was the proof).
fn authenticate_external(state: &BrokerState, name: &str) -> Result<String, FaultOrExit> {
    if state.user(name).is_none() {
        tracing::warn!(user = %name, "login refused: unknown user (EXTERNAL)");
        return Err(Fault::new(
            BrokerError::AccessRefused(format!(
                "Login was refused using authentication mechanism EXTERNAL. User '{name}' does not exist"
            )),
            10,
            11,
        )
        .into());
    }
    Ok(name.to_string())
}

/// PLAIN: `[authzid] NUL authcid NUL password`.
fn parse_plain(response: &[u8]) -> Option<(String, String)> {
    let mut parts = response.split(|&b| b == 0);
    let _authzid = parts.next()?;
    let user = std::str::from_utf8(parts.next()?).ok()?;
    let password = std::str::from_utf8(parts.next()?).ok()?;
    Some((user.to_string(), password.to_string()))
}

/// AMQPLAIN: a field table without its length prefix, holding LOGIN and PASSWORD.
fn parse_amqplain(response: &[u8]) -> Option<(String, String)> {
    let mut i = response;
    let (mut login, mut password) = (None, None);
    while !i.is_empty() {
        let key_len = usize::from(*i.first()?);
        let key = i.get(1..1 + key_len)?;
        i = &i[1 + key_len..];
        if *i.first()? != b'S' {
            return None;
        }
        let len = u32::from_be_bytes(i.get(1..5)?.try_into().ok()?) as usize;
        let value = std::str::from_utf8(i.get(5..5 + len)?).ok()?.to_string();
        i = &i[5 + len..];
        match key {
            b"LOGIN" => login = Some(value),
            b"PASSWORD" => password = Some(value),
            _ => {}
        }
    }
    Some((login?, password?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_with_and_without_authzid() {
        assert_eq!(
            parse_plain(b"\0guest\0secret"),
            Some(("guest".into(), "secret".into()))
        );
        assert_eq!(
            parse_plain(b"admin\0guest\0secret"),
            Some(("guest".into(), "secret".into()))
        );
        assert_eq!(parse_plain(b"guest"), None);
    }

    #[test]
    fn amqplain_table_without_length_prefix() {
        let response = b"\x05LOGINS\x00\x00\x00\x05guest\x08PASSWORDS\x00\x00\x00\x02pw";
        assert_eq!(
            parse_amqplain(response),
            Some(("guest".into(), "pw".into()))
        );
        assert_eq!(parse_amqplain(b"\x05LOGINS\x00\x00\x00\x09guest"), None);
    }

    #[test]
    fn limits_take_the_smaller_non_zero_value() {
        assert_eq!(negotiate_limit(0, 2047), 2047);
        assert_eq!(negotiate_limit(100, 2047), 100);
        assert_eq!(negotiate_limit(100, 0), 100);
        assert_eq!(negotiate_limit(0, 0), 0);
    }

    #[test]
    fn frame_max_zero_is_bounded_by_the_largest_message() {
        let limits = Limits::default();
        assert_eq!(effective_frame_max(131_072, &limits), 131_072);
        assert_eq!(
            effective_frame_max(0, &limits),
            (128 << 20) + FRAME_OVERHEAD as u32
        );
        let tiny = Limits {
            max_message_size: 10,
            ..Limits::default()
        };
        assert_eq!(effective_frame_max(0, &tiny), FRAME_MIN_SIZE);
        let huge = Limits {
            max_message_size: u64::MAX,
            ..Limits::default()
        };
        assert_eq!(effective_frame_max(0, &huge), u32::MAX);
    }

    #[test]
    fn loopback_only_users_are_refused_from_other_addresses() {
        let config = crate::config::BrokerConfig::ephemeral();
        let access = crate::broker::access::Access::from_config(&config).unwrap();
        let state = BrokerState::new(config, access);
        let remote: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        assert_eq!(
            authenticate(&state, "PLAIN", b"\0guest\0guest", local).ok(),
            Some("guest".to_string())
        );
        match authenticate(&state, "PLAIN", b"\0guest\0guest", remote) {
            Err(FaultOrExit::Fault(fault)) => {
                assert_eq!(fault.error.reply_code(), 403);
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
}
