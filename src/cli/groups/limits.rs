//! Limits that keep the broker alive under hostile or careless peers, and its memory and disk
//! alarms. In the config file they sit in the `[limits]` table; each default is the library's
//! (`dwellmq::Limits::default()`).

use crate::cli::declare::settings;
use crate::cli::sizes::{DiskFree, PagingRatio, Watermark};

/// The library's defaults, which the help shows.
fn default() -> dwellmq::Limits {
    dwellmq::Limits::default()
}

settings! {
    #[derive(clap::Args, Debug, Default)]
    pub(crate) struct Limits {
        /// Largest frame offered in connection.tune, octets
        #[toml = "frame_max"]
        #[arg(long, env = "DWELLMQ_FRAME_MAX", value_name = "OCTETS",
              default_value = default().frame_max.to_string())]
        frame_max: u32,

        /// Highest channel number offered in connection.tune
        #[toml = "channel_max"]
        #[arg(long, env = "DWELLMQ_CHANNEL_MAX", value_name = "N",
              default_value = default().channel_max.to_string())]
        channel_max: u16,

        /// Heartbeat interval offered in connection.tune, seconds (0: none)
        #[toml = "heartbeat"]
        #[arg(long, env = "DWELLMQ_HEARTBEAT", value_name = "SECONDS",
              default_value = default().heartbeat_secs.to_string())]
        heartbeat: u16,

        /// Connections beyond this are refused
        #[toml = "max_connections"]
        #[arg(long, env = "DWELLMQ_MAX_CONNECTIONS", value_name = "N",
              default_value = default().max_connections.to_string())]
        max_connections: usize,

        /// Largest message body accepted, octets
        #[toml = "max_message_size"]
        #[arg(long, env = "DWELLMQ_MAX_MESSAGE_SIZE", value_name = "OCTETS",
              default_value = default().max_message_size.to_string())]
        max_message_size: u64,

        /// A client must finish the handshake within this time, ms
        ///
        /// Up to connection.open (RabbitMQ's handshake_timeout).
        #[toml = "handshake_timeout_ms"]
        #[arg(long, env = "DWELLMQ_HANDSHAKE_TIMEOUT_MS", value_name = "MS",
              default_value = default().handshake_timeout.as_millis().to_string())]
        handshake_timeout_ms: u64,

        /// Memory for messages above which publishers are blocked
        ///
        /// What counts is each body plus an estimated overhead per message queued or
        /// held, and output not yet written to clients. A fraction (0.4) of the memory
        /// available: the cgroup's limit if the process has one, else the RAM; or a
        /// size in RabbitMQ's units (2GiB, 512MB) or octets. In the config file as
        /// RabbitMQ writes it: memory_high_watermark.relative = 0.4 or .absolute = "2GiB".
        #[toml = "memory_high_watermark"]
        #[arg(long, env = "DWELLMQ_MEMORY_HIGH_WATERMARK", value_name = "FRACTION|SIZE",
              default_value = Watermark(default().memory_high_watermark).to_string())]
        memory_high_watermark: Watermark,

        /// Above this fraction of the watermark, queues page to disk
        ///
        /// With a data directory: queues leave what lies beyond their window in the
        /// store, transient messages too, so that the alarm blocks publishers only when
        /// the disk cannot keep up. Above 1, they do not page before the alarm.
        #[toml = "memory_high_watermark_paging_ratio"]
        #[arg(long, env = "DWELLMQ_MEMORY_HIGH_WATERMARK_PAGING_RATIO", value_name = "RATIO",
              default_value = PagingRatio(default().memory_paging_ratio).to_string())]
        memory_high_watermark_paging_ratio: PagingRatio,

        /// Octets waiting for the disk above which publishers are blocked
        ///
        /// With a data directory: they are blocked ("low on disk") until half of it is
        /// left.
        #[toml = "store_backlog_bytes"]
        #[arg(long, env = "DWELLMQ_STORE_BACKLOG_BYTES", value_name = "OCTETS",
              default_value = default().store_backlog_bytes.to_string())]
        store_backlog_bytes: u64,

        /// The store's page cache, octets
        ///
        /// With a data directory. The memory watermark does not count it.
        #[toml = "store_cache_bytes"]
        #[arg(long, env = "DWELLMQ_STORE_CACHE_BYTES", value_name = "OCTETS",
              default_value = default().store_cache_bytes.to_string())]
        store_cache_bytes: u64,

        /// Free disk below which publishers are blocked
        ///
        /// With a data directory, on its file system (RabbitMQ's disk_free_limit): a
        /// size (50MB) or octets, or a multiple of the memory available (1.0). In the
        /// config file also disk_free_limit.absolute or .mem_relative, as RabbitMQ's.
        #[toml = "disk_free_limit"]
        #[arg(long, env = "DWELLMQ_DISK_FREE_LIMIT", value_name = "SIZE|FACTOR",
              default_value = DiskFree(default().disk_free_limit).to_string())]
        disk_free_limit: DiskFree,
    }
}
