//! Durations written as a count and a unit (`"7D"`, `"12h"`), as streams take them: the
//! `x-max-age` argument and `max-age` policy key, and the interval form of `x-stream-offset`.

/// Milliseconds in one of RabbitMQ's units: `Y` (365 days), `M` (30 days), `D`, `h`, `m`, `s`.
fn unit_ms(unit: &[u8]) -> Option<u64> {
    const SECOND: u64 = 1000;
    const DAY: u64 = 24 * 3600 * SECOND;
    Some(match unit {
        b"Y" => 365 * DAY,
        b"M" => 30 * DAY,
        b"D" => DAY,
        b"h" => 3600 * SECOND,
        b"m" => 60 * SECOND,
        b"s" => SECOND,
        _ => return None,
    })
}

/// Reads a duration as `rabbit_amqqueue:check_max_age/1` does: leading ASCII digits forming a
/// number above 0, then exactly one unit. `None` for anything else (RabbitMQ's
/// `invalid_max_age`).
///
/// A duration too long for a `u64` of milliseconds saturates (Erlang's integers do not
/// overflow; as a retention or an interval it means "forever" all the same).
///
/// One deviation: a text without digits (`"h"`, `" 1h"`, `""`) crashes RabbitMQ's check
/// (`list_to_integer("")`), which closes the channel with an internal error; here it is
/// refused like any invalid duration.
pub fn parse_max_age(text: &[u8]) -> Option<u64> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    let (number, unit) = text.split_at(digits);
    if number.is_empty() {
        return None;
    }
    let unit_ms = unit_ms(unit)?;
    // Saturating: a number of any length is a valid Erlang integer.
    let value = number.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    (value > 0).then(|| value.saturating_mul(unit_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_reads() {
        assert_eq!(parse_max_age(b"7D"), Some(7 * 86_400_000));
        assert_eq!(parse_max_age(b"12h"), Some(12 * 3_600_000));
        assert_eq!(parse_max_age(b"30m"), Some(30 * 60_000));
        assert_eq!(parse_max_age(b"10s"), Some(10_000));
        assert_eq!(parse_max_age(b"1Y"), Some(365 * 86_400_000));
        assert_eq!(parse_max_age(b"6M"), Some(6 * 30 * 86_400_000));
        assert_eq!(parse_max_age(b"007s"), Some(7_000));
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in [
            &b"0s"[..],
            b"1A",
            b"1",
            b"1d",
            b"1H",
            b"1.5h",
            b"1hh",
            b"h",
            b"",
            b" 1h",
            b"-1h",
            b"+1h",
            b"1 h",
        ] {
            assert_eq!(parse_max_age(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_huge_duration_saturates() {
        assert_eq!(parse_max_age(b"99999999999999999999999Y"), Some(u64::MAX));
    }
}
