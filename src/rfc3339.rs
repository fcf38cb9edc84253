//! RFC 3339 timestamps (`2026-01-01T09:00:00Z`, `2026-01-01T10:00:00.250+01:00`) to and from
//! milliseconds since the Unix epoch, for the manual clock's start and the test endpoints.

use crate::config::ClockConfig;

/// Days from 1970-01-01 to the given proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count from 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Parses an RFC 3339 timestamp at or after the epoch into milliseconds since it.
pub(crate) fn parse(text: &str) -> Result<u64, String> {
    let invalid = || format!("'{text}' is not an RFC 3339 time such as 2026-01-01T09:00:00Z");
    let b = text.as_bytes();
    if b.len() < 20 {
        return Err(invalid());
    }
    let num = |range: std::ops::Range<usize>| -> Result<i64, String> {
        let part = text.get(range).ok_or_else(invalid)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return Err(invalid());
        }
        part.parse().map_err(|_| invalid())
    };
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|&(i, c)| b[i] != c) || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(invalid());
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return Err(invalid());
    }
    // A leap second counts as the last second of its minute.
    if second > 60 {
        return Err(invalid());
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(invalid());
        }
        let padded = format!("{:0<3}", &fraction[..digits.min(3)]);
        millis = padded.parse::<i64>().map_err(|_| invalid())?;
        rest = &fraction[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(rest.as_bytes()[0], b'+' | b'-') => {
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            if rest.as_bytes()[3] != b':' {
                return Err(invalid());
            }
            let h = num(text.len() - 5..text.len() - 3)?;
            let m = num(text.len() - 2..text.len())?;
            sign * (h * 60 + m)
        }
        _ => return Err(invalid()),
    };
    let seconds =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second.min(59)
            - offset_minutes * 60;
    let ms = seconds * 1000 + millis;
    u64::try_from(ms).map_err(|_| format!("'{text}' is before 1970"))
}

/// Formats milliseconds since the epoch as RFC 3339 in UTC, with milliseconds.
pub(crate) fn format(ms: u64) -> String {
    let ms = ms as i64;
    let (days, in_day) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    let (year, month, day) = civil_from_days(days);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

impl ClockConfig {
    /// A manual clock's start as `--manual-clock` takes it: milliseconds since the Unix epoch,
    /// or an RFC 3339 time (`2026-01-01T09:00:00Z`).
    pub fn parse_manual_start(text: &str) -> Result<u64, String> {
        let text = text.trim();
        if !text.is_empty() && text.bytes().all(|c| c.is_ascii_digit()) {
            return text
                .parse()
                .map_err(|_| format!("'{text}' is too large for milliseconds since 1970"));
        }
        parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        assert_eq!(parse("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(parse("2026-01-01T09:00:00Z"), Ok(1_767_258_000_000));
        assert_eq!(parse("2026-01-01T10:00:00.25+01:00"), Ok(1_767_258_000_250));
        assert_eq!(
            parse("2024-02-29t23:59:59.999-00:30"),
            parse("2024-03-01T00:29:59.999Z")
        );
        assert_eq!(format(1_767_258_000_250), "2026-01-01T09:00:00.250Z");
        assert_eq!(format(0), "1970-01-01T00:00:00.000Z");
        for bad in [
            "",
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "1969-12-31T23:59:59Z",
            "2026-01-01T00:00:00+0100",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(ClockConfig::parse_manual_start("1000"), Ok(1000));
        assert_eq!(
            ClockConfig::parse_manual_start("1970-01-01T00:00:01Z"),
            Ok(1000)
        );
        assert!(ClockConfig::parse_manual_start("soon").is_err());
    }
}
