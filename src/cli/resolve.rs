//! From the settings, layered, to what `Broker::start` takes.

use dwellmq::{BrokerConfig, ClockConfig, ExpiryMode};

use super::file::FileSettings;
use super::groups::{Access, Limits, Listen, Storage};
use super::values::Addr;
use super::{tables, Cli, Settings, Source};

/// Layers the command line and environment (`cli`, with each setting's `source`) over the
/// config file's settings, and builds the broker's configuration from the result.
pub(crate) fn resolve(
    cli: Cli,
    file: FileSettings,
    source: &dyn Fn(&str) -> Source,
) -> Result<Settings, String> {
    // Read before layering, which forgets where each value came from.
    let http_named = source("http") >= Source::Environment || file.listen.http.is_some();
    let in_memory_wins = in_memory_wins(&cli.storage, &file.storage, source);

    // A message about the file's tables names the file.
    let path = file.path.clone();
    let in_file = |message| match &path {
        Some(path) => format!("{}: {message}", path.display()),
        None => message,
    };
    let given = |id: &str| source(id) >= Source::Environment;
    let listen = cli.listen.over(file.listen, &given);
    let storage = cli.storage.over(file.storage, &given);
    let limits = cli.limits.over(file.limits, &given);
    let test_double = cli.test_double.over(file.test_double, &given);
    let misc = cli.misc.over(file.misc, &given);
    let access = cli.access.over(file.access, &given);

    // The binary's own defaults are in the settings' declarations; the library's fill the rest.
    let mut config = BrokerConfig::default();
    apply_access(&mut config, access).map_err(in_file)?;
    apply_listen(&mut config, listen)?;
    config.data_dir = storage.data_dir.filter(|_| !in_memory_wins);
    config.definitions = storage.definitions;
    apply_limits(&mut config.limits, limits);
    config.clock = (test_double.manual_clock)
        .and_then(|clock| clock.clock())
        .unwrap_or(ClockConfig::System);
    config.name_seed = test_double.name_seed;
    config.test_api = test_double.test_api.unwrap_or(false);
    config.expiry_mode = misc.expiry.map_or(ExpiryMode::OnTime, ExpiryMode::from);
    config.timer_realtime_priority = misc.timer_realtime_priority.map(|p| p.0);
    if !http_named {
        follow_ephemeral_amqp(&mut config);
    }
    Ok(Settings {
        config,
        log_level: misc.log_level.unwrap_or_else(|| "info".into()),
        check: false,
    })
}

/// Whether `in_memory` beats `data_dir`: when it is on and comes from a layer at least as high
/// (in the file, or among the flags, `in_memory` wins whatever the order).
fn in_memory_wins(cli: &Storage, file: &Storage, source: &dyn Fn(&str) -> Source) -> bool {
    let layer = |id: &str, in_file: bool| match source(id) {
        Source::Default if in_file => Source::File,
        layer => layer,
    };
    let on = if source("in_memory") >= Source::Environment {
        cli.in_memory
    } else {
        file.in_memory
    };
    on == Some(true)
        && layer("in_memory", file.in_memory.is_some())
            >= layer("data_dir", file.data_dir.is_some())
}

/// Users, permissions, policies, vhosts and the TLS table: the config file's alone.
fn apply_access(config: &mut BrokerConfig, access: Access) -> Result<(), String> {
    if let Some(vhosts) = access.vhosts {
        config.vhosts = vhosts;
    }
    if let Some(permissions) = &access.permissions {
        config.permissions = tables::permissions(permissions)?;
    }
    if let Some(users) = &access.users {
        config.users = tables::users(users, &config.permissions)?;
    }
    if let Some(policies) = &access.policies {
        config.policies = tables::policies(policies)?;
    }
    config.tls = access.tls.as_ref().map(tables::tls).transpose()?;
    Ok(())
}

fn apply_listen(config: &mut BrokerConfig, listen: Listen) -> Result<(), String> {
    let addrs = |list: Vec<Addr>| list.into_iter().map(|Addr(a)| a).collect();
    if let Some(list) = listen.listen {
        config.listen = addrs(list);
    }
    if let Some(http) = listen.http {
        config.http = http.addr();
    }
    config.metrics = listen.metrics.and_then(|m| m.addr());
    if let Some(list) = listen.tls_listen {
        let tls = config
            .tls
            .as_mut()
            .ok_or("--tls-listen needs certfile and keyfile in the config file's [tls] table")?;
        tls.listen = addrs(list);
    }
    if let Some(hosts) = listen.http_allowed_hosts {
        config.http_allowed_hosts = hosts;
    }
    Ok(())
}

fn apply_limits(l: &mut dwellmq::Limits, limits: Limits) {
    let Limits {
        frame_max,
        channel_max,
        heartbeat,
        max_connections,
        max_message_size,
        handshake_timeout_ms,
        memory_high_watermark,
        memory_high_watermark_paging_ratio,
        store_backlog_bytes,
        store_cache_bytes,
        disk_free_limit,
    } = limits;
    l.frame_max = frame_max.unwrap_or(l.frame_max);
    l.channel_max = channel_max.unwrap_or(l.channel_max);
    l.heartbeat_secs = heartbeat.unwrap_or(l.heartbeat_secs);
    l.max_connections = max_connections.unwrap_or(l.max_connections);
    l.max_message_size = max_message_size.unwrap_or(l.max_message_size);
    if let Some(ms) = handshake_timeout_ms {
        l.handshake_timeout = std::time::Duration::from_millis(ms);
    }
    if let Some(watermark) = memory_high_watermark {
        l.memory_high_watermark = watermark.0;
    }
    if let Some(ratio) = memory_high_watermark_paging_ratio {
        l.memory_paging_ratio = ratio.0;
    }
    l.store_backlog_bytes = store_backlog_bytes.unwrap_or(l.store_backlog_bytes);
    l.store_cache_bytes = store_cache_bytes.unwrap_or(l.store_cache_bytes);
    if let Some(limit) = disk_free_limit {
        l.disk_free_limit = limit.0;
    }
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
