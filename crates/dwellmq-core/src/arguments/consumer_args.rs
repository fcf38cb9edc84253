//! `basic.consume` arguments.

use dwellmq_codec::FieldTable;

use crate::arguments::queue_args::int_arg;
use crate::error::BrokerError;

/// Reads the `x-priority` consumer argument (0 when absent; higher consumers are served first).
///
/// It must be an integer type, else, as RabbitMQ 3.9+:
/// `406 invalid arg 'x-priority' for queue 'q' in vhost '/': "expected integer, got longstr"`.
pub fn parse_consumer_priority(
    queue: &str,
    vhost: &str,
    args: &FieldTable,
) -> Result<i64, BrokerError> {
    match args.get("x-priority") {
        None => Ok(0),
        Some(v) => int_arg(v).map_err(|reason| {
            BrokerError::PreconditionFailed(format!(
                "invalid arg 'x-priority' for queue '{queue}' in vhost '{vhost}': {reason}"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dwellmq_codec::FieldValue;

    #[test]
    fn priority_is_any_integer() {
        let mut t = FieldTable::new();
        assert_eq!(parse_consumer_priority("q", "/", &t), Ok(0));
        t.insert("x-priority", FieldValue::I32(-3));
        assert_eq!(parse_consumer_priority("q", "/", &t), Ok(-3));
        t.insert("x-priority", FieldValue::U8(10));
        assert_eq!(parse_consumer_priority("q", "/", &t), Ok(10));
    }

    #[test]
    fn priority_must_be_an_integer() {
        let mut t = FieldTable::new();
        t.insert("x-priority", "10");
        assert_eq!(
            parse_consumer_priority("q", "/", &t).unwrap_err().to_string(),
            "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': \"expected integer, got longstr\""
        );
        t.insert("x-priority", FieldValue::F64(1.0));
        assert!(parse_consumer_priority("q", "/", &t).is_err());
    }
}
