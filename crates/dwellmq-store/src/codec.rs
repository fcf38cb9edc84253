//! The byte encodings of keys and values (DESIGN.md documents each record): big-endian
//! integers, so that keys compare in numeric order byte by byte, and length-prefixed strings, so
//! that a key's components never run into each other.

/// Appends fields to a buffer.
#[derive(Debug, Default)]
pub(crate) struct Enc {
    pub(crate) buf: Vec<u8>,
}

impl Enc {
    pub(crate) fn new() -> Self {
        Enc::default()
    }

    pub(crate) fn u8(mut self, v: u8) -> Self {
        self.buf.push(v);
        self
    }

    pub(crate) fn u32(mut self, v: u32) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn u64(mut self, v: u64) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub(crate) fn i64(mut self, v: i64) -> Self {
        self.buf.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// A string of at most 65,535 octets (names are at most 255 in AMQP; a longer one is cut).
    pub(crate) fn str16(mut self, v: &str) -> Self {
        let bytes = &v.as_bytes()[..v.len().min(usize::from(u16::MAX))];
        self.buf
            .extend_from_slice(&(bytes.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(bytes);
        self
    }

    /// Octets of any length below 4 GiB.
    pub(crate) fn bytes32(mut self, v: &[u8]) -> Self {
        self.buf.extend_from_slice(&(v.len() as u32).to_be_bytes());
        self.buf.extend_from_slice(v);
        self
    }

    pub(crate) fn done(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads fields back; every read is checked (a store may hand back any bytes).
#[derive(Debug)]
pub(crate) struct Dec<'a> {
    rest: &'a [u8],
}

impl<'a> Dec<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Dec { rest: bytes }
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    pub(crate) fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    pub(crate) fn str16(&mut self) -> Option<String> {
        let len = usize::from(self.u16()?);
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).ok()
    }

    pub(crate) fn bytes32(&mut self) -> Option<Vec<u8>> {
        let len = usize::try_from(self.u32()?).ok()?;
        Some(self.take(len)?.to_vec())
    }

    /// Everything left.
    pub(crate) fn rest(self) -> &'a [u8] {
        self.rest
    }

    /// Whether every octet was read (a record with trailing octets is malformed).
    pub(crate) fn end(&self) -> Option<()> {
        self.rest.is_empty().then_some(())
    }
}

/// A key in hex, for error messages.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_truncation_is_caught() {
        let bytes = Enc::new()
            .u8(7)
            .u32(0xDEAD_BEEF)
            .u64(u64::MAX - 1)
            .i64(-5)
            .str16("vhost/é")
            .bytes32(b"\x00\x01")
            .done();
        let mut d = Dec::new(&bytes);
        assert_eq!(d.u8(), Some(7));
        assert_eq!(d.u32(), Some(0xDEAD_BEEF));
        assert_eq!(d.u64(), Some(u64::MAX - 1));
        assert_eq!(d.i64(), Some(-5));
        assert_eq!(d.str16().as_deref(), Some("vhost/é"));
        assert_eq!(d.bytes32().as_deref(), Some(&b"\x00\x01"[..]));
        assert_eq!(d.end(), Some(()));
        for cut in 0..bytes.len() {
            let mut d = Dec::new(&bytes[..cut]);
            let whole = (|| {
                d.u8()?;
                d.u32()?;
                d.u64()?;
                d.i64()?;
                d.str16()?;
                d.bytes32()?;
                Some(())
            })();
            assert!(whole.is_none(), "a record cut at {cut} decoded");
        }
    }

    #[test]
    fn big_endian_keys_sort_numerically() {
        let a = Enc::new().u64(255).u64(9).done();
        let b = Enc::new().u64(256).u64(0).done();
        assert!(a < b);
    }
}
