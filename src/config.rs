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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserConfig {
    /// Login name.
    pub name: String,
    /// Password (PLAIN / AMQPLAIN); stored hashed at start. Ignored when `password_hash` is
    /// set.
    pub password: String,
    /// The password as RabbitMQ stores it (`password_hash` of a definitions file:
    /// base64 of a 4-byte salt and SHA-256 of salt and password,
    /// `rabbit_password_hashing_sha256`), instead of `password`.
    pub password_hash: Option<String>,
    /// Shorthand for full permissions (`.*` configure, write and read) in these vhosts;
    /// `["*"]` means all of them. A [`PermissionConfig`] for the same user and vhost takes
    /// precedence.
    pub vhosts: Vec<String>,
    /// Only connections from a loopback address may log in as this user (RabbitMQ's rule for
    /// `guest`).
    pub loopback_only: bool,
    /// RabbitMQ's user tags, which decide what the user may do over HTTP: `management` (see and
    /// change the vhosts it may open), `monitoring` (also see every vhost), `administrator`
    /// (everything, including users and definitions). A user without tags may only use AMQP.
    pub tags: Vec<String>,
}

impl UserConfig {
    /// RabbitMQ's default user: `guest`/`guest`, every vhost, loopback only.
    pub fn guest() -> Self {
        UserConfig {
            name: "guest".into(),
            password: "guest".into(),
            password_hash: None,
            vhosts: vec!["*".into()],
            loopback_only: true,
            tags: vec!["administrator".into()],
        }
    }
}

/// A user's permissions in one vhost: RabbitMQ's configure / write / read regular
/// expressions, matched against resource names without anchoring (as RabbitMQ's `re:run`);
/// an empty pattern allows nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionConfig {
    /// The user.
    pub user: String,
    /// The vhost.
    pub vhost: String,
    /// Declare and delete queues and exchanges whose names match.
    pub configure: String,
    /// Publish to matching exchanges, bind matching queues (and exchanges) as destinations.
    pub write: String,
    /// Consume from, get from and purge matching queues, bind from matching exchanges.
    pub read: String,
}

impl PermissionConfig {
    /// Everything in `vhost` (`.*` three times).
    pub fn full(user: &str, vhost: &str) -> Self {
        PermissionConfig {
            user: user.into(),
            vhost: vhost.into(),
            configure: ".*".into(),
            write: ".*".into(),
            read: ".*".into(),
        }
    }
}

/// When publishers are blocked: RabbitMQ's `vm_memory_high_watermark`.
///
/// What is compared with it is what the broker holds for messages: their bodies plus
/// [`MESSAGE_MEMORY_OVERHEAD`](crate::MESSAGE_MEMORY_OVERHEAD) per message as published, or
/// what a small one holds packed while it waits in a queue
/// ([`queued_message_footprint`](crate::queued_message_footprint)) or a delayed exchange.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryWatermark {
    /// A fraction of the memory available to the process: its cgroup's memory limit if it has
    /// one below the machine's RAM, else the RAM (`vm_memory_high_watermark.relative`). Values
    /// above 1 count as 1; 0 blocks every publishing connection. RabbitMQ assumes 1 GiB of
    /// memory where it cannot tell, and so does dwellmq.
    Relative(f64),
    /// Octets (`vm_memory_high_watermark.absolute`), capped at the memory available when that
    /// is known, as RabbitMQ caps it.
    Absolute(u64),
}

impl MemoryWatermark {
    /// The default: 0.4 of the available memory (RabbitMQ 3.x's default; RabbitMQ 4 raised its
    /// own to 0.6).
    pub const DEFAULT: MemoryWatermark = MemoryWatermark::Relative(0.4);

    /// The watermark in octets for a process that may use `available` octets.
    pub fn resolve(self, available: u64) -> u64 {
        match self {
            // The product is at most `available`, so the cast back cannot overflow.
            MemoryWatermark::Relative(fraction) => (available as f64 * fraction.min(1.0)) as u64,
            MemoryWatermark::Absolute(octets) => octets.min(available),
        }
    }

    /// Parses an absolute size as RabbitMQ's `vm_memory_high_watermark.absolute` takes it:
    /// octets (`1073741824`), or a number and a unit: `k`/`KiB`, `M`/`MiB`, `G`/`GiB`,
    /// `T`/`TiB` (powers of 1024) or `kB`, `MB`, `GB`, `TB` (powers of 1000), in any case.
    pub fn parse_absolute(text: &str) -> Result<u64, String> {
        let text = text.trim();
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = text.split_at(digits);
        let invalid =
            || format!("invalid memory size '{text}' (expected octets, or e.g. 512MiB, 2GB, 1G)");
        let number: u64 = number.parse().map_err(|_| invalid())?;
        let unit = unit.to_ascii_lowercase();
        let multiplier: u64 = match unit.as_str() {
            "" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            _ => return Err(invalid()),
        };
        number.checked_mul(multiplier).ok_or_else(invalid)
    }

