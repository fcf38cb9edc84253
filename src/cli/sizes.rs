//! The limits given in RabbitMQ's terms: the memory high watermark, the disk free limit and
//! the paging ratio. In the config file as RabbitMQ writes them (`.relative = 0.4`,
//! `.absolute = "2GiB"`, `.mem_relative = 1.0`); on a flag or in a variable as one word: a
//! decimal number is relative (`0.4`), octets or a size with a unit absolute (`2GiB`).

use std::fmt;
use std::str::FromStr;

use dwellmq::{DiskFreeLimit, MemoryWatermark};
use serde::Deserialize;

/// `memory_high_watermark`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub(crate) struct Watermark(pub(crate) MemoryWatermark);

const WATERMARK_FORMS: &str = "expected a fraction (0.4), octets, a size (\"2GiB\"), or a table \
     with one of relative = 0.4 or absolute = \"2GiB\"";

impl FromStr for Watermark {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let watermark = match decimal(text) {
            Some(fraction) => MemoryWatermark::Relative(fraction?),
            None => MemoryWatermark::Absolute(MemoryWatermark::parse_absolute(text)?),
        };
        watermark.validate()?;
        Ok(Watermark(watermark))
    }
}

impl TryFrom<toml::Value> for Watermark {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, String> {
        let watermark = match value {
            toml::Value::Float(f) => MemoryWatermark::Relative(f),
            toml::Value::Integer(n) => {
                MemoryWatermark::Absolute(u64::try_from(n).map_err(|_| WATERMARK_FORMS)?)
            }
            toml::Value::String(s) => {
                MemoryWatermark::Absolute(MemoryWatermark::parse_absolute(&s)?)
            }
            toml::Value::Table(t) => match (t.len(), t.get("relative"), t.get("absolute")) {
                (1, Some(relative), None) => match relative {
                    toml::Value::Float(f) => MemoryWatermark::Relative(*f),
                    toml::Value::Integer(n) => MemoryWatermark::Relative(*n as f64),
                    _ => return Err(WATERMARK_FORMS.into()),
                },
                (1, None, Some(absolute @ (toml::Value::Integer(_) | toml::Value::String(_)))) => {
                    Watermark::try_from(absolute.clone())?.0
                }
                _ => return Err(WATERMARK_FORMS.into()),
            },
            _ => return Err(WATERMARK_FORMS.into()),
        };
        watermark.validate()?;
        Ok(Watermark(watermark))
    }
}

impl fmt::Display for Watermark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            MemoryWatermark::Relative(fraction) => write!(f, "{fraction:?}"),
            MemoryWatermark::Absolute(octets) => f.write_str(&size_text(octets)),
        }
    }
}

/// `disk_free_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub(crate) struct DiskFree(pub(crate) DiskFreeLimit);

const DISK_FREE_FORMS: &str = "expected octets, a size (\"50MB\"), or a table with one of \
     absolute = \"50MB\" or mem_relative = 1.0";

impl FromStr for DiskFree {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Ok(DiskFree(match decimal(text) {
            Some(factor) => DiskFreeLimit::MemRelative(factor?),
            None => DiskFreeLimit::Absolute(MemoryWatermark::parse_absolute(text)?),
        }))
    }
}

impl TryFrom<toml::Value> for DiskFree {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, String> {
        let limit = match value {
            toml::Value::Integer(n) => {
                DiskFreeLimit::Absolute(u64::try_from(n).map_err(|_| DISK_FREE_FORMS)?)
            }
            toml::Value::String(s) => DiskFreeLimit::Absolute(MemoryWatermark::parse_absolute(&s)?),
            toml::Value::Table(t) if t.len() == 1 => {
                let Some((key, v)) = t.into_iter().next() else {
                    return Err(DISK_FREE_FORMS.into());
                };
                match (key.as_str(), v) {
                    ("absolute", v) => DiskFree::try_from(v)?.0,
                    ("mem_relative" | "relative", toml::Value::Float(f)) if f >= 0.0 => {
                        DiskFreeLimit::MemRelative(f)
                    }
                    ("mem_relative" | "relative", toml::Value::Integer(n)) if n >= 0 => {
                        DiskFreeLimit::MemRelative(n as f64)
                    }
                    _ => return Err(DISK_FREE_FORMS.into()),
                }
            }
            _ => return Err(DISK_FREE_FORMS.into()),
        };
        Ok(DiskFree(limit))
    }
}

