//! The content header frame and the 14 `basic` properties.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{CodecError, Malformed};
use crate::field::FieldTable;
use crate::primitives::{
    get_shortstr, get_table, get_u16, get_u64, get_u8, put_shortstr, put_table,
};
use crate::short_str::ShortStr;

/// The properties of a `basic` message; `None` means the flag bit is clear.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BasicProperties {
    /// MIME content type.
    pub content_type: Option<ShortStr>,
    /// MIME content encoding.
    pub content_encoding: Option<ShortStr>,
    /// Application headers.
    pub headers: Option<FieldTable>,
    /// 1 = transient, 2 = persistent.
    pub delivery_mode: Option<u8>,
    /// Priority 0-9.
    pub priority: Option<u8>,
    /// Application correlation identifier.
    pub correlation_id: Option<ShortStr>,
    /// Address to reply to.
    pub reply_to: Option<ShortStr>,
    /// Per-message TTL in milliseconds, as a decimal string.
    pub expiration: Option<ShortStr>,
    /// Application message identifier.
    pub message_id: Option<ShortStr>,
    /// Message timestamp, seconds since the epoch.
    pub timestamp: Option<u64>,
    /// Message type name.
    pub kind: Option<ShortStr>,
    /// Creating user id.
    pub user_id: Option<ShortStr>,
    /// Creating application id.
    pub app_id: Option<ShortStr>,
    /// Deprecated `cluster-id` (the spec's `reserved`), carried through untouched.
    pub cluster_id: Option<ShortStr>,
}

// Property flag bits, most significant first, in wire order.
const CONTENT_TYPE: u16 = 1 << 15;
const CONTENT_ENCODING: u16 = 1 << 14;
const HEADERS: u16 = 1 << 13;
const DELIVERY_MODE: u16 = 1 << 12;
const PRIORITY: u16 = 1 << 11;
const CORRELATION_ID: u16 = 1 << 10;
const REPLY_TO: u16 = 1 << 9;
const EXPIRATION: u16 = 1 << 8;
const MESSAGE_ID: u16 = 1 << 7;
const TIMESTAMP: u16 = 1 << 6;
const KIND: u16 = 1 << 5;
const USER_ID: u16 = 1 << 4;
const APP_ID: u16 = 1 << 3;
const CLUSTER_ID: u16 = 1 << 2;
/// Bit 0 says another flag word follows; `basic` has no properties for it.
const CONTINUATION: u16 = 1;

impl BasicProperties {
    /// Whether `delivery_mode` is 2 (persistent).
    pub fn is_persistent(&self) -> bool {
        self.delivery_mode == Some(2)
    }

    fn flags(&self) -> u16 {
        let bit = |present: bool, flag: u16| if present { flag } else { 0 };
        bit(self.content_type.is_some(), CONTENT_TYPE)
            | bit(self.content_encoding.is_some(), CONTENT_ENCODING)
            | bit(self.headers.is_some(), HEADERS)
            | bit(self.delivery_mode.is_some(), DELIVERY_MODE)
            | bit(self.priority.is_some(), PRIORITY)
            | bit(self.correlation_id.is_some(), CORRELATION_ID)
            | bit(self.reply_to.is_some(), REPLY_TO)
            | bit(self.expiration.is_some(), EXPIRATION)
            | bit(self.message_id.is_some(), MESSAGE_ID)
            | bit(self.timestamp.is_some(), TIMESTAMP)
            | bit(self.kind.is_some(), KIND)
            | bit(self.user_id.is_some(), USER_ID)
            | bit(self.app_id.is_some(), APP_ID)
            | bit(self.cluster_id.is_some(), CLUSTER_ID)
    }

