//! Broker configuration: what `Broker::start` takes and what the binary builds from flags.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;

pub use dwellmq_core::policy::{ApplyTo, Policy, PolicyDefinition, PolicyError, PolicyValue};
pub use dwellmq_core::queue::ExpiryMode;

/// A policy and the vhost it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyConfig {
    /// The vhost.
    pub vhost: String,
    /// The policy.
    pub policy: Policy,
}

/// A user who may connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserConfig {
    /// Login name.
    pub name: String,
    /// Password (PLAIN / AMQPLAIN).
    pub password: String,
    /// Vhosts the user may open; `["*"]` means all of them.
    pub vhosts: Vec<String>,
    /// Only connections from a loopback address may log in as this user (RabbitMQ's rule for
    /// `guest`).
    pub loopback_only: bool,
}

impl UserConfig {
    /// RabbitMQ's default user: `guest`/`guest`, every vhost, loopback only.
    pub fn guest() -> Self {
        UserConfig {
            name: "guest".into(),
            password: "guest".into(),
            vhosts: vec!["*".into()],
            loopback_only: true,
        }
    }

    /// Whether the user may open `vhost`.
    pub fn may_open(&self, vhost: &str) -> bool {
        self.vhosts.iter().any(|v| v == "*" || v == vhost)
    }
}

/// Limits that keep the broker alive under hostile or careless peers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest frame (octets, framing included) offered in `connection.tune`.
    pub frame_max: u32,
    /// Highest channel number offered in `connection.tune`.
    pub channel_max: u16,
    /// Heartbeat interval offered in `connection.tune`, seconds (0 = none).
    pub heartbeat_secs: u16,
    /// Connections beyond this are refused.
    pub max_connections: usize,
    /// Largest message body accepted (RabbitMQ's `max_message_size`).
    pub max_message_size: u64,
    /// A client must complete the handshake (up to `connection.open`) within this time
    /// (RabbitMQ's `handshake_timeout`).
    pub handshake_timeout: std::time::Duration,
    /// Above this many bytes of messages held, publishing connections are blocked
    /// (`connection.blocked`) until usage falls below it again.
    pub memory_high_watermark: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            frame_max: 131_072,
            channel_max: 2047,
            heartbeat_secs: 60,
            max_connections: 16_384,
            max_message_size: 128 << 20,
            handshake_timeout: std::time::Duration::from_secs(10),
            memory_high_watermark: 2 << 30,
        }
    }
}

/// Which clock drives the broker's deadlines (delays, TTLs, expiries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockConfig {
    /// Wall-clock time.
    #[default]
    System,
    /// Time moves only through `BrokerHandle::advance` / `set_now`; starts at `start_ms`
    /// (milliseconds since the Unix epoch).
    Manual {
        /// The initial time.
        start_ms: u64,
    },
}

/// Everything `Broker::start` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// Addresses to listen on; port 0 picks a free port.
    pub listen: Vec<SocketAddr>,
    /// Where durable state lives; `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    /// Users who may connect.
    pub users: Vec<UserConfig>,
    /// Virtual hosts (`/` is always present).
    pub vhosts: Vec<String>,
    /// Resource limits.
    pub limits: Limits,
    /// The clock.
    pub clock: ClockConfig,
    /// Run the thread that releases delayed messages under the real-time `SCHED_FIFO` policy
    /// at this priority (1-99; Linux, needs CAP_SYS_NICE). On a busy machine this keeps
    /// releases on time when other threads compete for the cores; `None` leaves it a normal
    /// thread.
    pub timer_realtime_priority: Option<u8>,
    /// When expired messages leave their queues: at their deadline wherever they are
    /// (`OnTime`, the default), or only from the head of the queue as RabbitMQ does
    /// (`HeadOnly`, for exact fidelity).
    pub expiry_mode: ExpiryMode,
    /// Policies applied at start (more can be set at runtime through `BrokerHandle`).
    pub policies: Vec<PolicyConfig>,
    /// For reproducible test runs only: server-generated names (`amq.gen-` queues,
    /// `amq.ctag-` consumer tags, direct reply-to addresses) come from a generator seeded with
    /// this value, so the same run gives the same names. They are then guessable. `None` (the
    /// default) draws them from the operating system's CSPRNG.
    pub name_seed: Option<u64>,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            listen: vec![
                SocketAddr::from((Ipv4Addr::LOCALHOST, 5672)),
                SocketAddr::from((Ipv6Addr::LOCALHOST, 5672)),
            ],
            data_dir: Some(PathBuf::from("./dwellmq-data")),
            users: vec![UserConfig::guest()],
            vhosts: vec!["/".into()],
            limits: Limits::default(),
            clock: ClockConfig::System,
            timer_realtime_priority: None,
            expiry_mode: ExpiryMode::OnTime,
            policies: Vec::new(),
            name_seed: None,
        }
    }
}

impl BrokerConfig {
    /// An in-memory broker on an ephemeral loopback port: the CI test double.
    pub fn ephemeral() -> Self {
        BrokerConfig {
            listen: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 0))],
            data_dir: None,
            ..BrokerConfig::default()
        }
    }

    /// The same, expiring messages only from the head of their queues, as RabbitMQ does.
    pub fn with_head_only_expiry(mut self) -> Self {
        self.expiry_mode = ExpiryMode::HeadOnly;
        self
    }

    /// The same, with server-generated names drawn from a generator seeded with `seed`
    /// (reproducible, and guessable: for tests only).
    pub fn with_name_seed(mut self, seed: u64) -> Self {
        self.name_seed = Some(seed);
        self
    }

    /// The same, with a manual clock starting at `start_ms`.
    pub fn with_manual_clock(mut self, start_ms: u64) -> Self {
        self.clock = ClockConfig::Manual { start_ms };
        self
    }
}