    /// Refuses a fraction that is not a number of 0 or more (`Broker::start` does too).
    pub fn validate(self) -> Result<(), String> {
        match self {
            MemoryWatermark::Relative(f) if !(f >= 0.0 && f.is_finite()) => Err(format!(
                "a relative memory watermark must be a fraction of 0 or more, not {f}"
            )),
            _ => Ok(()),
        }
    }
}

impl Default for MemoryWatermark {
    fn default() -> Self {
        MemoryWatermark::DEFAULT
    }
}

impl std::fmt::Display for MemoryWatermark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemoryWatermark::Relative(fraction) => write!(f, "{{ relative = {fraction} }}"),
            MemoryWatermark::Absolute(octets) => write!(f, "{{ absolute = {octets} }}"),
        }
    }
}

/// When publishers are blocked for want of disk space: RabbitMQ's `disk_free_limit`. Checked
/// on the data directory's file system (with a data directory only: in memory nothing is
/// written).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DiskFreeLimit {
    /// Octets of free space (`disk_free_limit.absolute`).
    Absolute(u64),
    /// A multiple of the memory available to the process (`disk_free_limit.relative`, which
    /// RabbitMQ also calls `{mem_relative, N}`): at 1.0, as much free disk as RAM.
    MemRelative(f64),
}

impl DiskFreeLimit {
    /// RabbitMQ's default: 50 MB.
    pub const DEFAULT: DiskFreeLimit = DiskFreeLimit::Absolute(50_000_000);

    /// The limit in octets for a process that may use `memory` octets.
    pub fn resolve(self, memory: u64) -> u64 {
        match self {
            DiskFreeLimit::Absolute(octets) => octets,
            DiskFreeLimit::MemRelative(factor) => (memory as f64 * factor.max(0.0)) as u64,
        }
    }
}

impl Default for DiskFreeLimit {
    fn default() -> Self {
        DiskFreeLimit::DEFAULT
    }
}

impl std::fmt::Display for DiskFreeLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DiskFreeLimit::Absolute(octets) => write!(f, "{{ absolute = {octets} }}"),
            DiskFreeLimit::MemRelative(factor) => write!(f, "{{ mem_relative = {factor} }}"),
        }
    }
}

/// Limits that keep the broker alive under hostile or careless peers.
#[derive(Debug, Clone, PartialEq)]
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
    /// Above this much memory held for messages, publishing connections are blocked
    /// (`connection.blocked` with reason `low on memory`) until usage falls to it again.
    pub memory_high_watermark: MemoryWatermark,
    /// With a data directory: above this fraction of the memory high watermark, classic
    /// queues leave what lies beyond their window on disk, transient messages included
    /// (RabbitMQ's `vm_memory_high_watermark_paging_ratio`), so that the alarm blocks
    /// publishers only when that cannot keep up. 0.5 by default; above 1, queues do not page
    /// before the alarm.
    pub memory_paging_ratio: f64,
    /// With a data directory: above this many octets queued for the store's writer and not
    /// yet committed (messages' stored size plus 64 per write), publishing connections are
    /// blocked (`connection.blocked`, `low on disk`) until the backlog is down to half of it.
    /// Bounds what publishers without confirms can pile up in front of a slow disk.
    pub store_backlog_bytes: u64,
    /// With a data directory: the store's page cache (redb's), in octets. Not counted
    /// against the memory watermark: with the broker's base it is most of the memory a
    /// broker paging under pressure holds beyond the watermark. 64 MiB by default.
    pub store_cache_bytes: u64,
    /// With a data directory: below this much free space on its file system, publishing
    /// connections are blocked (`connection.blocked`, `low on disk`) before the disk fills up.
    pub disk_free_limit: DiskFreeLimit,
    /// With a data directory: a durable classic queue keeps at most this many ready messages
    /// in memory in front of its consumers, and leaves those further back in the store only
    /// (read back a page at a time as consumers come to them).
    pub queue_window_messages: usize,
    /// The same window in body octets (whichever limit is reached first).
    pub queue_window_bytes: u64,
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
            memory_high_watermark: MemoryWatermark::DEFAULT,
            memory_paging_ratio: 0.5,
            store_backlog_bytes: 64 << 20,
            store_cache_bytes: 64 << 20,
            disk_free_limit: DiskFreeLimit::DEFAULT,
            queue_window_messages: dwellmq_core::paging::Paging::DEFAULT.window_messages,
            queue_window_bytes: dwellmq_core::paging::Paging::DEFAULT.window_bytes,
        }
    }
}