impl fmt::Display for DiskFree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            DiskFreeLimit::MemRelative(factor) => write!(f, "{factor:?}"),
            DiskFreeLimit::Absolute(octets) => f.write_str(&size_text(octets)),
        }
    }
}

/// `memory_high_watermark_paging_ratio`: a positive number (above 1, as in RabbitMQ, queues
/// never page before the alarm).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub(crate) struct PagingRatio(pub(crate) f64);

impl PagingRatio {
    fn checked(ratio: f64) -> Result<Self, String> {
        if ratio.is_finite() && ratio > 0.0 {
            Ok(PagingRatio(ratio))
        } else {
            Err(format!("expected a positive number, not {ratio}"))
        }
    }
}

impl FromStr for PagingRatio {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let ratio = text
            .trim()
            .parse()
            .map_err(|_| format!("expected a positive number, not '{text}'"))?;
        PagingRatio::checked(ratio)
    }
}

impl TryFrom<toml::Value> for PagingRatio {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Float(f) => PagingRatio::checked(f),
            toml::Value::Integer(n) => PagingRatio::checked(n as f64),
            _ => Err("expected a positive number".into()),
        }
    }
}

impl fmt::Display for PagingRatio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// `Some` for a decimal number (`0.4`, `1.0`): a fraction or factor of the memory available.
/// Sizes (`2GiB`) and octets have no decimal point.
fn decimal(text: &str) -> Option<Result<f64, String>> {
    let text = text.trim();
    text.contains('.').then(|| {
        text.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .ok_or_else(|| format!("invalid fraction '{text}' (expected e.g. 0.4)"))
    })
}

/// Octets in the largest unit that divides them exactly (`50MB`, `64MiB`), as the help shows
/// a default.
fn size_text(octets: u64) -> String {
    const UNITS: [(u64, &str); 6] = [
        (1 << 30, "GiB"),
        (1_000_000_000, "GB"),
        (1 << 20, "MiB"),
        (1_000_000, "MB"),
        (1 << 10, "KiB"),
        (1_000, "kB"),
    ];
    UNITS
        .iter()
        .find(|(unit, _)| octets != 0 && octets.is_multiple_of(*unit))
        .map_or_else(
            || octets.to_string(),
            |(unit, name)| format!("{}{name}", octets / unit),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_forms_read_as_the_file_does() {
        let w = |text: &str| text.parse::<Watermark>().map(|w| w.0);
        assert_eq!(w("0.6"), Ok(MemoryWatermark::Relative(0.6)));
        assert_eq!(w("2GiB"), Ok(MemoryWatermark::Absolute(2 << 30)));
        assert_eq!(w("2147483648"), Ok(MemoryWatermark::Absolute(2 << 30)));
        assert!(w("-0.1").is_err());
        assert!(w("lots").is_err());
        let d = |text: &str| text.parse::<DiskFree>().map(|d| d.0);
        assert_eq!(d("50MB"), Ok(DiskFreeLimit::Absolute(50_000_000)));
        assert_eq!(d("1.5"), Ok(DiskFreeLimit::MemRelative(1.5)));
        assert!(d("-1.0").is_err());
        assert_eq!("2".parse::<PagingRatio>(), Ok(PagingRatio(2.0)));
        assert!("0".parse::<PagingRatio>().is_err());
    }

    #[test]
    fn defaults_display_as_they_parse_back() {
        for watermark in [
            MemoryWatermark::DEFAULT,
            MemoryWatermark::Relative(1.0),
            MemoryWatermark::Absolute(64 << 20),
            MemoryWatermark::Absolute(1_234_567),
        ] {
            let text = Watermark(watermark).to_string();
            assert_eq!(
                text.parse::<Watermark>().map(|w| w.0),
                Ok(watermark),
                "{text}"
            );
        }
        assert_eq!(DiskFree(DiskFreeLimit::DEFAULT).to_string(), "50MB");
        for limit in [DiskFreeLimit::DEFAULT, DiskFreeLimit::MemRelative(2.0)] {
            let text = DiskFree(limit).to_string();
            assert_eq!(text.parse::<DiskFree>().map(|d| d.0), Ok(limit), "{text}");
        }
    }
}
