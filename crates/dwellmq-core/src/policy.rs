//! Policies, as RabbitMQ defines them: a name, a pattern on queue or exchange names, what they
//! apply to, a priority, and a definition whose keys set queue and exchange behaviour. One
//! policy applies per object: the matching one with the highest priority.
//!
//! Matching names against patterns needs a regular-expression engine, which stays in the
//! broker; this module validates definitions and combines them with queue arguments the way
//! RabbitMQ does.

use dwellmq_codec::ShortStr;

use crate::arguments::{
    parse_max_age, DeadLetterStrategy, Overflow, QueueType, RetryKind, MAX_TTL_MS,
};

/// What kinds of objects a policy applies to (`apply-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApplyTo {
    /// Queues and exchanges.
    #[default]
    All,
    /// Every queue.
    Queues,
    /// Classic queues only.
    ClassicQueues,
    /// Quorum queues only.
    QuorumQueues,
    /// Streams only (RabbitMQ 4's `streams`).
    Streams,
    /// Exchanges only.
    Exchanges,
}

impl ApplyTo {
    /// Parses RabbitMQ's name for it.
    pub fn from_name(name: &str) -> Result<Self, PolicyError> {
        Ok(match name {
            "all" => ApplyTo::All,
            "queues" => ApplyTo::Queues,
            "classic_queues" => ApplyTo::ClassicQueues,
            "quorum_queues" => ApplyTo::QuorumQueues,
            "streams" => ApplyTo::Streams,
            "exchanges" => ApplyTo::Exchanges,
            other => {
                return Err(PolicyError(format!(
                    "'{other}' is not a valid apply-to value (all, queues, classic_queues, \
                     quorum_queues, streams, exchanges)"
                )))
            }
        })
    }

    /// RabbitMQ's name for it.
    pub fn name(self) -> &'static str {
        match self {
            ApplyTo::All => "all",
            ApplyTo::Queues => "queues",
            ApplyTo::ClassicQueues => "classic_queues",
            ApplyTo::QuorumQueues => "quorum_queues",
            ApplyTo::Streams => "streams",
            ApplyTo::Exchanges => "exchanges",
        }
    }

    /// Whether a queue of `queue_type` is covered.
    pub fn covers_queue(self, queue_type: QueueType) -> bool {
        match self {
            ApplyTo::All | ApplyTo::Queues => true,
            ApplyTo::ClassicQueues => queue_type == QueueType::Classic,
            ApplyTo::QuorumQueues => queue_type == QueueType::Quorum,
            ApplyTo::Streams | ApplyTo::Exchanges => false,
        }
    }

    /// Whether streams are covered (`all`, `queues`, `streams`). A covered stream takes the
    /// policy only if [`PolicyDefinition::applies_to_streams`] too.
    pub fn covers_streams(self) -> bool {
        matches!(self, ApplyTo::All | ApplyTo::Queues | ApplyTo::Streams)
    }

    /// Whether exchanges are covered.
    pub fn covers_exchanges(self) -> bool {
        matches!(self, ApplyTo::All | ApplyTo::Exchanges)
    }
}

/// A refused policy, with a readable reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Validation failed: {0}")]
pub struct PolicyError(pub String);

/// A definition value as a config file or JSON body gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyValue {
    /// A number.
    Integer(i64),
    /// A string.
    Text(String),
}

/// The keys a policy may set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyDefinition {
    /// `message-ttl`.
    pub message_ttl: Option<u64>,
    /// `expires`.
    pub expires: Option<u64>,
    /// `max-length`.
    pub max_length: Option<u64>,
    /// `max-length-bytes`.
    pub max_length_bytes: Option<u64>,
    /// `overflow`.
    pub overflow: Option<Overflow>,
    /// `dead-letter-exchange`.
    pub dead_letter_exchange: Option<ShortStr>,
    /// `dead-letter-routing-key`.
    pub dead_letter_routing_key: Option<ShortStr>,
    /// `dead-letter-strategy` (quorum queues).
    pub dead_letter_strategy: Option<DeadLetterStrategy>,
    /// `delivery-limit` (negative: no limit).
    pub delivery_limit: Option<i64>,
    /// `delayed-retry-type`.
    pub delayed_retry_type: Option<RetryKind>,
    /// `delayed-retry-min`, ms.
    pub delayed_retry_min: Option<u64>,
    /// `delayed-retry-max`, ms.
    pub delayed_retry_max: Option<u64>,
    /// `alternate-exchange`.
    pub alternate_exchange: Option<ShortStr>,
    /// `max-age` (streams), as given (`"7D"`); see [`PolicyDefinition::max_age_ms`].
    pub max_age: Option<String>,
    /// `stream-max-segment-size-bytes` (streams).
    pub stream_max_segment_size_bytes: Option<u64>,
    /// `initial-cluster-size` (streams; checked, no effect on one node).
    pub initial_cluster_size: Option<u64>,
    /// `queue-leader-locator` (checked, no effect on one node).
    pub queue_leader_locator: Option<String>,
}

