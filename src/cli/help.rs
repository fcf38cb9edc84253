//! The help's prose: what precedes and follows the generated list of options.

pub(crate) const ABOUT: &str = "dwellmq: an AMQP 0-9-1 broker that does delayed messaging properly";

/// After the options in `-h`.
pub(crate) const AFTER_HELP: &str = "\
Each option is also a key of the config file and an environment variable: --help names them,
with the defaults and the file's tables (users, permissions, policies, TLS). Flags override
the environment, which overrides the file.";

/// After the options in `--help`.
pub(crate) const AFTER_LONG_HELP: &str = "\
Each option is also a key of the config file ([config: KEY]) and an environment variable
([env: NAME]); flags override the environment, which overrides the file.

Config file (TOML, --config FILE), e.g.
  listen = [\"127.0.0.1:5672\"]
  data_dir = \"/var/lib/dwellmq\"
  manual_clock = true
  [limits]
  frame_max = 131072
  memory_high_watermark.relative = 0.4      # or .absolute = \"2GiB\" (RabbitMQ's units)
  disk_free_limit.absolute = \"50MB\"         # or .mem_relative = 1.0
and what only the file sets:
  vhosts = [\"/\", \"staging\"]
      The vhosts that exist at start.
  [[users]]
      name, password (or password_hash: RabbitMQ's salted SHA-256, base64), tags
      ([\"administrator\"], ...), loopback_only (default false), vhosts: full permissions
      there (default [\"*\"] unless [[permissions]] name the user). Any [[users]] entry
      replaces the default guest/guest (loopback only; logged at start): list guest too to
      keep it.
  [[permissions]]
      user, vhost (default \"/\"), configure, write, read: RabbitMQ's regular expressions
      (unanchored; \"\" allows nothing).
  [[policies]]
      name, pattern, vhost (default \"/\"), apply_to (default \"all\"), priority (default 0),
      definition = { message-ttl = 60000, ... } (RabbitMQ's keys).
  [tls]
      certfile, keyfile (PEM), listen (default [\"127.0.0.1:5671\"]), cacertfile,
      verify = \"verify_none\" (default) or \"verify_peer\" (ask for a client certificate,
      checked against cacertfile), fail_if_no_peer_cert (default false). A verified client
      certificate's CN may log in with the EXTERNAL mechanism.

Standard output: the AMQP URL, then the HTTP API's URL when HTTP is on, then with --metrics
the metrics URL (http://ADDR/metrics), one per line. Logs go to standard error, in colour only
on a terminal (and not with NO_COLOR set). SIGTERM or Ctrl-C shuts down gracefully: clients
get connection.close 320 (CONNECTION_FORCED) and the broker exits once they have answered
(3 s at most).";

/// `text` without the blanks at the ends of its lines (clap indents the empty lines between an
/// option's paragraphs), ending with one newline.
pub(crate) fn tidy(text: &str) -> String {
    let mut tidy: String = text
        .lines()
        .map(|line| line.trim_end().to_string() + "\n")
        .collect();
    if tidy.is_empty() {
        tidy.push('\n');
    }
    tidy
}
