//! The `x-stream-offset` consumer argument: where a stream consumer starts reading.

use dwellmq_codec::FieldValue;

use super::max_age::parse_max_age;
use crate::arguments::erlang_term::{type_name, write_tp};

/// Where a stream consumer starts (`x-stream-offset`, `rabbit_stream_queue:parse_offset_arg/1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The first message the log still holds.
    First,
    /// The last message committed (RabbitMQ starts at the last chunk; on one node the last
    /// message is what a client can tell apart).
    Last,
    /// Only what is published after the consumer subscribes. The default.
    Next,
    /// A numeric offset: from the first message at or after it (a negative one reads as 0,
    /// one below the log's first as the first, one beyond its end waits for it).
    Offset(u64),
    /// The first message stored at or after this time (ms since the epoch): an AMQP timestamp
    /// (seconds) times 1000.
    Timestamp {
        /// The time, in ms since the epoch.
        ms: u64,
    },
    /// The first message stored at most this long before the consumer subscribes (an interval
    /// string like `"1h"`, `"30m"`, with `x-max-age`'s units).
    Ago {
        /// The interval in ms.
        ms: u64,
    },
}

/// Reads `x-stream-offset` (absent: [`OffsetSpec::Next`]). A refusal is the reason part of
/// RabbitMQ's `invalid arg 'x-stream-offset' ...` text:
/// `{invalid_stream_offset_arg,{longstr,<<"soon">>}}`.
///
/// Forms, as RabbitMQ reads them: the strings `first`, `last` and `next`; an AMQP timestamp
/// (seconds); any other long string as an interval counted back from the subscription
/// (`"1h"`); any integer type as an offset. RabbitMQ lets other types through (a bool, a
/// float, a byte array...) and its stream reader then fails the channel; here they are refused
/// with the argument's text instead.
pub fn parse_stream_offset(value: Option<&FieldValue>) -> Result<OffsetSpec, String> {
    let Some(value) = value else {
        return Ok(OffsetSpec::Next);
    };
    let spec = match value {
        FieldValue::LongStr(b) | FieldValue::Bytes(b) if b.as_ref() == b"first" => {
            Some(OffsetSpec::First)
        }
        FieldValue::LongStr(b) | FieldValue::Bytes(b) if b.as_ref() == b"last" => {
            Some(OffsetSpec::Last)
        }
        FieldValue::LongStr(b) | FieldValue::Bytes(b) if b.as_ref() == b"next" => {
            Some(OffsetSpec::Next)
        }
        FieldValue::Timestamp(seconds) => Some(OffsetSpec::Timestamp {
            ms: seconds.saturating_mul(1000),
        }),
        FieldValue::LongStr(text) => parse_max_age(text).map(|ms| OffsetSpec::Ago { ms }),
        other => other
            .as_integer()
            .map(|n| OffsetSpec::Offset(u64::try_from(n).unwrap_or(0))),
    };
    spec.ok_or_else(|| {
        let mut reason = String::from("{invalid_stream_offset_arg,{");
        reason.push_str(type_name(value));
        reason.push(',');
        write_tp(&mut reason, value);
        reason.push_str("}}");
        reason
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parse(v: FieldValue) -> Result<OffsetSpec, String> {
        parse_stream_offset(Some(&v))
    }

    #[test]
    fn every_form_reads() {
        assert_eq!(parse_stream_offset(None), Ok(OffsetSpec::Next));
        assert_eq!(parse("first".into()), Ok(OffsetSpec::First));
        assert_eq!(parse("last".into()), Ok(OffsetSpec::Last));
        assert_eq!(parse("next".into()), Ok(OffsetSpec::Next));
        assert_eq!(parse(FieldValue::I64(42)), Ok(OffsetSpec::Offset(42)));
        assert_eq!(parse(FieldValue::U8(7)), Ok(OffsetSpec::Offset(7)));
        assert_eq!(parse(FieldValue::I32(-5)), Ok(OffsetSpec::Offset(0)));
        assert_eq!(
            parse(FieldValue::Timestamp(1_700_000_000)),
            Ok(OffsetSpec::Timestamp {
                ms: 1_700_000_000_000
            })
        );
        assert_eq!(parse("1h".into()), Ok(OffsetSpec::Ago { ms: 3_600_000 }));
        assert_eq!(parse("30m".into()), Ok(OffsetSpec::Ago { ms: 1_800_000 }));
        assert_eq!(
            parse(FieldValue::Bytes(Bytes::from_static(b"first"))),
            Ok(OffsetSpec::First)
        );
    }

    #[test]
    fn a_refusal_names_the_value_as_rabbitmq_prints_it() {
        assert_eq!(
            parse("soon".into()),
            Err("{invalid_stream_offset_arg,{longstr,<<\"soon\">>}}".to_owned())
        );
        assert_eq!(
            parse("0s".into()),
            Err("{invalid_stream_offset_arg,{longstr,<<\"0s\">>}}".to_owned())
        );
        assert_eq!(
            parse(FieldValue::Bool(true)),
            Err("{invalid_stream_offset_arg,{bool,true}}".to_owned())
        );
        assert_eq!(
            parse(FieldValue::F64(1.5)),
            Err("{invalid_stream_offset_arg,{double,1.5}}".to_owned())
        );
    }
}
