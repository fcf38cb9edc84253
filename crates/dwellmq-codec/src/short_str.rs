//! `ShortStr`: an AMQP short string held as a UTF-8 slice of a shared buffer.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};

use bytes::Bytes;

/// An AMQP `shortstr`: at most 255 octets of UTF-8, usually a slice of the frame it was read from.
///
/// Cloning is a reference-count increment, so names and routing keys travel from the read
/// buffer to queues and deliveries without being copied. Values longer than 255 octets can be
/// built locally (e.g. a long reply text); the encoder truncates them at a character boundary.
#[derive(Clone, Default)]
pub struct ShortStr(Bytes);

impl ShortStr {
    /// The empty string.
    pub const EMPTY: ShortStr = ShortStr(Bytes::new());

    /// A string from a `'static` literal, without allocating.
    pub const fn from_static(s: &'static str) -> ShortStr {
        ShortStr(Bytes::from_static(s.as_bytes()))
    }

    /// Wraps bytes known to be UTF-8; `None` when they are not.
    #[inline]
    pub fn from_utf8(bytes: Bytes) -> Option<ShortStr> {
        // Names and routing keys are nearly always ASCII: check that inline first.
        if !bytes.is_ascii() {
            std::str::from_utf8(&bytes).ok()?;
        }
        Some(ShortStr(bytes))
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        // SAFETY: every constructor checks or guarantees UTF-8 (`from_utf8`, `&str`, `String`).
        #[allow(unsafe_code)]
        unsafe {
            std::str::from_utf8_unchecked(&self.0)
        }
    }

    /// The raw octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The underlying shared buffer.
    pub fn as_shared(&self) -> &Bytes {
        &self.0
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for ShortStr {
    fn from(s: &str) -> Self {
        ShortStr(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<String> for ShortStr {
    fn from(s: String) -> Self {
        ShortStr(Bytes::from(s))
    }
}

impl From<&String> for ShortStr {
    fn from(s: &String) -> Self {
        ShortStr::from(s.as_str())
    }
}

impl std::ops::Deref for ShortStr {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for ShortStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for ShortStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for ShortStr {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for ShortStr {}

impl PartialEq<str> for ShortStr {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ShortStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for ShortStr {
    // Must agree with `str`'s hash so that `Borrow<str>` lookups in hash maps work.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl PartialOrd for ShortStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ShortStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for ShortStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_invalid_utf8() {
        assert!(ShortStr::from_utf8(Bytes::from_static(b"\xff\xfe")).is_none());
        assert_eq!(
            ShortStr::from_utf8(Bytes::from_static(b"q1")).unwrap(),
            "q1"
        );
    }

    #[test]
    fn hash_agrees_with_str_for_map_lookups() {
        let mut map = std::collections::HashMap::new();
        map.insert(ShortStr::from("orders"), 1);
        assert_eq!(map.get("orders"), Some(&1));
    }
}
