//! What only the config file sets: vhosts, users, permissions, policies and TLS certificates.
//! Tables are kept as TOML here and read by `tables.rs`, which knows their fields.

use crate::cli::declare::settings;

settings! {
    #[derive(clap::Args, Debug, Default)]
    pub(crate) struct Access {
        /// The vhosts that exist at start
        #[toml = "vhosts"]
        #[arg(skip)]
        vhosts: Vec<String>,

        /// [[users]]: name, password or password_hash, tags, loopback_only, vhosts
        #[toml = "users"]
        #[arg(skip)]
        users: toml::Value,

        /// [[permissions]]: user, vhost, configure, write, read
        #[toml = "permissions"]
        #[arg(skip)]
        permissions: toml::Value,

        /// [[policies]]: name, pattern, vhost, apply_to, priority, definition
        #[toml = "policies"]
        #[arg(skip)]
        policies: toml::Value,

        /// [tls]: certfile, keyfile, cacertfile, listen, verify, fail_if_no_peer_cert
        #[toml = "tls"]
        #[arg(skip)]
        tls: toml::Value,
    }
}
