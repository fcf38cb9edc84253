//! Where durable state lives, and what exists at start.

use std::path::PathBuf;

use crate::cli::declare::settings;
use crate::cli::values::switch;

settings! {
    #[derive(clap::Args, Debug, Default)]
    pub(crate) struct Storage {
        /// Where durable state lives
        ///
        /// One redb file, dwellmq.redb, and a LOCK file: a second broker on the same
        /// directory is refused at start.
        #[toml = "data_dir"]
        #[arg(long, env = "DWELLMQ_DATA_DIR", value_name = "DIR", default_value = "./dwellmq-data")]
        data_dir: PathBuf,

        /// Keep everything in memory and write nothing
        ///
        /// Wins over a data directory given at the same level (both flags, both
        /// variables, both in the file). The variable takes 1, true, yes or on.
        #[toml = "in_memory"]
        #[arg(
            long,
            env = "DWELLMQ_IN_MEMORY",
            action = clap::ArgAction::SetTrue,
            value_parser = switch
        )]
        in_memory: bool,

        /// Declare a RabbitMQ definitions export (JSON) at start
        ///
        /// Its vhosts, exchanges, queues, bindings, users, permissions and policies.
        #[toml = "definitions"]
        #[arg(long, env = "DWELLMQ_DEFINITIONS", value_name = "FILE")]
        definitions: PathBuf,
    }
}