fn integer(key: &str, value: &PolicyValue) -> Result<i64, PolicyError> {
    match value {
        PolicyValue::Integer(n) => Ok(*n),
        PolicyValue::Text(t) => Err(PolicyError(format!(
            "\"{t}\" is not a valid {key}: an integer is expected"
        ))),
    }
}

fn non_negative(key: &str, value: &PolicyValue, max: u64) -> Result<u64, PolicyError> {
    let n = integer(key, value)?;
    u64::try_from(n)
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| PolicyError(format!("{n} is not a valid {key}")))
}

fn positive(key: &str, value: &PolicyValue) -> Result<u64, PolicyError> {
    let n = non_negative(key, value, u64::MAX)?;
    if n == 0 {
        return Err(PolicyError(format!("0 is not a valid {key}")));
    }
    Ok(n)
}

fn text<'a>(key: &str, value: &'a PolicyValue) -> Result<&'a str, PolicyError> {
    match value {
        PolicyValue::Text(t) => Ok(t),
        PolicyValue::Integer(n) => Err(PolicyError(format!(
            "{n} is not a valid {key}: a string is expected"
        ))),
    }
}

fn short(key: &str, value: &PolicyValue) -> Result<ShortStr, PolicyError> {
    let t = text(key, value)?;
    if t.len() > 255 {
        return Err(PolicyError(format!("{key} is longer than 255 octets")));
    }
    Ok(ShortStr::from(t))
}

impl PolicyDefinition {
    /// Builds a definition from its keys, refusing unknown keys and invalid values.
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = (&'a str, PolicyValue)>,
    ) -> Result<Self, PolicyError> {
        let mut d = PolicyDefinition::default();
        for (key, value) in entries {
            let v = &value;
            match key {
                "message-ttl" => d.message_ttl = Some(non_negative(key, v, MAX_TTL_MS)?),
                "expires" => d.expires = Some(positive(key, v)?),
                "max-length" => d.max_length = Some(non_negative(key, v, u64::MAX)?),
                "max-length-bytes" => d.max_length_bytes = Some(non_negative(key, v, u64::MAX)?),
                "overflow" => {
                    let name = text(key, v)?;
                    d.overflow = Some(Overflow::from_name(name.as_bytes()).ok_or_else(|| {
                        PolicyError(format!("\"{name}\" is not a valid overflow"))
                    })?);
                }
                "dead-letter-exchange" => d.dead_letter_exchange = Some(short(key, v)?),
                "dead-letter-routing-key" => d.dead_letter_routing_key = Some(short(key, v)?),
                "dead-letter-strategy" => {
                    let name = text(key, v)?;
                    d.dead_letter_strategy = Some(
                        DeadLetterStrategy::from_name(name.as_bytes()).ok_or_else(|| {
                            PolicyError(format!(
                                "\"{name}\" is not a valid dead-letter-strategy (at-most-once, \
                                 at-least-once)"
                            ))
                        })?,
                    );
                }
                "delivery-limit" => d.delivery_limit = Some(integer(key, v)?),
                "delayed-retry-type" => {
                    let name = text(key, v)?;
                    d.delayed_retry_type =
                        Some(RetryKind::from_name(name.as_bytes()).ok_or_else(|| {
                            PolicyError(format!(
                                "\"{name}\" is not a valid delayed-retry-type (disabled, all, \
                                 failed, returned)"
                            ))
                        })?);
                }
                "delayed-retry-min" => d.delayed_retry_min = Some(positive(key, v)?),
                "delayed-retry-max" => d.delayed_retry_max = Some(positive(key, v)?),
                "alternate-exchange" => d.alternate_exchange = Some(short(key, v)?),
                "max-age" => d.max_age = Some(max_age(v)?),
                "stream-max-segment-size-bytes" => {
                    d.stream_max_segment_size_bytes = Some(non_negative_as(key, v, "segment size")?)
                }
                "initial-cluster-size" => {
                    d.initial_cluster_size = Some(non_negative_as(key, v, "cluster size")?)
                }
                "queue-leader-locator" => d.queue_leader_locator = Some(leader_locator(v)?),
                other => return Err(PolicyError(format!("unknown policy key '{other}'"))),
            }
        }
        let retrying = d
            .delayed_retry_type
            .is_some_and(|kind| kind != RetryKind::Disabled);
        if retrying && d.delayed_retry_min.is_none() {
            return Err(PolicyError(
                "delayed-retry-min is required when delayed-retry-type is set".into(),
            ));
        }
        if let (Some(min), Some(max)) = (d.delayed_retry_min, d.delayed_retry_max) {
            if max < min {
                return Err(PolicyError(format!(
                    "delayed-retry-max ({max}) is below delayed-retry-min ({min})"
                )));
            }
        }
        Ok(d)
    }

