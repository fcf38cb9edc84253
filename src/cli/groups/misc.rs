//! The config file, logging, and how queues and the timer behave.

use std::path::PathBuf;

use crate::cli::declare::settings;
use crate::cli::values::{Expiry, RtPriority};

settings! {
    #[derive(clap::Args, Debug, Default)]
    pub(crate) struct Misc {
        /// A TOML config file: these settings, and users, policies, TLS
        ///
        /// Each setting's key is shown as [config: KEY]; users, permissions, policies
        /// and TLS certificates are set only there (see below). The environment and
        /// flags override it.
        #[toml = ""]
        #[arg(long, env = "DWELLMQ_CONFIG", value_name = "FILE")]
        config: PathBuf,

        /// What to log: error, warn, info, debug, trace, or a tracing filter
        ///
        /// A filter names levels per module: dwellmq=debug,info. Logs go to stderr.
        #[toml = "log_level"]
        #[arg(long, env = "DWELLMQ_LOG", value_name = "LEVEL", default_value = "info")]
        log_level: String,

        /// When a message past its TTL expires
        #[toml = "expiry"]
        #[arg(long, env = "DWELLMQ_EXPIRY", value_name = "MODE", default_value = "on-time")]
        expiry: Expiry,

        /// Run the delayed-message timer thread under SCHED_FIFO at priority N
        ///
        /// 1 to 99; Linux only, and it needs CAP_SYS_NICE. Releases stay on time on a
        /// busy host.
        #[toml = "timer_realtime_priority"]
        #[arg(long = "timer-rt-priority", env = "DWELLMQ_TIMER_RT_PRIORITY", value_name = "N")]
        timer_realtime_priority: RtPriority,
    }
}