/// Which clock drives the broker's deadlines (delays, TTLs, expiries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockConfig {
    /// The host's wall clock as read at start, advanced by monotonic time: a step of the
    /// host's clock while the broker runs moves no deadline (the rule is in docs/compat.md).
    #[default]
    System,
    /// The system clock, but reading the wall clock at start from `wall` (the host's plus an
    /// offset a test steps): tests of what a step of the wall clock does.
    #[doc(hidden)]
    SystemWithTestWall(&'static dwellmq_timer::SteppableWall),
    /// Time moves only through `BrokerHandle::advance` / `set_now`; starts at `start_ms`
    /// (milliseconds since the Unix epoch).
    Manual {
        /// The initial time.
        start_ms: u64,
    },
}

/// Everything `Broker::start` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct BrokerConfig {
    /// Addresses to listen on; port 0 picks a free port.
    pub listen: Vec<SocketAddr>,
    /// Where durable state lives (durable exchanges, queues, bindings and policies, and
    /// persistent messages on durable queues, in one redb file); `None` (the default for
    /// embedders) keeps everything in memory and writes nothing. A second broker on the same
    /// directory is refused at start.
    pub data_dir: Option<PathBuf>,
    /// Users who may connect. Without a user named `guest` here, there is no `guest` (the
    /// broker logs that at start).
    pub users: Vec<UserConfig>,
    /// Permissions per user and vhost, beyond the `vhosts` shorthand of each user.
    pub permissions: Vec<PermissionConfig>,
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
    /// Where the HTTP management API and `/metrics` listen (RabbitMQ's port 15672, the
    /// default when the `http` feature is on); `None` turns HTTP off. Port 0 picks a free
    /// port. Without the `http` cargo feature it must be `None` (the default then).
    pub http: Option<SocketAddr>,
    /// Where Prometheus `/metrics` is also served on a listener of its own (RabbitMQ's
    /// `rabbitmq_prometheus` port, 15692), with nothing else; `None` (the default) leaves
    /// `/metrics` on the HTTP API's listener only. Needs the `http` cargo feature.
    pub metrics: Option<SocketAddr>,
    /// Host names the HTTP listener answers to besides `localhost` and IP literals (matched
    /// case-insensitively, without the port): the names operators reach it by, e.g.
    /// `broker.internal`. A request whose `Host` names anything else is refused (403), so that
    /// a web page whose name is re-pointed at this host (DNS rebinding) cannot use the API from
    /// an operator's browser. Empty by default.
    pub http_allowed_hosts: Vec<String>,
    /// Serve the test double's `/test/...` HTTP endpoints (moving the clock, reset, faults)
    /// even without a manual clock; with a manual clock they are always served. Off by
    /// default, on in [`BrokerConfig::ephemeral`].
    pub test_api: bool,
    /// A RabbitMQ definitions file (JSON) whose exchanges, queues and bindings are declared at
    /// start, before any client connects. Needs the `http` cargo feature.
    pub definitions: Option<PathBuf>,
    /// For reproducible test runs only: server-generated names (`amq.gen-` queues,
    /// `amq.ctag-` consumer tags, direct reply-to addresses) come from a generator seeded with
    /// this value, so the same run gives the same names. They are then guessable. `None` (the
    /// default) draws them from the operating system's CSPRNG.
    pub name_seed: Option<u64>,
    /// For fault tests only: the store's file goes through a backend that fails writes,
    /// fsyncs or growth while these switches say so (`data_dir` must be set).
    #[doc(hidden)]
    pub store_faults: Option<std::sync::Arc<dwellmq_store::faults::Faults>>,
    /// AMQP over TLS (RabbitMQ's port 5671), in addition to the plain listeners; `None` (the
    /// default) serves no TLS. Needs the `tls` cargo feature.
    pub tls: Option<TlsConfig>,
}

/// Whether TLS clients must present a certificate, in RabbitMQ's terms (`ssl_options.verify`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVerify {
    /// Client certificates are not asked for (`verify_none`).
    #[default]
    VerifyNone,
    /// Client certificates are asked for and verified against `cacertfile` (`verify_peer`);
    /// a client without one is refused only with `fail_if_no_peer_cert`.
    VerifyPeer,
}

/// The TLS listener's settings (RabbitMQ's `listeners.ssl` and `ssl_options`).
#[derive(Debug, Clone, PartialEq)]
pub struct TlsConfig {
    /// Addresses to serve AMQP over TLS on; port 0 picks a free port.
    pub listen: Vec<SocketAddr>,
    /// The server's certificate chain (PEM), leaf first.
    pub certfile: PathBuf,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub keyfile: PathBuf,
    /// The certificate authorities client certificates are verified against (PEM).
    pub cacertfile: Option<PathBuf>,
    /// Whether to ask for and verify client certificates.
    pub verify: TlsVerify,
    /// With `verify_peer`: refuse clients that present no certificate.
    pub fail_if_no_peer_cert: bool,
}