    /// The definition as (key, value) pairs, in RabbitMQ's key names.
    pub fn entries(&self) -> Vec<(&'static str, PolicyValue)> {
        let mut out = Vec::new();
        let int = |n: u64| PolicyValue::Integer(i64::try_from(n).unwrap_or(i64::MAX));
        let txt = |s: &ShortStr| PolicyValue::Text(s.to_string());
        if let Some(n) = self.message_ttl {
            out.push(("message-ttl", int(n)));
        }
        if let Some(n) = self.expires {
            out.push(("expires", int(n)));
        }
        if let Some(n) = self.max_length {
            out.push(("max-length", int(n)));
        }
        if let Some(n) = self.max_length_bytes {
            out.push(("max-length-bytes", int(n)));
        }
        if let Some(o) = self.overflow {
            out.push(("overflow", PolicyValue::Text(o.name().into())));
        }
        if let Some(s) = &self.dead_letter_exchange {
            out.push(("dead-letter-exchange", txt(s)));
        }
        if let Some(s) = &self.dead_letter_routing_key {
            out.push(("dead-letter-routing-key", txt(s)));
        }
        if let Some(s) = self.dead_letter_strategy {
            out.push(("dead-letter-strategy", PolicyValue::Text(s.name().into())));
        }
        if let Some(n) = self.delivery_limit {
            out.push(("delivery-limit", PolicyValue::Integer(n)));
        }
        if let Some(k) = self.delayed_retry_type {
            out.push(("delayed-retry-type", PolicyValue::Text(k.name().into())));
        }
        if let Some(n) = self.delayed_retry_min {
            out.push(("delayed-retry-min", int(n)));
        }
        if let Some(n) = self.delayed_retry_max {
            out.push(("delayed-retry-max", int(n)));
        }
        if let Some(s) = &self.alternate_exchange {
            out.push(("alternate-exchange", txt(s)));
        }
        if let Some(s) = &self.max_age {
            out.push(("max-age", PolicyValue::Text(s.clone())));
        }
        if let Some(n) = self.stream_max_segment_size_bytes {
            out.push(("stream-max-segment-size-bytes", int(n)));
        }
        if let Some(n) = self.initial_cluster_size {
            out.push(("initial-cluster-size", int(n)));
        }
        if let Some(s) = &self.queue_leader_locator {
            out.push(("queue-leader-locator", PolicyValue::Text(s.clone())));
        }
        out
    }

    /// `max-age` in ms.
    pub fn max_age_ms(&self) -> Option<u64> {
        self.max_age
            .as_deref()
            .and_then(|text| parse_max_age(text.as_bytes()))
    }

