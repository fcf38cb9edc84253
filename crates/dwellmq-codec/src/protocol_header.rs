//! The 8-octet protocol header a client sends before any frame.

use bytes::{Buf, BytesMut};

use crate::constants::PROTOCOL_HEADER;

/// What the client announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolHeader {
    /// `AMQP\0\0\x09\x01`: the protocol we speak.
    Amqp091,
    /// Anything else (another AMQP version, or not AMQP at all). The spec requires the server
    /// to answer with its own header and close the socket.
    Other([u8; 8]),
}

/// Takes the protocol header off the front of `buf`; `None` until 8 octets are buffered.
///
/// A peer that is obviously not speaking AMQP (e.g. HTTP) is recognised as soon as its first
/// octets differ from `AMQP`, so the server need not wait for 8 octets that may never come.
pub fn decode_protocol_header(buf: &mut BytesMut) -> Option<ProtocolHeader> {
    let seen = buf.len().min(4);
    if buf.len() < 8 && buf[..seen] == PROTOCOL_HEADER[..seen] {
        return None;
    }
    let mut raw = [0u8; 8];
    let n = buf.len().min(8);
    raw[..n].copy_from_slice(&buf[..n]);
    buf.advance(n);
    if &raw == PROTOCOL_HEADER {
        Some(ProtocolHeader::Amqp091)
    } else {
        Some(ProtocolHeader::Other(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_eight_octets_of_a_plausible_header() {
        let mut buf = BytesMut::from(&b"AMQP\x00"[..]);
        assert_eq!(decode_protocol_header(&mut buf), None);
        buf.extend_from_slice(b"\x00\x09\x01");
        assert_eq!(
            decode_protocol_header(&mut buf),
            Some(ProtocolHeader::Amqp091)
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn recognises_other_versions_and_non_amqp_peers() {
        let mut buf = BytesMut::from(&b"AMQP\x01\x01\x00\x0a"[..]);
        assert!(matches!(
            decode_protocol_header(&mut buf),
            Some(ProtocolHeader::Other(_))
        ));
        let mut buf = BytesMut::from(&b"GET "[..]);
        assert!(matches!(
            decode_protocol_header(&mut buf),
            Some(ProtocolHeader::Other(_))
        ));
    }
}
