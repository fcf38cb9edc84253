//! How held messages look from outside: their ids and what listing shows of them.

use std::fmt;
use std::str::FromStr;

use dwellmq_codec::FieldTable;

/// Identifies a held message: its due time and its place in publish order.
///
/// Carrying the due time lets a cancel go straight to the message without an id index that
/// every release would have to update. Printed and parsed as `<due_ms>-<sequence>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DelayedId {
    pub(crate) due_ms: u64,
    pub(crate) seq: u64,
}

impl fmt::Display for DelayedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.due_ms, self.seq)
    }
}

/// A string that is not `<due_ms>-<sequence>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a delayed message id looks like <due_ms>-<sequence>, e.g. 1796063538749-42")]
pub struct ParseDelayedIdError;

impl FromStr for DelayedId {
    type Err = ParseDelayedIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (due, seq) = s.split_once('-').ok_or(ParseDelayedIdError)?;
        Ok(DelayedId {
            due_ms: due.parse().map_err(|_| ParseDelayedIdError)?,
            seq: seq.parse().map_err(|_| ParseDelayedIdError)?,
        })
    }
}

/// A held message as the inspection API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DelayedMessageInfo {
    /// Id for [`crate::BrokerHandle::cancel_delayed`].
    pub id: DelayedId,
    /// When it will be routed, milliseconds since the Unix epoch.
    pub due_ms: u64,
    /// The routing key it was published with.
    pub routing_key: String,
    /// Its headers (with `x-delay` already set to the negated delay, as it will be delivered).
    pub headers: Option<FieldTable>,
    /// Body size in octets.
    pub body_size: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_and_parse_back() {
        let id = DelayedId {
            due_ms: 1_796_063_538_749,
            seq: 42,
        };
        assert_eq!(id.to_string(), "1796063538749-42");
        assert_eq!("1796063538749-42".parse(), Ok(id));
        for bad in ["", "12", "a-1", "1-b", "1-2-3", "-1"] {
            assert_eq!(bad.parse::<DelayedId>(), Err(ParseDelayedIdError), "{bad}");
        }
    }
}