impl TlsConfig {
    /// TLS on `listen` with this certificate and key, client certificates not asked for.
    pub fn new(
        listen: SocketAddr,
        certfile: impl Into<PathBuf>,
        keyfile: impl Into<PathBuf>,
    ) -> Self {
        TlsConfig {
            listen: vec![listen],
            certfile: certfile.into(),
            keyfile: keyfile.into(),
            cacertfile: None,
            verify: TlsVerify::VerifyNone,
            fail_if_no_peer_cert: false,
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            listen: vec![
                SocketAddr::from((Ipv4Addr::LOCALHOST, 5672)),
                SocketAddr::from((Ipv6Addr::LOCALHOST, 5672)),
            ],
            data_dir: None,
            users: vec![UserConfig::guest()],
            permissions: Vec::new(),
            vhosts: vec!["/".into()],
            limits: Limits::default(),
            clock: ClockConfig::System,
            timer_realtime_priority: None,
            expiry_mode: ExpiryMode::OnTime,
            policies: Vec::new(),
            // Only where the HTTP side is built: `Broker::start` refuses `http` without it.
            http: cfg!(feature = "http").then(|| SocketAddr::from((Ipv4Addr::LOCALHOST, 15672))),
            metrics: None,
            http_allowed_hosts: Vec::new(),
            test_api: false,
            definitions: None,
            name_seed: None,
            store_faults: None,
            tls: None,
        }
    }
}

impl BrokerConfig {
    /// An in-memory broker on an ephemeral loopback port: the CI test double.
    pub fn ephemeral() -> Self {
        BrokerConfig {
            listen: vec![SocketAddr::from((Ipv4Addr::LOCALHOST, 0))],
            data_dir: None,
            // Tests opt in (with port 0): several brokers in one process must not fight over
            // 15672.
            http: None,
            test_api: true,
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

    /// The same, on the system clock reading the wall clock from `wall`, which a test steps.
    #[doc(hidden)]
    pub fn with_test_wall(mut self, wall: &'static dwellmq_timer::SteppableWall) -> Self {
        self.clock = ClockConfig::SystemWithTestWall(wall);
        self
    }

    /// Whether the HTTP listener serves the test double's `/test/...` endpoints: asked for
    /// with `test_api`, or implied by a manual clock (only a test moves time by hand).
    pub fn serves_test_api(&self) -> bool {
        self.test_api || matches!(self.clock, ClockConfig::Manual { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::MemoryWatermark;

    #[test]
    fn sizes_parse_with_rabbitmqs_units() {
        let parse = MemoryWatermark::parse_absolute;
        assert_eq!(parse("1073741824"), Ok(1 << 30));
        for (text, octets) in [
            ("1024k", 1 << 20),
            ("1024KiB", 1 << 20),
            ("512M", 512 << 20),
            ("512MiB", 512 << 20),
            ("2G", 2 << 30),
            ("2gib", 2 << 30),
            ("1T", 1 << 40),
            ("1000kB", 1_000_000),
            ("512MB", 512_000_000),
            ("2GB", 2_000_000_000),
        ] {
            assert_eq!(parse(text), Ok(octets), "{text}");
        }
        for bad in [
            "",
            "GB",
            "2 GB",
            "2.5GB",
            "-1",
            "2PB",
            "99999999999999999999",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("20000000T").is_err(), "overflow is refused");
    }

    #[test]
    fn watermarks_resolve_against_the_available_memory() {
        let gib = 1u64 << 30;
        assert_eq!(MemoryWatermark::DEFAULT.resolve(10 * gib), 4 * gib);
        assert_eq!(MemoryWatermark::Relative(0.0).resolve(10 * gib), 0);
        // Above 1 counts as 1; an absolute size is capped at what is available, as RabbitMQ does.
        assert_eq!(MemoryWatermark::Relative(1.5).resolve(gib), gib);
        assert_eq!(MemoryWatermark::Absolute(3 * gib).resolve(gib), gib);
        assert_eq!(MemoryWatermark::Absolute(1024).resolve(gib), 1024);
        assert!(MemoryWatermark::Relative(f64::NAN).validate().is_err());
        assert!(MemoryWatermark::Relative(-1.0).validate().is_err());
        assert!(MemoryWatermark::Relative(f64::INFINITY).validate().is_err());
        assert!(MemoryWatermark::Relative(0.0).validate().is_ok());
    }
}