    /// Whether a stream takes this policy at all: RabbitMQ skips, for a stream, a policy that
    /// sets any key streams do not support (`unsupported_policies` of
    /// `rabbit_stream_queue:capabilities/0`: TTLs, `expires`, dead-lettering, `max-length`,
    /// `overflow`, `delivery-limit`...), and a lower-priority policy may apply instead
    /// (`rabbit_policy:matches/2`). The delayed-retry keys are quorum-only, so a stream skips
    /// them too.
    pub fn applies_to_streams(&self) -> bool {
        self.message_ttl.is_none()
            && self.expires.is_none()
            && self.max_length.is_none()
            && self.overflow.is_none()
            && self.dead_letter_exchange.is_none()
            && self.dead_letter_routing_key.is_none()
            && self.dead_letter_strategy.is_none()
            && self.delivery_limit.is_none()
            && self.delayed_retry_type.is_none()
            && self.delayed_retry_min.is_none()
            && self.delayed_retry_max.is_none()
    }
}

/// A `max-age` value (`rabbit_policies`: `"7X" is not a valid max age`).
fn max_age(value: &PolicyValue) -> Result<String, PolicyError> {
    match value {
        PolicyValue::Text(t) if parse_max_age(t.as_bytes()).is_some() => Ok(t.clone()),
        PolicyValue::Text(t) => Err(PolicyError(format!("\"{t}\" is not a valid max age"))),
        PolicyValue::Integer(n) => Err(PolicyError(format!("{n} is not a valid max age"))),
    }
}

/// A non-negative integer, refused as RabbitMQ words it (`... is not a valid segment size`).
fn non_negative_as(key: &str, value: &PolicyValue, what: &str) -> Result<u64, PolicyError> {
    match value {
        PolicyValue::Integer(n) => {
            u64::try_from(*n).map_err(|_| PolicyError(format!("{n} is not a valid {what}")))
        }
        PolicyValue::Text(t) => Err(PolicyError(format!(
            "\"{t}\" is not a valid {what}: {key} takes an integer"
        ))),
    }
}

/// A `queue-leader-locator` value.
fn leader_locator(value: &PolicyValue) -> Result<String, PolicyError> {
    match value {
        PolicyValue::Text(t)
            if matches!(
                t.as_str(),
                "client-local" | "balanced" | "random" | "least-leaders"
            ) =>
        {
            Ok(t.clone())
        }
        PolicyValue::Text(t) => Err(PolicyError(format!(
            "\"{t}\" is not a valid queue leader locator value"
        ))),
        PolicyValue::Integer(n) => Err(PolicyError(format!(
            "{n} is not a valid queue leader locator value"
        ))),
    }
}

