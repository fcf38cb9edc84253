//! Command-line flags, environment variables and the TOML config file of the `dwellmq` binary.
//!
//! Precedence: built-in defaults < `--config FILE` < environment < flags.

use std::net::SocketAddr;
use std::path::PathBuf;

use dwellmq::{
    ApplyTo, BrokerConfig, ClockConfig, DiskFreeLimit, ExpiryMode, Limits, MemoryWatermark,
    PermissionConfig, Policy, PolicyConfig, PolicyDefinition, PolicyValue, TlsConfig, TlsVerify,
    UserConfig,
};

/// The `--help` text, with the built-in defaults of [`Limits`].
pub(crate) fn usage() -> String {
    let l = Limits::default();
    let limits: [(&str, String, &str); 11] = [
        (
            "frame_max",
            l.frame_max.to_string(),
            "largest frame, octets",
        ),
        (
            "channel_max",
            l.channel_max.to_string(),
            "open channels per connection",
        ),
        (
            "heartbeat",
            l.heartbeat_secs.to_string(),
            "seconds (0 = none)",
        ),
        ("max_connections", l.max_connections.to_string(), ""),
        (
            "max_message_size",
            l.max_message_size.to_string(),
            "body octets",
        ),
        (
            "memory_high_watermark",
            l.memory_high_watermark.to_string(),
            "",
        ),
        (
            "memory_high_watermark_paging_ratio",
            l.memory_paging_ratio.to_string(),
            "of the watermark: above it queues page to disk",
        ),
        (
            "handshake_timeout_ms",
            l.handshake_timeout.as_millis().to_string(),
            "",
        ),
        (
            "store_backlog_bytes",
            l.store_backlog_bytes.to_string(),
            "queued for the disk before publishers block",
        ),
        (
            "store_cache_bytes",
            l.store_cache_bytes.to_string(),
            "the store's page cache (not counted by the watermark)",
        ),
        (
            "disk_free_limit",
            l.disk_free_limit.to_string(),
            "free disk below which publishers block",
        ),
    ];
    let limits: Vec<String> = limits
        .iter()
        .map(|(key, value, note)| {
            format!("              {:<36}{note}", format!("{key} = {value}"))
                .trim_end()
                .to_string()
        })
        .collect();
    format!(
        "\
dwellmq: an AMQP 0-9-1 broker that does delayed messaging properly

USAGE: dwellmq [OPTIONS]

OPTIONS:
  --listen ADDR      address to listen on, repeatable (default: 127.0.0.1:5672 and [::1]:5672;
                     port 0 picks a free port)              env: DWELLMQ_LISTEN (comma-separated)
  --data-dir DIR     where durable state lives (default ./dwellmq-data)  env: DWELLMQ_DATA_DIR
  --in-memory        keep everything in memory, write nothing to disk     env: DWELLMQ_IN_MEMORY=1
  --config FILE      TOML configuration file, see CONFIG FILE below      env: DWELLMQ_CONFIG
  --log-level LEVEL  error|warn|info|debug|trace or a tracing filter (default: info)
                                                                          env: DWELLMQ_LOG
  --tls-listen ADDR  serve AMQP over TLS on ADDR too, repeatable (RabbitMQ's 5671; the
                     certificates come from the config file's [tls] table)
  --http ADDR|off    HTTP management API and /metrics (default 127.0.0.1:15672, RabbitMQ's
                     management port; a free port when every AMQP listener is on port 0)
                                                                         env: DWELLMQ_HTTP
  --metrics ADDR|off  also serve Prometheus /metrics alone on ADDR (RabbitMQ's port is 15692;
                     default off)                               env: DWELLMQ_METRICS
  --definitions FILE  declare the exchanges, queues and bindings of a RabbitMQ definitions
                     file (JSON) at start                       env: DWELLMQ_DEFINITIONS
  --timer-rt-priority N  run the delayed-message timer thread under SCHED_FIFO at priority
                     N (1-99, Linux, needs CAP_SYS_NICE): releases stay on time on a busy host
  --expiry MODE      on-time (default): a message expires at its deadline wherever it is in
                     its queue; head-only: only at the head, as RabbitMQ's classic queues
  --manual-clock [START]  test double: time moves only when a test moves it (POST
                     /test/clock/advance); starts at START (ms since 1970 or RFC 3339,
                     default: now)                        env: DWELLMQ_MANUAL_CLOCK
  --name-seed N      test double: server-generated names (amq.gen-, amq.ctag-) from a
                     generator seeded with N, reproducible (and guessable)
  -h, --help         print this help
  -V, --version      print the version

CONFIG FILE (TOML; the environment and flags override it):
  listen = [\"127.0.0.1:5672\"]   data_dir = \"DIR\"   in_memory = true   log_level = \"info\"
  vhosts = [\"/\", \"staging\"]      timer_realtime_priority = N   expiry = \"head-only\"
  manual_clock = true | START     name_seed = N
  http = \"127.0.0.1:15672\"   metrics = \"127.0.0.1:15692\"   definitions = \"FILE\"
  [[users]]   name, password (or password_hash: RabbitMQ's salted SHA-256, base64), tags
              ([\"administrator\"], ...), loopback_only (default false), vhosts: full
              permissions there (default [\"*\"] unless [[permissions]] name the user).
              Any [[users]] entry replaces the default guest/guest (loopback only; logged at
              start): list guest too to keep it.
  [[permissions]] user, vhost (default \"/\"), configure, write, read: RabbitMQ's
              regular expressions (unanchored; \"\" allows nothing).
  [[policies]] name, pattern, vhost (default \"/\"), apply_to (default \"all\"), priority
              (default 0), definition = {{ message-ttl = 60000, ... }} (RabbitMQ's keys)
  [tls]       certfile, keyfile (PEM), listen (default [\"127.0.0.1:5671\"]), cacertfile,
              verify = \"verify_none\" (default) or \"verify_peer\" (ask for a client
              certificate, checked against cacertfile), fail_if_no_peer_cert (default false).
              A verified client certificate's CN may log in with the EXTERNAL mechanism.
  [limits]
{limits}
              memory_high_watermark: memory held for messages (bodies plus an estimated
              overhead per message queued or held) above which publishers are blocked.
              .relative = F: a fraction of the memory available (the cgroup's limit if
              set, else the RAM); .absolute = octets or a size in RabbitMQ's units
              (\"2GiB\", \"512MB\").

The first line on stdout is the AMQP URL the broker listens on; the second, when HTTP is on,
the HTTP API's URL (http://ADDR). Logs go to stderr, in colour
only on a terminal (and not with NO_COLOR set). SIGTERM or Ctrl-C shuts down gracefully:
clients get connection.close 320 (CONNECTION_FORCED) and the broker exits once they have
answered (3 s at most).",
        limits = limits.join("\n"),
    )
}

/// The keys of the config file's `[limits]` table.
const LIMIT_KEYS: &[&str] = &[
    "frame_max",
    "channel_max",
    "heartbeat",
    "max_connections",
    "max_message_size",
    "memory_high_watermark",
    "memory_high_watermark_paging_ratio",
    "handshake_timeout_ms",
    "store_backlog_bytes",
    "store_cache_bytes",
    "disk_free_limit",
];

/// What the binary was asked to do.
pub(crate) enum Command {
    Run(Box<Settings>),
    Help,
    Version,
}

/// A resolved configuration plus the log filter.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) config: BrokerConfig,
    pub(crate) log_level: String,
}

#[derive(Default)]
struct Flags {
    listen: Vec<String>,
    data_dir: Option<String>,
    in_memory: bool,
    config: Option<String>,
    log_level: Option<String>,
    timer_rt_priority: Option<String>,
    expiry: Option<String>,
    http: Option<String>,
    metrics: Option<String>,
    definitions: Option<String>,
    /// `--manual-clock`, with its START if given (`Some("")` without).
    manual_clock: Option<String>,
    name_seed: Option<String>,
    tls_listen: Vec<String>,
}

/// Parses `args` (without the program name) with `env` as the environment lookup.
pub(crate) fn parse(
    args: impl IntoIterator<Item = String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Command, String> {
    let mut flags = Flags::default();
    let mut args = args.into_iter().peekable();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |flag: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--listen" => flags.listen.push(value("--listen")?),
            "--data-dir" => flags.data_dir = Some(value("--data-dir")?),
            "--in-memory" => flags.in_memory = true,
            "--config" => flags.config = Some(value("--config")?),
            "--log-level" => flags.log_level = Some(value("--log-level")?),
            "--timer-rt-priority" => flags.timer_rt_priority = Some(value("--timer-rt-priority")?),
            "--expiry" => flags.expiry = Some(value("--expiry")?),
            "--http" => flags.http = Some(value("--http")?),
            "--metrics" => flags.metrics = Some(value("--metrics")?),
            "--definitions" => flags.definitions = Some(value("--definitions")?),
            "--manual-clock" => {
                // START is optional: the next argument is it unless it is another option.
                flags.manual_clock = Some(match inline {
                    Some(start) => start,
                    None => match args.peek() {
                        Some(next) if !next.starts_with('-') => args.next().unwrap_or_default(),
                        _ => String::new(),
                    },
                });
            }
            "--name-seed" => flags.name_seed = Some(value("--name-seed")?),
            "--tls-listen" => flags.tls_listen.push(value("--tls-listen")?),
            other => return Err(format!("unknown option '{other}' (see --help)")),
        }
    }

    // The binary keeps its state on disk unless told otherwise (embedders default to memory).
    let mut config = BrokerConfig {
        data_dir: Some(PathBuf::from("./dwellmq-data")),
        ..BrokerConfig::default()
    };
    let mut log_level = "info".to_string();
    // Whether the user named an HTTP address (or off) anywhere; see `follow_ephemeral_amqp`.
    let mut http_chosen = flags.http.is_some() || env("DWELLMQ_HTTP").is_some();
    if let Some(path) = flags.config.clone().or_else(|| env("DWELLMQ_CONFIG")) {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read config file {path}: {e}"))?;
        let table = parse_toml(&text).map_err(|e| format!("{path}: {e}"))?;
        http_chosen |= table.contains_key("http");
        apply_table(&mut config, &mut log_level, &table).map_err(|e| format!("{path}: {e}"))?;
    }
    if let Some(listen) = env("DWELLMQ_LISTEN") {
        config.listen = parse_addrs(listen.split(',').map(str::trim))?;
    }
    if let Some(dir) = env("DWELLMQ_DATA_DIR") {
        config.data_dir = Some(PathBuf::from(dir));
    }
    if env("DWELLMQ_IN_MEMORY").is_some_and(|v| v == "1" || v == "true") {
        config.data_dir = None;
    }
    if let Some(level) = env("DWELLMQ_LOG") {
        log_level = level;
    }
    if !flags.listen.is_empty() {
        config.listen = parse_addrs(flags.listen.iter().map(String::as_str))?;
    }
    if let Some(dir) = flags.data_dir {
        config.data_dir = Some(PathBuf::from(dir));
    }
    if flags.in_memory {
        config.data_dir = None;
    }
    if let Some(level) = flags.log_level {
        log_level = level;
    }
    if let Some(http) = flags.http.or_else(|| env("DWELLMQ_HTTP")) {
        config.http = parse_http(&http)?;
    }
    if let Some(metrics) = flags.metrics.or_else(|| env("DWELLMQ_METRICS")) {
        config.metrics = parse_listener("--metrics", &metrics)?;
    }
    if let Some(file) = flags.definitions.or_else(|| env("DWELLMQ_DEFINITIONS")) {
        config.definitions = Some(PathBuf::from(file));
    }
    if let Some(priority) = flags.timer_rt_priority {
        let n: u8 = priority
            .parse()
            .ok()
            .filter(|n| (1..=99).contains(n))
            .ok_or_else(|| format!("invalid --timer-rt-priority '{priority}' (1-99)"))?;
        config.timer_realtime_priority = Some(n);
    }
    if let Some(mode) = flags.expiry {
        config.expiry_mode = parse_expiry(&mode)?;
    }
    if let Some(start) = flags.manual_clock.or_else(|| env("DWELLMQ_MANUAL_CLOCK")) {
        config.clock = manual_clock(&start)?;
    }
    if let Some(seed) = flags.name_seed {
        config.name_seed = Some(
            seed.parse()
                .map_err(|_| format!("invalid --name-seed '{seed}' (a number)"))?,
        );
    }
    if !flags.tls_listen.is_empty() {
        let tls = config
            .tls
            .as_mut()
            .ok_or("--tls-listen needs certfile and keyfile in the config file's [tls] table")?;
        tls.listen = parse_addrs(flags.tls_listen.iter().map(String::as_str))?;
    }
    if !http_chosen {
        follow_ephemeral_amqp(&mut config);
    }
    Ok(Command::Run(Box::new(Settings { config, log_level })))
}

/// Without an HTTP address of the user's, HTTP follows AMQP: someone who asked for free AMQP
/// ports (port 0 on every AMQP listener) gets a free HTTP port too, rather than a collision
/// with RabbitMQ's management port 15672 or a second dwellmq's. The second stdout line says
/// where it landed.
fn follow_ephemeral_amqp(config: &mut BrokerConfig) {
    let tls_listen = config.tls.iter().flat_map(|tls| &tls.listen);
    let all_ephemeral = !config.listen.is_empty()
        && config
            .listen
            .iter()
            .chain(tls_listen)
            .all(|a| a.port() == 0);
    if let Some(http) = config.http.as_mut().filter(|_| all_ephemeral) {
        http.set_port(0);
    }
}

/// `--manual-clock [START]`: START as ms since 1970 or RFC 3339; empty means now.
fn manual_clock(start: &str) -> Result<ClockConfig, String> {
    let start_ms = if start.is_empty() || start == "true" || start == "1" {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    } else {
        ClockConfig::parse_manual_start(start).map_err(|e| format!("--manual-clock: {e}"))?
    };
    Ok(ClockConfig::Manual { start_ms })
}

fn parse_expiry(mode: &str) -> Result<ExpiryMode, String> {
    match mode {
        "on-time" => Ok(ExpiryMode::OnTime),
        "head-only" => Ok(ExpiryMode::HeadOnly),
        other => Err(format!(
            "expiry must be on-time or head-only, not '{other}'"
        )),
    }
}

fn parse_addrs<'a>(addrs: impl Iterator<Item = &'a str>) -> Result<Vec<SocketAddr>, String> {
    addrs
        .map(|a| {
            a.parse::<SocketAddr>().map_err(|_| {
                format!("invalid listen address '{a}' (expected e.g. 127.0.0.1:5672 or [::1]:5672)")
            })
        })
        .collect()
}

/// `--metrics` (or another optional listener): an address, or `off`.
fn parse_listener(flag: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "off" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|_| format!("invalid {flag} '{value}' (expected e.g. 127.0.0.1:15692, or off)"))
}

/// `--http`: an address, or `off`.
fn parse_http(value: &str) -> Result<Option<SocketAddr>, String> {
    if value == "off" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|_| format!("invalid --http '{value}' (expected e.g. 127.0.0.1:15672, or off)"))
}

fn parse_toml(text: &str) -> Result<toml::Table, String> {
    text.parse().map_err(|e| format!("{e}"))
}

#[cfg(test)]
fn apply_file(config: &mut BrokerConfig, log_level: &mut String, text: &str) -> Result<(), String> {
    apply_table(config, log_level, &parse_toml(text)?)
}

fn apply_table(
    config: &mut BrokerConfig,
    log_level: &mut String,
    table: &toml::Table,
) -> Result<(), String> {
    let mut users = None;
    for (key, value) in table {
        match key.as_str() {
            "listen" => {
                let list = string_list(value, "listen")?;
                config.listen = parse_addrs(list.iter().map(String::as_str))?;
            }
            "data_dir" => config.data_dir = Some(PathBuf::from(string(value, "data_dir")?)),
            "in_memory" => {
                if value.as_bool().ok_or("in_memory must be true or false")? {
                    config.data_dir = None;
                }
            }
            "log_level" => *log_level = string(value, "log_level")?,
            "vhosts" => config.vhosts = string_list(value, "vhosts")?,
            "expiry" => {
                let mode = value.as_str().ok_or("expiry must be a string")?;
                config.expiry_mode = parse_expiry(mode)?;
            }
            "http" => config.http = parse_http(&string(value, "http")?)?,
            "metrics" => config.metrics = parse_listener("metrics", &string(value, "metrics")?)?,
            "definitions" => {
                config.definitions = Some(PathBuf::from(string(value, "definitions")?))
            }
            "manual_clock" => match value {
                toml::Value::Boolean(false) => {}
                toml::Value::Boolean(true) => config.clock = manual_clock("")?,
                toml::Value::Integer(n) if *n >= 0 => {
                    config.clock = ClockConfig::Manual {
                        start_ms: *n as u64,
                    }
                }
                toml::Value::String(s) => config.clock = manual_clock(s)?,
                _ => {
                    return Err(
                        "manual_clock must be true, ms since 1970 or an RFC 3339 time".into(),
                    )
                }
            },
            "name_seed" => {
                let n = value
                    .as_integer()
                    .filter(|n| *n >= 0)
                    .ok_or("name_seed must be a non-negative integer")?;
                config.name_seed = Some(n as u64);
            }
            "timer_realtime_priority" => {
                let n = value
                    .as_integer()
                    .filter(|n| (1..=99).contains(n))
                    .ok_or("timer_realtime_priority must be an integer from 1 to 99")?;
                config.timer_realtime_priority = Some(n as u8);
            }
            // Read after the loop: a user's default vhosts depend on [[permissions]].
            "users" => users = Some(value),
            "permissions" => {
                let entries = value
                    .as_array()
                    .ok_or("permissions must be an array of tables")?;
                config.permissions = entries.iter().map(permission).collect::<Result<_, _>>()?;
            }
            "policies" => {
                let policies = value
                    .as_array()
                    .ok_or("policies must be an array of tables")?;
                config.policies = policies.iter().map(policy).collect::<Result<_, _>>()?;
            }
            "tls" => config.tls = Some(tls(value)?),
            "limits" => {
                let limits = value.as_table().ok_or("limits must be a table")?;
                for (name, v) in limits {
                    if name == "memory_high_watermark" {
                        config.limits.memory_high_watermark = memory_watermark(v)?;
                        continue;
                    }
                    if name == "memory_high_watermark_paging_ratio" {
                        let ratio = v.as_float().or_else(|| v.as_integer().map(|n| n as f64));
                        // Above 1, as in RabbitMQ, queues never page before the alarm.
                        config.limits.memory_paging_ratio = ratio
                            .filter(|r| r.is_finite() && *r > 0.0)
                            .ok_or("limits.memory_high_watermark_paging_ratio must be a positive number")?;
                        continue;
                    }
                    if name == "disk_free_limit" {
                        config.limits.disk_free_limit = disk_free_limit(v)?;
                        continue;
                    }
                    let n = v
                        .as_integer()
                        .and_then(|n| u64::try_from(n).ok())
                        .ok_or_else(|| format!("limits.{name} must be a non-negative integer"))?;
                    let l = &mut config.limits;
                    let narrow = |max: u64| {
                        if n <= max {
                            Ok(n)
                        } else {
                            Err(format!("limits.{name} must be at most {max}"))
                        }
                    };
                    match name.as_str() {
                        "frame_max" => l.frame_max = narrow(u32::MAX.into())? as u32,
                        "channel_max" => l.channel_max = narrow(u16::MAX.into())? as u16,
                        "heartbeat" => l.heartbeat_secs = narrow(u16::MAX.into())? as u16,
                        "max_connections" => l.max_connections = n as usize,
                        "max_message_size" => l.max_message_size = n,
                        "store_backlog_bytes" => l.store_backlog_bytes = n,
                        "store_cache_bytes" => l.store_cache_bytes = n,
                        "handshake_timeout_ms" => {
                            l.handshake_timeout = std::time::Duration::from_millis(n)
                        }
                        other => {
                            return Err(format!(
                                "unknown setting limits.{other} (known: {})",
                                LIMIT_KEYS.join(", ")
                            ))
                        }
                    }
                }
            }
            other => return Err(format!("unknown setting '{other}'")),
        }
    }
    if let Some(value) = users {
        let users = value.as_array().ok_or("users must be an array of tables")?;
        config.users = users
            .iter()
            .map(|u| user(u, &config.permissions))
            .collect::<Result<_, _>>()?;
    }
    Ok(())
}

/// `[limits] disk_free_limit`, in RabbitMQ's terms: `.absolute = "50MB"` or
/// `.mem_relative = 1.0` (`.relative` too, as rabbitmq.conf spells it), or directly octets or
/// a size with a unit.
fn disk_free_limit(value: &toml::Value) -> Result<DiskFreeLimit, String> {
    const EXPECTED: &str = "limits.disk_free_limit must be octets, a size (\"50MB\"), or a \
         table with one of absolute = \"50MB\" or mem_relative = 1.0";
    let size = |s: &str| {
        MemoryWatermark::parse_absolute(s).map_err(|e| format!("limits.disk_free_limit: {e}"))
    };
    let limit = match value {
        toml::Value::Integer(n) => {
            DiskFreeLimit::Absolute(u64::try_from(*n).map_err(|_| EXPECTED.to_string())?)
        }
        toml::Value::String(s) => DiskFreeLimit::Absolute(size(s)?),
        toml::Value::Table(t) if t.len() == 1 => {
            let (key, v) = t.iter().next().ok_or(EXPECTED)?;
            match (key.as_str(), v) {
                ("absolute", v) => disk_free_limit(v)?,
                ("mem_relative" | "relative", toml::Value::Float(f)) if *f >= 0.0 => {
                    DiskFreeLimit::MemRelative(*f)
                }
                ("mem_relative" | "relative", toml::Value::Integer(n)) if *n >= 0 => {
                    DiskFreeLimit::MemRelative(*n as f64)
                }
                _ => return Err(EXPECTED.into()),
            }
        }
        _ => return Err(EXPECTED.into()),
    };
    Ok(limit)
}

/// `[limits] memory_high_watermark`, in RabbitMQ's terms: `.relative = 0.4` or
/// `.absolute = "2GiB"` (a table, written with dotted keys or inline), or directly a fraction
/// (`0.4`), a number of octets or a size with a unit (`"512MiB"`).
fn memory_watermark(value: &toml::Value) -> Result<MemoryWatermark, String> {
    const EXPECTED: &str = "limits.memory_high_watermark must be a fraction (0.4), octets, a size \
         (\"2GiB\"), or a table with one of relative = 0.4 or absolute = \"2GiB\"";
    let watermark = match value {
        toml::Value::Float(f) => MemoryWatermark::Relative(*f),
        toml::Value::Integer(n) => {
            MemoryWatermark::Absolute(u64::try_from(*n).map_err(|_| EXPECTED.to_string())?)
        }
        toml::Value::String(s) => MemoryWatermark::Absolute(
            MemoryWatermark::parse_absolute(s)
                .map_err(|e| format!("limits.memory_high_watermark: {e}"))?,
        ),
        toml::Value::Table(t) => match (t.len(), t.get("relative"), t.get("absolute")) {
            (1, Some(relative), None) => match relative {
                toml::Value::Float(f) => MemoryWatermark::Relative(*f),
                toml::Value::Integer(n) => MemoryWatermark::Relative(*n as f64),
                _ => return Err(EXPECTED.into()),
            },
            (1, None, Some(absolute @ (toml::Value::Integer(_) | toml::Value::String(_)))) => {
                memory_watermark(absolute)?
            }
            _ => return Err(EXPECTED.into()),
        },
        _ => return Err(EXPECTED.into()),
    };
    watermark
        .validate()
        .map_err(|e| format!("limits.memory_high_watermark: {e}"))?;
    Ok(watermark)
}

fn string(value: &toml::Value, name: &str) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{name} must be a string"))
}

fn string_list(value: &toml::Value, name: &str) -> Result<Vec<String>, String> {
    value
        .as_array()
        .ok_or_else(|| format!("{name} must be an array of strings"))?
        .iter()
        .map(|v| string(v, name))
        .collect()
}

/// One `[[users]]` table. Without `vhosts`, a user gets every vhost (`["*"]`) unless a
/// `[[permissions]]` entry names it.
fn user(value: &toml::Value, permissions: &[PermissionConfig]) -> Result<UserConfig, String> {
    let t = value
        .as_table()
        .ok_or("each [[users]] entry must be a table")?;
    let field = |k: &str| t.get(k).map(|v| string(v, &format!("users.{k}")));
    let name = field("name").ok_or("users.name is required")??;
    let (password, password_hash) = match (field("password"), field("password_hash")) {
        (Some(password), None) => (password?, None),
        (None, Some(hash)) => (String::new(), Some(hash?)),
        _ => {
            return Err(format!(
                "user '{name}' needs exactly one of password and password_hash"
            ))
        }
    };
    let named = permissions.iter().any(|p| p.user == name);
    Ok(UserConfig {
        vhosts: match t.get("vhosts") {
            Some(v) => string_list(v, "users.vhosts")?,
            None if named => Vec::new(),
            None => vec!["*".into()],
        },
        name,
        password,
        password_hash,
        loopback_only: t
            .get("loopback_only")
            .map(|v| {
                v.as_bool()
                    .ok_or("users.loopback_only must be true or false")
            })
            .transpose()?
            .unwrap_or(false),
        tags: match t.get("tags") {
            Some(v) => string_list(v, "users.tags")?,
            None => Vec::new(),
        },
    })
}

/// One `[[permissions]]` table: user, vhost (default "/"), configure, write, read.
fn permission(value: &toml::Value) -> Result<PermissionConfig, String> {
    let t = value
        .as_table()
        .ok_or("each [[permissions]] entry must be a table")?;
    let field = |k: &str| {
        t.get(k)
            .map(|v| string(v, &format!("permissions.{k}")))
            .transpose()
    };
    let required = |k: &str| field(k)?.ok_or_else(|| format!("permissions.{k} is required"));
    Ok(PermissionConfig {
        user: required("user")?,
        vhost: field("vhost")?.unwrap_or_else(|| "/".into()),
        configure: required("configure")?,
        write: required("write")?,
        read: required("read")?,
    })
}

/// The `[tls]` table, with RabbitMQ's `ssl_options` names.
fn tls(value: &toml::Value) -> Result<TlsConfig, String> {
    let table = value.as_table().ok_or("tls must be a table")?;
    let path = |key: &str| -> Result<Option<PathBuf>, String> {
        table
            .get(key)
            .map(|v| string(v, &format!("tls.{key}")).map(PathBuf::from))
            .transpose()
    };
    let certfile = path("certfile")?.ok_or("tls.certfile is required")?;
    let keyfile = path("keyfile")?.ok_or("tls.keyfile is required")?;
    let mut config = TlsConfig::new(SocketAddr::from(([127, 0, 0, 1], 5671)), certfile, keyfile);
    for (key, v) in table {
        match key.as_str() {
            "certfile" | "keyfile" => {}
            "cacertfile" => config.cacertfile = path("cacertfile")?,
            "listen" => {
                let list = string_list(v, "tls.listen")?;
                config.listen = parse_addrs(list.iter().map(String::as_str))?;
            }
            "verify" => {
                config.verify = match string(v, "tls.verify")?.as_str() {
                    "verify_none" => TlsVerify::VerifyNone,
                    "verify_peer" => TlsVerify::VerifyPeer,
                    other => {
                        return Err(format!(
                            "tls.verify must be verify_none or verify_peer, not '{other}'"
                        ))
                    }
                }
            }
            "fail_if_no_peer_cert" => {
                config.fail_if_no_peer_cert = v
                    .as_bool()
                    .ok_or("tls.fail_if_no_peer_cert must be true or false")?;
            }
            other => {
                return Err(format!(
                    "unknown setting tls.{other} (known: listen, certfile, keyfile, cacertfile, verify, fail_if_no_peer_cert)"
                ))
            }
        }
    }
    Ok(config)
}

/// One `[[policies]]` table.
fn policy(value: &toml::Value) -> Result<PolicyConfig, String> {
    let table = value.as_table().ok_or("each policy must be a table")?;
    let text = |key: &str| table.get(key).and_then(toml::Value::as_str);
    let name = text("name").ok_or("a policy needs a name")?.to_string();
    let invalid = |e: String| format!("policy '{name}': {e}");
    let pattern = text("pattern")
        .ok_or_else(|| invalid("pattern is missing".into()))?
        .to_string();
    let apply_to = ApplyTo::from_name(text("apply_to").unwrap_or("all"))
        .map_err(|e| invalid(e.to_string()))?;
    let priority = match table.get("priority") {
        None => 0,
        Some(v) => v
            .as_integer()
            .ok_or_else(|| invalid("priority must be an integer".into()))?,
    };
    let definition = table
        .get("definition")
        .and_then(toml::Value::as_table)
        .ok_or_else(|| invalid("definition must be a table".into()))?;
    let entries = definition
        .iter()
        .map(|(key, v)| match v {
            toml::Value::Integer(n) => Ok((key.as_str(), PolicyValue::Integer(*n))),
            toml::Value::String(s) => Ok((key.as_str(), PolicyValue::Text(s.clone()))),
            _ => Err(invalid(format!("{key} must be an integer or a string"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let definition = PolicyDefinition::from_entries(entries).map_err(|e| invalid(e.to_string()))?;
    Ok(PolicyConfig {
        vhost: text("vhost").unwrap_or("/").to_string(),
        policy: Policy {
            name,
            pattern,
            apply_to,
            priority,
            definition,
        },
    })
}

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests_enumeration;

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Settings, String> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        match parse(args.iter().map(|s| s.to_string()), |k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })? {
            Command::Run(s) => Ok(*s),
            _ => Err("not run".into()),
        }
    }

    #[test]
    fn defaults_listen_on_both_loopbacks() {
        let s = run(&[], &[]).unwrap();
        assert_eq!(s.config.listen.len(), 2);
        assert!(s.config.listen.iter().any(|a| a.is_ipv6()));
        assert_eq!(s.config.data_dir, Some(PathBuf::from("./dwellmq-data")));
    }

    #[test]
    fn flags_beat_environment() {
        let s = run(
            &["--listen", "127.0.0.1:0", "--listen=[::1]:0", "--in-memory"],
            &[
                ("DWELLMQ_LISTEN", "127.0.0.1:9999"),
                ("DWELLMQ_DATA_DIR", "/tmp/x"),
            ],
        )
        .unwrap();
        assert_eq!(s.config.listen.len(), 2);
        assert_eq!(s.config.listen[0].port(), 0);
        assert_eq!(s.config.data_dir, None);
    }

    #[test]
    fn bad_input_is_explained() {
        assert!(run(&["--listen", "nope"], &[])
            .unwrap_err()
            .contains("invalid listen address"));
        assert!(run(&["--frobnicate"], &[])
            .unwrap_err()
            .contains("unknown option"));
        assert!(run(&["--listen"], &[])
            .unwrap_err()
            .contains("needs a value"));
    }

    #[test]
    fn timer_priority_is_validated() {
        let s = run(&["--timer-rt-priority", "10"], &[]).unwrap();
        assert_eq!(s.config.timer_realtime_priority, Some(10));
        assert!(run(&["--timer-rt-priority", "0"], &[]).is_err());
        assert!(run(&["--timer-rt-priority", "high"], &[]).is_err());
        let mut config = BrokerConfig::default();
        let mut level = String::new();
        apply_file(&mut config, &mut level, "timer_realtime_priority = 20").unwrap();
        assert_eq!(config.timer_realtime_priority, Some(20));
        assert!(apply_file(&mut config, &mut level, "timer_realtime_priority = 100").is_err());
    }

    #[test]
    fn metrics_take_an_address_and_are_off_by_default() {
        assert_eq!(run(&[], &[]).unwrap().config.metrics, None);
        let s = run(&["--metrics", "127.0.0.1:15692"], &[]).unwrap();
        assert_eq!(s.config.metrics, Some("127.0.0.1:15692".parse().unwrap()));
        let s = run(&[], &[("DWELLMQ_METRICS", "0.0.0.0:9419")]).unwrap();
        assert_eq!(s.config.metrics, Some("0.0.0.0:9419".parse().unwrap()));
        assert!(run(&["--metrics", "x"], &[])
            .err()
            .unwrap()
            .contains("invalid --metrics"));
        let mut config = BrokerConfig::default();
        apply_file(&mut config, &mut String::new(), "metrics = \"[::1]:15692\"").unwrap();
        assert_eq!(config.metrics, Some("[::1]:15692".parse().unwrap()));
    }

    #[test]
    fn http_takes_an_address_or_off() {
        let s = run(&[], &[]).unwrap();
        assert_eq!(s.config.http, Some("127.0.0.1:15672".parse().unwrap()));
        let s = run(&["--http", "off"], &[]).unwrap();
        assert_eq!(s.config.http, None);
        let s = run(&["--http=0.0.0.0:8080"], &[("DWELLMQ_HTTP", "off")]).unwrap();
        assert_eq!(s.config.http, Some("0.0.0.0:8080".parse().unwrap()));
        assert!(run(&["--http", "nope"], &[])
            .unwrap_err()
            .contains("invalid --http"));
    }

    #[test]
    fn http_takes_a_free_port_when_every_amqp_port_is_free_and_http_is_unnamed() {
        let http = |args: &[&str], env: &[(&str, &str)]| run(args, env).unwrap().config.http;
        let ephemeral = Some("127.0.0.1:0".parse().unwrap());
        let fixed = Some("127.0.0.1:15672".parse().unwrap());
        assert_eq!(http(&["--listen", "127.0.0.1:0"], &[]), ephemeral);
        assert_eq!(
            http(&[], &[("DWELLMQ_LISTEN", "127.0.0.1:0,[::1]:0")]),
            ephemeral
        );
        // One fixed AMQP port: the user chose ports, HTTP keeps RabbitMQ's.
        assert_eq!(http(&[], &[]), fixed);
        assert_eq!(
            http(&["--listen", "127.0.0.1:0", "--listen", "[::1]:5672"], &[]),
            fixed
        );
        // An HTTP address named anywhere is kept, even RabbitMQ's (it fails loudly if taken).
        assert_eq!(
            http(
                &["--listen", "127.0.0.1:0", "--http", "127.0.0.1:15672"],
                &[]
            ),
            fixed
        );
        assert_eq!(
            http(
                &["--listen", "127.0.0.1:0"],
                &[("DWELLMQ_HTTP", "127.0.0.1:15672")]
            ),
            fixed
        );
        assert_eq!(
            http(&["--listen", "127.0.0.1:0", "--http", "off"], &[]),
            None
        );
        let mut config = BrokerConfig {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            tls: Some(dwellmq::TlsConfig::new(
                "127.0.0.1:5671".parse().unwrap(),
                "c",
                "k",
            )),
            ..BrokerConfig::default()
        };
        follow_ephemeral_amqp(&mut config);
        assert_eq!(config.http, fixed, "TLS on a fixed port is a chosen port");
    }

    #[test]
    fn an_http_address_in_the_config_file_is_kept() {
        let file =
            std::env::temp_dir().join(format!("dwellmq-cli-http-{}.toml", std::process::id()));
        std::fs::write(
            &file,
            "listen = [\"127.0.0.1:0\"]\nhttp = \"127.0.0.1:15672\"\n",
        )
        .unwrap();
        let s = run(&["--config", file.to_str().unwrap()], &[]);
        let _ = std::fs::remove_file(&file);
        assert_eq!(
            s.unwrap().config.http,
            Some("127.0.0.1:15672".parse().unwrap())
        );
    }

    #[test]
    fn policies_from_the_file() {
        let mut config = BrokerConfig::default();
        let mut level = String::new();
        apply_file(
            &mut config,
            &mut level,
            r#"
            [[policies]]
            name = "delayed-retry"
            pattern = "^orders\\."
            apply_to = "quorum_queues"
            definition = { delivery-limit = 20, delayed-retry-type = "failed", delayed-retry-min = 30000, delayed-retry-max = 120000 }
            "#,
        )
        .unwrap();
        let [PolicyConfig { vhost, policy }] = config.policies.as_slice() else {
            panic!("one policy expected: {:?}", config.policies)
        };
        assert_eq!(vhost, "/");
        assert_eq!(policy.pattern, "^orders\\.");
        assert_eq!(policy.apply_to, ApplyTo::QuorumQueues);
        assert_eq!(policy.definition.delayed_retry_max, Some(120_000));
        let bad = apply_file(
            &mut config,
            &mut level,
            "[[policies]]\nname = 'p'\npattern = '.*'\ndefinition = { message-ttl = -5 }",
        );
        assert_eq!(
            bad.unwrap_err(),
            "policy 'p': Validation failed: -5 is not a valid message-ttl"
        );
    }

    #[test]
    fn manual_clock_and_name_seed() {
        let s = run(&["--manual-clock", "--in-memory"], &[]).unwrap();
        assert!(matches!(s.config.clock, ClockConfig::Manual { start_ms } if start_ms > 0));
        assert_eq!(s.config.data_dir, None);
        let s = run(&["--manual-clock", "2026-01-01T09:00:00Z"], &[]).unwrap();
        assert_eq!(
            s.config.clock,
            ClockConfig::Manual {
                start_ms: 1_767_258_000_000
            }
        );
        let s = run(&["--manual-clock=5000", "--name-seed", "7"], &[]).unwrap();
        assert_eq!(s.config.clock, ClockConfig::Manual { start_ms: 5000 });
        assert_eq!(s.config.name_seed, Some(7));
        assert!(run(&["--manual-clock", "yesterday"], &[]).is_err());
        assert!(run(&["--name-seed", "x"], &[]).is_err());
        let mut config = BrokerConfig::default();
        let mut level = String::new();
        apply_file(&mut config, &mut level, "manual_clock = 42\nname_seed = 3").unwrap();
        assert_eq!(config.clock, ClockConfig::Manual { start_ms: 42 });
        assert_eq!(config.name_seed, Some(3));
        assert!(apply_file(&mut config, &mut level, "manual_clock = 'soon'").is_err());
    }

    #[test]
    fn expiry_mode_from_flag_and_file() {
        let s = run(&["--expiry", "head-only"], &[]).unwrap();
        assert_eq!(s.config.expiry_mode, ExpiryMode::HeadOnly);
        assert!(run(&["--expiry", "sometimes"], &[]).is_err());
        let mut config = BrokerConfig::default();
        let mut level = String::new();
        apply_file(&mut config, &mut level, "expiry = 'head-only'").unwrap();
        assert_eq!(config.expiry_mode, ExpiryMode::HeadOnly);
        assert!(apply_file(&mut config, &mut level, "expiry = 1").is_err());
    }

    #[test]
    fn help_lists_every_limit_the_file_accepts() {
        let help = usage();
        for key in LIMIT_KEYS {
            assert!(
                help.contains(&format!("{key} = ")),
                "{key} missing from --help"
            );
            let mut config = BrokerConfig::default();
            let mut level = String::new();
            apply_file(&mut config, &mut level, &format!("[limits]\n{key} = 10"))
                .unwrap_or_else(|e| panic!("{key}: {e}"));
        }
        assert!(help.contains("frame_max = 131072"), "{help}");
        assert!(help.contains("(default: info)"), "{help}");
        assert!(help.contains("SIGTERM"), "{help}");
        assert!(help.contains("replaces the default guest"), "{help}");
    }

    #[test]
    fn tls_from_the_file_and_the_flag() {
        let mut config = BrokerConfig::default();
        let mut level = String::new();
        apply_file(
            &mut config,
            &mut level,
            "[tls]\ncertfile = 'c.pem'\nkeyfile = 'k.pem'\ncacertfile = 'ca.pem'\n\
             verify = 'verify_peer'\nfail_if_no_peer_cert = true",
        )
        .unwrap();
        let tls = config.tls.unwrap();
        assert_eq!(tls.listen, vec!["127.0.0.1:5671".parse().unwrap()]);
        assert_eq!(tls.certfile, PathBuf::from("c.pem"));
        assert_eq!(tls.cacertfile, Some(PathBuf::from("ca.pem")));
        assert_eq!(tls.verify, TlsVerify::VerifyPeer);
        assert!(tls.fail_if_no_peer_cert);
        for (bad, says) in [
            ("[tls]\nkeyfile = 'k'", "certfile"),
            (
                "[tls]\ncertfile = 'c'\nkeyfile = 'k'\nverify = 'maybe'",
                "verify_peer",
            ),
            (
                "[tls]\ncertfile = 'c'\nkeyfile = 'k'\nciphers = 1",
                "unknown setting tls.ciphers",
            ),
        ] {
            let error = apply_file(&mut BrokerConfig::default(), &mut level, bad).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
        let error = run(&["--tls-listen", "0.0.0.0:5671"], &[]).unwrap_err();
        assert!(error.contains("[tls]"), "{error}");
    }

    #[test]
    fn http_and_tags_from_the_file() {
        let mut config = BrokerConfig::default();
        let mut level = String::new();
        apply_file(
            &mut config,
            &mut level,
            "http = \"off\"\n[[users]]\nname = \"ops\"\npassword = \"pw\"\ntags = [\"monitoring\"]",
        )
        .unwrap();
        assert_eq!(config.http, None);
        assert_eq!(config.users[0].tags, vec!["monitoring".to_string()]);
        let s = run(&["--definitions", "defs.json"], &[]).unwrap();
        assert_eq!(s.config.definitions, Some(PathBuf::from("defs.json")));
    }

    #[test]
    fn disk_free_limit_in_rabbitmqs_terms() {
        let limit = |text: &str| {
            let mut config = BrokerConfig::default();
            let mut level = String::new();
            apply_file(&mut config, &mut level, &format!("[limits]\n{text}"))
                .map(|()| config.limits.disk_free_limit)
        };
        assert_eq!(
            BrokerConfig::default().limits.disk_free_limit,
            DiskFreeLimit::Absolute(50_000_000)
        );
        let two_gb = Ok(DiskFreeLimit::Absolute(2_000_000_000));
        assert_eq!(limit("disk_free_limit = \"2GB\""), two_gb);
        assert_eq!(limit("disk_free_limit.absolute = \"2GB\""), two_gb);
        assert_eq!(limit("disk_free_limit = 2000000000"), two_gb);
        assert_eq!(
            limit("disk_free_limit.mem_relative = 1.5"),
            Ok(DiskFreeLimit::MemRelative(1.5))
        );
        assert_eq!(
            limit("disk_free_limit = { relative = 2 }"),
            Ok(DiskFreeLimit::MemRelative(2.0))
        );
        for bad in [
            "disk_free_limit.mem_relative = -1.0",
            "disk_free_limit = \"lots\"",
            "disk_free_limit = { absolute = 1, mem_relative = 1.0 }",
        ] {
            assert!(limit(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn memory_watermark_in_rabbitmqs_terms() {
        let watermark = |text: &str| {
            let mut config = BrokerConfig::default();
            let mut level = String::new();
            apply_file(&mut config, &mut level, &format!("[limits]\n{text}"))
                .map(|()| config.limits.memory_high_watermark)
        };
        assert_eq!(
            BrokerConfig::default().limits.memory_high_watermark,
            MemoryWatermark::Relative(0.4)
        );
        let relative = MemoryWatermark::Relative(0.6);
        assert_eq!(
            watermark("memory_high_watermark.relative = 0.6"),
            Ok(relative)
        );
        assert_eq!(
            watermark("memory_high_watermark = { relative = 0.6 }"),
            Ok(relative)
        );
        assert_eq!(watermark("memory_high_watermark = 0.6"), Ok(relative));
        assert_eq!(
            watermark("memory_high_watermark.relative = 1"),
            Ok(MemoryWatermark::Relative(1.0))
        );
        let two_gib = MemoryWatermark::Absolute(2 << 30);
        assert_eq!(
            watermark("memory_high_watermark.absolute = \"2GiB\""),
            Ok(two_gib)
        );
        assert_eq!(
            watermark("memory_high_watermark.absolute = \"2G\""),
            Ok(two_gib)
        );
        assert_eq!(
            watermark("memory_high_watermark.absolute = 2147483648"),
            Ok(two_gib)
        );
        assert_eq!(watermark("memory_high_watermark = 2147483648"), Ok(two_gib));
        assert_eq!(
            watermark("memory_high_watermark = \"512MB\""),
            Ok(MemoryWatermark::Absolute(512_000_000))
        );
        for bad in [
            "memory_high_watermark.relative = -0.1",
            "memory_high_watermark.relative = nan",
            "memory_high_watermark.absolute = \"2 parsecs\"",
            "memory_high_watermark.absolute = -5",
            "memory_high_watermark = { relative = 0.4, absolute = 100 }",
            "memory_high_watermark.fraction = 0.4",
            "memory_high_watermark = true",
        ] {
            let err = watermark(bad).expect_err(bad);
            assert!(err.contains("memory_high_watermark"), "{bad}: {err}");
        }
        let help = usage();
        assert!(
            help.contains("memory_high_watermark = { relative = 0.4 }"),
            "{help}"
        );
        assert!(help.contains(".absolute"), "{help}");
    }

    #[test]
    fn config_file_settings_apply() {
        let mut config = BrokerConfig::default();
        let mut level = String::new();
        apply_file(
            &mut config,
            &mut level,
            r#"
            listen = ["127.0.0.1:0"]
            in_memory = true
            log_level = "debug"
            vhosts = ["/", "staging"]
            [[users]]
            name = "app"
            password = "secret"
            [limits]
            channel_max = 16
            "#,
        )
        .unwrap();
        assert_eq!(config.data_dir, None);
        assert_eq!(level, "debug");
        assert_eq!(config.users[0].name, "app");
        assert!(!config.users[0].loopback_only);
        assert_eq!(config.limits.channel_max, 16);
        assert!(apply_file(&mut config, &mut level, "[limits]\nchannel_max = 70000").is_err());
    }

    #[test]
    fn users_take_a_hash_and_permissions_replace_the_default_vhosts() {
        let mut config = BrokerConfig::default();
        let mut level = String::new();
        apply_file(
            &mut config,
            &mut level,
            r#"
            [[users]]
            name = "app"
            password_hash = "AQIDBKSR723asempcKRBlyrPWcL1zhEiLhyy/se3Vks7S5g+"
            tags = ["management"]
            [[users]]
            name = "other"
            password = "pw"
            [[permissions]]
            user = "app"
            configure = "^app\\."
            write = ".*"
            read = ""
            "#,
        )
        .unwrap();
        let app = &config.users[0];
        assert_eq!(
            app.password_hash.as_deref(),
            Some("AQIDBKSR723asempcKRBlyrPWcL1zhEiLhyy/se3Vks7S5g+")
        );
        assert!(app.vhosts.is_empty(), "named by [[permissions]]");
        assert_eq!(config.users[1].vhosts, ["*"]);
        assert_eq!(config.permissions[0].vhost, "/");
        assert_eq!(config.permissions[0].configure, "^app\\.");
        for bad in [
            "[[users]]\nname = \"x\"",
            "[[users]]\nname = \"x\"\npassword = \"a\"\npassword_hash = \"b\"",
            "[[permissions]]\nuser = \"x\"\nwrite = \"\"\nread = \"\"",
        ] {
            assert!(apply_file(&mut config, &mut level, bad).is_err(), "{bad}");
        }
    }
}
