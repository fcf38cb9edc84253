//! Where the broker listens.

use crate::cli::declare::settings;
use crate::cli::values::{Addr, Listener};

settings! {
    #[derive(clap::Args, Debug, Default)]
    pub(crate) struct Listen {
        /// AMQP address, repeatable; port 0 picks a free port
        ///
        /// The first stdout line is the AMQP URL, with the port bound.
        #[toml = "listen"]
        #[arg(
            long,
            env = "DWELLMQ_LISTEN",
            value_name = "ADDR",
            value_delimiter = ',',
            default_values = default_listen()
        )]
        listen: Vec<Addr>,

        /// HTTP management API, its page and /metrics: an address, or off
        ///
        /// 15672 is RabbitMQ's management port. When every AMQP listener is on
        /// port 0 and no HTTP address is named (flag, variable or file), HTTP takes
        /// a free port too. The second stdout line is its URL.
        #[toml = "http"]
        #[arg(long, env = "DWELLMQ_HTTP", value_name = "ADDR|off", default_value = default_http())]
        http: Listener,

        /// Prometheus /metrics alone on ADDR, or off
        ///
        /// As RabbitMQ's rabbitmq_prometheus on its port 15692. The last stdout line
        /// is its URL (http://ADDR/metrics), with the port bound.
        #[toml = "metrics"]
        #[arg(long, env = "DWELLMQ_METRICS", value_name = "ADDR|off", default_value = "off")]
        metrics: Listener,

        /// AMQP over TLS on ADDR too, repeatable (RabbitMQ's port is 5671)
        ///
        /// Needs certfile and keyfile in the config file's [tls] table; without this
        /// flag, [tls] listen decides (default 127.0.0.1:5671).
        #[toml = "tls.listen"]
        #[arg(long, env = "DWELLMQ_TLS_LISTEN", value_name = "ADDR", value_delimiter = ',')]
        tls_listen: Vec<Addr>,

        /// Host names the HTTP listener answers to, repeatable
        ///
        /// Besides localhost and IP addresses: a Host header naming anything else is
        /// refused with 403, so that a DNS-rebinding page cannot reach the API.
        #[toml = "http_allowed_hosts"]
        #[arg(
            long,
            env = "DWELLMQ_HTTP_ALLOWED_HOSTS",
            value_name = "NAME",
            value_delimiter = ','
        )]
        http_allowed_hosts: Vec<String>,
    }
}

/// The library's default AMQP addresses: both loopbacks, port 5672.
fn default_listen() -> Vec<String> {
    let listen = dwellmq::BrokerConfig::default().listen;
    listen.iter().map(ToString::to_string).collect()
}

/// The library's default HTTP address: 127.0.0.1:15672.
fn default_http() -> String {
    let http = dwellmq::BrokerConfig::default().http;
    http.map_or(Listener::Off, Listener::At).to_string()
}