/// A policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Unique in its vhost.
    pub name: String,
    /// A regular expression matched against queue and exchange names.
    pub pattern: String,
    /// What it applies to.
    pub apply_to: ApplyTo,
    /// The highest priority among matching policies wins.
    pub priority: i64,
    /// What it sets.
    pub definition: PolicyDefinition,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(entries: &[(&'static str, PolicyValue)]) -> Result<PolicyDefinition, PolicyError> {
        PolicyDefinition::from_entries(entries.iter().cloned())
    }

    #[test]
    fn rabbitmqs_delayed_retry_example_parses_and_round_trips() {
        let d = parse(&[
            ("delivery-limit", PolicyValue::Integer(20)),
            ("delayed-retry-type", PolicyValue::Text("failed".into())),
            ("delayed-retry-min", PolicyValue::Integer(30_000)),
            ("delayed-retry-max", PolicyValue::Integer(120_000)),
        ])
        .unwrap();
        assert_eq!(d.delayed_retry_type, Some(RetryKind::Failed));
        assert_eq!(PolicyDefinition::from_entries(d.entries()).unwrap(), d);
    }

    #[test]
    fn the_dead_letter_strategy_parses_and_round_trips() {
        let d = parse(&[
            (
                "dead-letter-strategy",
                PolicyValue::Text("at-least-once".into()),
            ),
            ("overflow", PolicyValue::Text("reject-publish".into())),
        ])
        .unwrap();
        assert_eq!(
            d.dead_letter_strategy,
            Some(DeadLetterStrategy::AtLeastOnce)
        );
        assert_eq!(PolicyDefinition::from_entries(d.entries()).unwrap(), d);
    }

    #[test]
    fn invalid_definitions_are_refused_with_a_reason() {
        for (entries, reason) in [
            (
                vec![("message-ttl", PolicyValue::Integer(-1))],
                "-1 is not a valid message-ttl",
            ),
            (
                vec![("overflow", PolicyValue::Text("drop-tail".into()))],
                "\"drop-tail\" is not a valid overflow",
            ),
            (
                vec![("delayed-retry-type", PolicyValue::Text("failed".into()))],
                "delayed-retry-min is required when delayed-retry-type is set",
            ),
            (
                vec![
                    ("delayed-retry-type", PolicyValue::Text("all".into())),
                    ("delayed-retry-min", PolicyValue::Integer(10)),
                    ("delayed-retry-max", PolicyValue::Integer(5)),
                ],
                "delayed-retry-max (5) is below delayed-retry-min (10)",
            ),
            (
                vec![(
                    "dead-letter-strategy",
                    PolicyValue::Text("sometimes".into()),
                )],
                "\"sometimes\" is not a valid dead-letter-strategy (at-most-once, at-least-once)",
            ),
            (
                vec![("colour", PolicyValue::Text("blue".into()))],
                "unknown policy key 'colour'",
            ),
        ] {
            assert_eq!(
                PolicyDefinition::from_entries(entries).unwrap_err().0,
                reason
            );
        }
    }

    #[test]
    fn apply_to_names() {
        assert!(ApplyTo::from_name("quorum_queues")
            .unwrap()
            .covers_queue(QueueType::Quorum));
        assert!(!ApplyTo::QuorumQueues.covers_queue(QueueType::Classic));
        assert!(!ApplyTo::Exchanges.covers_queue(QueueType::Classic));
        assert!(ApplyTo::All.covers_exchanges());
        let streams = ApplyTo::from_name("streams").unwrap();
        assert_eq!(streams.name(), "streams");
        assert!(streams.covers_streams() && !streams.covers_queue(QueueType::Classic));
        assert!(ApplyTo::Queues.covers_streams() && !ApplyTo::QuorumQueues.covers_streams());
    }

    #[test]
    fn stream_keys_parse_and_round_trip() {
        let d = parse(&[
            ("max-age", PolicyValue::Text("7D".into())),
            ("max-length-bytes", PolicyValue::Integer(1 << 30)),
            (
                "stream-max-segment-size-bytes",
                PolicyValue::Integer(1 << 20),
            ),
            ("initial-cluster-size", PolicyValue::Integer(3)),
            ("queue-leader-locator", PolicyValue::Text("balanced".into())),
        ])
        .unwrap();
        assert_eq!(d.max_age_ms(), Some(7 * 86_400_000));
        assert_eq!(d.stream_max_segment_size_bytes, Some(1 << 20));
        assert!(d.applies_to_streams());
        assert_eq!(PolicyDefinition::from_entries(d.entries()).unwrap(), d);
        for (entries, reason) in [
            (
                vec![("max-age", PolicyValue::Text("7X".into()))],
                "\"7X\" is not a valid max age",
            ),
            (
                vec![("max-age", PolicyValue::Integer(60))],
                "60 is not a valid max age",
            ),
            (
                vec![("stream-max-segment-size-bytes", PolicyValue::Integer(-1))],
                "-1 is not a valid segment size",
            ),
            (
                vec![("queue-leader-locator", PolicyValue::Text("nearest".into()))],
                "\"nearest\" is not a valid queue leader locator value",
            ),
        ] {
            assert_eq!(
                PolicyDefinition::from_entries(entries).unwrap_err().0,
                reason
            );
        }
    }

    #[test]
    fn a_policy_with_a_key_streams_do_not_take_skips_streams() {
        let with_ttl = parse(&[
            ("max-age", PolicyValue::Text("1h".into())),
            ("message-ttl", PolicyValue::Integer(1000)),
        ])
        .unwrap();
        assert!(!with_ttl.applies_to_streams());
        let dead_lettering =
            parse(&[("dead-letter-exchange", PolicyValue::Text("dlx".into()))]).unwrap();
        assert!(!dead_lettering.applies_to_streams());
        assert!(PolicyDefinition::default().applies_to_streams());
    }
}
