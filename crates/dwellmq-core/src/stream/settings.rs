//! What a stream is configured with: its arguments combined with the policy that applies.

use crate::arguments::StreamArguments;
use crate::policy::PolicyDefinition;

/// RabbitMQ's default `x-stream-max-segment-size-bytes`: 500,000,000 octets.
pub const DEFAULT_SEGMENT_BYTES: u64 = 500_000_000;

/// How many in-memory index entries (chunks) a full segment has at most: a timestamp lookup
/// reads at most about a segment's sixteenth to find its first message.
pub const CHUNKS_PER_SEGMENT: u64 = 16;

/// Octets a store read brings back at most (at least one record): a consumer's window is its
/// prefetch, and no more than this per read.
pub const DEFAULT_READ_BYTES: u64 = 4 << 20;

/// A stream's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSettings {
    /// `max-length-bytes`: whole segments go from the head while the log holds more octets
    /// (the last segment always stays).
    pub max_length_bytes: Option<u64>,
    /// `max-age` in ms: whole segments whose newest message is older go (the last stays).
    pub max_age_ms: Option<u64>,
    /// `stream-max-segment-size-bytes`: a segment takes no more appends once it holds this
    /// many octets (it may end one record over).
    pub max_segment_bytes: u64,
    /// Octets per read (see [`DEFAULT_READ_BYTES`]).
    pub read_bytes: u64,
}

impl Default for StreamSettings {
    fn default() -> Self {
        StreamSettings {
            max_length_bytes: None,
            max_age_ms: None,
            max_segment_bytes: DEFAULT_SEGMENT_BYTES,
            read_bytes: DEFAULT_READ_BYTES,
        }
    }
}

impl StreamSettings {
    /// The settings a stream declared with `args` runs with under `policy` (the policy that
    /// applies to it, if any: see [`PolicyDefinition::applies_to_streams`]). For streams a
    /// policy's value wins over the argument's (`rabbit_stream_queue`'s
    /// `policy_precedence/2`), unlike classic queues' lower-of-the-two.
    pub fn effective(args: &StreamArguments, policy: Option<&PolicyDefinition>) -> Self {
        let policy = policy.filter(|p| p.applies_to_streams());
        let max_segment_bytes = policy
            .and_then(|p| p.stream_max_segment_size_bytes)
            .or(args.max_segment_size_bytes)
            .unwrap_or(DEFAULT_SEGMENT_BYTES);
        StreamSettings {
            max_length_bytes: policy
                .and_then(|p| p.max_length_bytes)
                .or(args.max_length_bytes),
            max_age_ms: policy
                .and_then(PolicyDefinition::max_age_ms)
                .or(args.max_age_ms),
            // A segment of 0 octets would start one per message; one per record is the least.
            max_segment_bytes: max_segment_bytes.max(1),
            read_bytes: DEFAULT_READ_BYTES,
        }
    }

    /// Octets of one chunk (an in-memory index entry) at most.
    pub(crate) fn chunk_bytes(&self) -> u64 {
        (self.max_segment_bytes / CHUNKS_PER_SEGMENT).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicyValue;

    #[test]
    fn a_policy_value_wins_over_the_argument() {
        let args = StreamArguments {
            max_length_bytes: Some(1000),
            max_age_ms: Some(60_000),
            max_segment_size_bytes: Some(100),
        };
        let policy = PolicyDefinition::from_entries([
            ("max-length-bytes", PolicyValue::Integer(5000)),
            ("max-age", PolicyValue::Text("1h".into())),
        ])
        .unwrap();
        let s = StreamSettings::effective(&args, Some(&policy));
        assert_eq!(s.max_length_bytes, Some(5000));
        assert_eq!(s.max_age_ms, Some(3_600_000));
        assert_eq!(s.max_segment_bytes, 100);
        assert_eq!(
            StreamSettings::effective(&args, None).max_length_bytes,
            Some(1000)
        );
    }

    #[test]
    fn a_policy_streams_do_not_take_is_ignored() {
        let policy = PolicyDefinition::from_entries([
            ("max-length-bytes", PolicyValue::Integer(5000)),
            ("message-ttl", PolicyValue::Integer(5)),
        ])
        .unwrap();
        let s = StreamSettings::effective(&StreamArguments::default(), Some(&policy));
        assert_eq!(s.max_length_bytes, None);
        assert_eq!(s.max_segment_bytes, DEFAULT_SEGMENT_BYTES);
    }
}
