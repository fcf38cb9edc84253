//! The values settings take, each read the same way from a flag, a variable and the config
//! file: `FromStr` for the first two (clap calls it), `Deserialize` for the file (through
//! `FromStr` where the file writes them as strings).

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use dwellmq::{ClockConfig, ExpiryMode};
use serde::Deserialize;

/// A socket address: `127.0.0.1:5672`, `[::1]:5672`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct Addr(pub(crate) SocketAddr);

impl FromStr for Addr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        // DWELLMQ_LISTEN is a comma-separated list: a space after a comma is no mistake.
        let text = text.trim();
        text.parse().map(Addr).map_err(|_| {
            format!("invalid address '{text}' (expected e.g. 127.0.0.1:5672 or [::1]:5672)")
        })
    }
}

impl TryFrom<String> for Addr {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An optional listener (HTTP, metrics): an address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "String")]
pub(crate) enum Listener {
    Off,
    At(SocketAddr),
}

impl Listener {
    pub(crate) fn addr(self) -> Option<SocketAddr> {
        match self {
            Listener::Off => None,
            Listener::At(addr) => Some(addr),
        }
    }
}

impl FromStr for Listener {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "off" {
            return Ok(Listener::Off);
        }
        text.parse().map(Listener::At).map_err(|_| {
            format!("invalid address '{text}' (expected e.g. 127.0.0.1:15672, or off)")
        })
    }
}

impl TryFrom<String> for Listener {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Listener::Off => f.write_str("off"),
            Listener::At(addr) => addr.fmt(f),
        }
    }
}

/// The test double's manual clock: off, starting now, or starting at a time.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub(crate) enum ManualClock {
    Off,
    Now,
    /// Milliseconds since 1970.
    At(u64),
}

impl ManualClock {
    /// The clock it asks for; `None` leaves the system clock.
    pub(crate) fn clock(self) -> Option<ClockConfig> {
        let start_ms = match self {
            ManualClock::Off => return None,
            ManualClock::At(ms) => ms,
            ManualClock::Now => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        Some(ClockConfig::Manual { start_ms })
    }
}

impl FromStr for ManualClock {
    type Err = String;

    /// START as ms since 1970 or RFC 3339; empty, `now`, `true` or `1` mean now (the last two
    /// so that `DWELLMQ_MANUAL_CLOCK=1` reads as a switch).
    fn from_str(start: &str) -> Result<Self, String> {
        match start {
            "" | "now" | "true" | "1" => Ok(ManualClock::Now),
            start => ClockConfig::parse_manual_start(start).map(ManualClock::At),
        }
    }
}

impl TryFrom<toml::Value> for ManualClock {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::Boolean(false) => Ok(ManualClock::Off),
            toml::Value::Boolean(true) => Ok(ManualClock::Now),
            toml::Value::Integer(ms) if ms >= 0 => Ok(ManualClock::At(ms as u64)),
            toml::Value::String(start) => start.parse(),
            _ => Err("expected true, ms since 1970 or an RFC 3339 time".into()),
        }
    }
}

/// A real-time priority for `SCHED_FIFO`: 1 to 99.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "i64")]
pub(crate) struct RtPriority(pub(crate) u8);

impl FromStr for RtPriority {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        text.parse::<i64>()
            .map_err(|_| "expected an integer from 1 to 99".to_string())
            .and_then(RtPriority::try_from)
    }
}

impl TryFrom<i64> for RtPriority {
    type Error = String;

    fn try_from(n: i64) -> Result<Self, String> {
        u8::try_from(n)
            .ok()
            .filter(|n| (1..=99).contains(n))
            .map(RtPriority)
            .ok_or_else(|| format!("{n} is not a priority from 1 to 99"))
    }
}

/// When a message past its TTL expires.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Expiry {
    /// At its deadline, wherever it waits in its queue
    OnTime,
    /// Only at the head of its queue, as RabbitMQ's classic queues
    HeadOnly,
}

impl From<Expiry> for ExpiryMode {
    fn from(expiry: Expiry) -> Self {
        match expiry {
            Expiry::OnTime => ExpiryMode::OnTime,
            Expiry::HeadOnly => ExpiryMode::HeadOnly,
        }
    }
}

/// A switch in the environment (`DWELLMQ_IN_MEMORY=1`): true, yes, on, 1 turn it on; false,
/// no, off, 0 and empty leave it off. Anything else is refused rather than guessed.
pub(crate) fn switch(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "" | "0" | "false" | "no" | "off" => Ok(false),
        other => Err(format!("expected true or false, not '{other}'")),
    }
}