    /// Appends the property-flags word and the present properties.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u16(self.flags());
        let s = |out: &mut BytesMut, v: &Option<ShortStr>| {
            if let Some(v) = v {
                put_shortstr(out, v);
            }
        };
        s(out, &self.content_type);
        s(out, &self.content_encoding);
        if let Some(h) = &self.headers {
            put_table(out, h);
        }
        if let Some(v) = self.delivery_mode {
            out.put_u8(v);
        }
        if let Some(v) = self.priority {
            out.put_u8(v);
        }
        s(out, &self.correlation_id);
        s(out, &self.reply_to);
        s(out, &self.expiration);
        s(out, &self.message_id);
        if let Some(v) = self.timestamp {
            out.put_u64(v);
        }
        s(out, &self.kind);
        s(out, &self.user_id);
        s(out, &self.app_id);
        s(out, &self.cluster_id);
    }

    /// Decodes properties in the form [`BasicProperties::encode`] writes (flags word first).
    /// Strings and tables are slices of `encoded`.
    pub fn decode(encoded: &Bytes) -> Result<Self, CodecError> {
        let mut properties = BasicProperties::default();
        let mut i: &[u8] = encoded;
        properties
            .decode_into(encoded, &mut i)
            .map_err(|_| CodecError::MalformedContentHeader)?;
        Ok(properties)
    }

    /// Reads the property-flags word(s) and the properties they announce.
    ///
    /// Fills `self` (all `None` on entry) in place: the struct is large, and building it field
    /// by field in its final location avoids copying it around on the publish hot path.
    #[inline]
    pub(crate) fn decode_into(&mut self, base: &Bytes, i: &mut &[u8]) -> Result<(), Malformed> {
        let flags = get_u16(base, i)?;
        if flags & CONTINUATION != 0 {
            while get_u16(base, i)? & CONTINUATION != 0 {}
        }
        if flags & !CONTINUATION == 0 {
            return Ok(());
        }
        // A macro rather than a closure: eleven calls on the publish path, each a flag test.
        macro_rules! s {
            ($field:ident, $flag:expr) => {
                if flags & $flag != 0 {
                    self.$field = Some(get_shortstr(base, i)?);
                }
            };
        }
        s!(content_type, CONTENT_TYPE);
        s!(content_encoding, CONTENT_ENCODING);
        if flags & HEADERS != 0 {
            self.headers = Some(get_table(base, i)?);
        }
        if flags & DELIVERY_MODE != 0 {
            self.delivery_mode = Some(get_u8(base, i)?);
        }
        if flags & PRIORITY != 0 {
            self.priority = Some(get_u8(base, i)?);
        }
        s!(correlation_id, CORRELATION_ID);
        s!(reply_to, REPLY_TO);
        s!(expiration, EXPIRATION);
        s!(message_id, MESSAGE_ID);
        if flags & TIMESTAMP != 0 {
            self.timestamp = Some(get_u64(base, i)?);
        }
        s!(kind, KIND);
        s!(user_id, USER_ID);
        s!(app_id, APP_ID);
        s!(cluster_id, CLUSTER_ID);
        Ok(())
    }
}

/// A content header frame's payload.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContentHeader {
    /// The class of the method the content belongs to (60 for `basic`).
    pub class_id: u16,
    /// Total size of the body frames that follow.
    pub body_size: u64,
    /// The message properties.
    pub properties: BasicProperties,
}

impl ContentHeader {
    /// Decodes a content header frame's payload.
    pub fn decode(payload: &Bytes) -> Result<Self, CodecError> {
        let mut header = ContentHeader::default();
        header.decode_into(payload)?;
        Ok(header)
    }

    /// Decodes a content header frame's payload into `self`, which must be the default value.
    #[inline]
    pub(crate) fn decode_into(&mut self, payload: &Bytes) -> Result<(), CodecError> {
        let mut i: &[u8] = payload;
        let malformed = |_| CodecError::MalformedContentHeader;
        self.class_id = get_u16(payload, &mut i).map_err(malformed)?;
        let _weight = get_u16(payload, &mut i).map_err(malformed)?;
        self.body_size = get_u64(payload, &mut i).map_err(malformed)?;
        self.properties
            .decode_into(payload, &mut i)
            .map_err(malformed)
    }

    /// Appends the payload: class id, weight 0, body size, properties.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u16(self.class_id);
        out.put_u16(0);
        out.put_u64(self.body_size);
        self.properties.encode(out);
    }
}
