//! `Broker::start`: the configuration checked, every listener bound, the store opened and
//! restored, the configured policies and definitions applied, then the listeners served.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::listener_role::{bind, ListenerRole};
use super::{set_policy, BrokerHandle};
use crate::broker::BrokerState;
use crate::config::{BrokerConfig, PolicyConfig, PolicyError};
use crate::server::tls::TlsAcceptor;
use crate::server::{accept_loop, in_memory_loop};

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No listen address was configured.
    #[error("no listen address configured")]
    NoListenAddress,
    /// The timer thread could not be started.
    #[error("cannot start the timer thread: {0}")]
    Timer(std::io::Error),
    /// The memory watermark is not a fraction of 0 or more.
    #[error("{0}")]
    MemoryWatermark(String),
    /// A configured policy was refused.
    #[error("policy '{name}' in vhost '{vhost}': {source}")]
    Policy {
        /// The policy's name.
        name: String,
        /// Its vhost.
        vhost: String,
        /// Why.
        source: PolicyError,
    },
    /// The data directory could not be opened (in use by another broker, a damaged or
    /// foreign database file: the message names the file), or what it holds could not be
    /// restored.
    #[error("{0}")]
    Store(String),
    /// A configured user or permission was refused (a bad password hash or pattern, or
    /// permissions for a user who is not configured).
    #[error("{0}")]
    Users(String),
    /// The definitions file could not be read or applied.
    #[error("cannot import definitions: {0}")]
    Definitions(String),
    /// The TLS settings could not be used.
    #[error(transparent)]
    Tls(#[from] crate::server::tls_error::TlsError),
    /// The configuration asks for something this build of dwellmq leaves out: the HTTP API,
    /// `/metrics` or a definitions file without the `http` cargo feature, TLS without `tls`.
    #[error("{setting} needs dwellmq built with its `{feature}` cargo feature")]
    NotBuilt {
        /// What was asked for.
        setting: &'static str,
        /// The cargo feature it needs.
        feature: &'static str,
    },
    /// No configured address could be bound.
    #[error("cannot listen on {addr} ({role}): {source}")]
    Bind {
        /// The address that failed.
        addr: SocketAddr,
        /// What it was to serve.
        role: ListenerRole,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Entry point for embedding.
pub struct Broker;

impl Broker {
    /// Starts a broker inside the current tokio runtime and returns once it listens.
    ///
    /// Port 0 binds a free port; [`BrokerHandle::local_addr`] tells which. When several
    /// addresses are configured (the default listens on IPv4 and IPv6 loopback), addresses
    /// that cannot be bound are skipped with a warning as long as one succeeds.
    pub async fn start(config: BrokerConfig) -> Result<BrokerHandle, StartError> {
        check_config(&config)?;
        // Every address is bound (and TLS certificates read) before the store is opened.
        let listeners = Listeners::bind(&config).await?;
        let addrs = listeners.addrs();
        let configured = (config.policies.clone(), config.definitions.clone());
        let state = open_state(config).await?;
        apply_configured(&state, configured)?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (tasks, in_memory) = serve(&state, listeners, &addrs.amqp, shutdown_rx);
        let timer_thread = match state.manual_clock {
            None => Some(
                crate::broker::timer_thread::spawn(Arc::clone(&state))
                    .map_err(StartError::Timer)?,
            ),
            Some(_) => None,
        };
        addrs.log();
        Ok(BrokerHandle {
            state,
            addrs: addrs.amqp,
            tls_addrs: addrs.tls,
            http_addr: addrs.http,
            metrics_addr: addrs.metrics,
            shutdown,
            tasks,
            timer_thread,
            in_memory,
        })
    }
}

/// Refuses a configuration that cannot start: no listen address, a bad memory watermark,
/// a setting whose cargo feature is off.
fn check_config(config: &BrokerConfig) -> Result<(), StartError> {
    if config.listen.is_empty() {
        return Err(StartError::NoListenAddress);
    }
    check_features(config)?;
    config
        .limits
        .memory_high_watermark
        .validate()
        .map_err(StartError::MemoryWatermark)
}

/// Refuses settings whose cargo feature this build leaves out, before anything is bound: a
/// silently missing listener would only show as a client's "connection refused".
fn check_features(config: &BrokerConfig) -> Result<(), StartError> {
    const HTTP: bool = cfg!(feature = "http");
    const TLS: bool = cfg!(feature = "tls");
    // (asked for, what, its feature, built)
    let wanted = [
        (
            config.http.is_some(),
            "the HTTP API (BrokerConfig::http)",
            "http",
            HTTP,
        ),
        (
            config.metrics.is_some(),
            "/metrics (BrokerConfig::metrics)",
            "http",
            HTTP,
        ),
        (
            config.definitions.is_some(),
            "a definitions file (BrokerConfig::definitions)",
            "http",
            HTTP,
        ),
        (config.tls.is_some(), "TLS (BrokerConfig::tls)", "tls", TLS),
    ];
    match wanted.into_iter().find(|&(set, _, _, built)| set && !built) {
        Some((_, setting, feature, _)) => Err(StartError::NotBuilt { setting, feature }),
        None => Ok(()),
    }
}

/// Every listener the configuration asks for, bound and not yet served.
struct Listeners {
    amqp: Vec<TcpListener>,
    http: Option<TcpListener>,
    metrics: Option<TcpListener>,
    tls: Vec<(TcpListener, TlsAcceptor)>,
}

/// Where the broker listens, as bound.
struct Addrs {
    amqp: Vec<SocketAddr>,
    tls: Vec<SocketAddr>,
    http: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl Listeners {
    async fn bind(config: &BrokerConfig) -> Result<Listeners, StartError> {
        let amqp = bind_amqp(&config.listen).await?;
        let http = bind_optional(config.http, ListenerRole::Http).await?;
        let metrics = bind_optional(config.metrics, ListenerRole::Metrics).await?;
        // TLS: the certificates are read and checked before anything is served.
        let mut tls = Vec::new();
        if let Some(settings) = &config.tls {
            let acceptor = crate::server::tls::acceptor(settings)?;
            for &addr in &settings.listen {
                let listener = bind(addr, ListenerRole::AmqpTls).await?;
                tls.push((listener, acceptor.clone()));
            }
        }
        Ok(Listeners {
            amqp,
            http,
            metrics,
            tls,
        })
    }

    fn addrs(&self) -> Addrs {
        Addrs {
            amqp: self
                .amqp
                .iter()
                .filter_map(|l| l.local_addr().ok())
                .collect(),
            tls: self
                .tls
                .iter()
                .filter_map(|(l, _)| l.local_addr().ok())
                .collect(),
            http: self.http.as_ref().and_then(|l| l.local_addr().ok()),
            metrics: self.metrics.as_ref().and_then(|l| l.local_addr().ok()),
        }
    }
}

/// Binds the AMQP addresses, skipping (with a warning) those that fail as long as one binds;
/// if none does, the first failure.
async fn bind_amqp(addrs: &[SocketAddr]) -> Result<Vec<TcpListener>, StartError> {
    let mut listeners = Vec::new();
    let mut first_error = None;
    for &addr in addrs {
        match bind(addr, ListenerRole::Amqp).await {
            Ok(listener) => listeners.push(listener),
            Err(error) => {
                tracing::warn!(%addr, %error, "cannot listen");
                first_error.get_or_insert(error);
            }
        }
    }
    if listeners.is_empty() {
        return Err(first_error.unwrap_or(StartError::NoListenAddress));
    }
    Ok(listeners)
}

async fn bind_optional(
    addr: Option<SocketAddr>,
    role: ListenerRole,
) -> Result<Option<TcpListener>, StartError> {
    match addr {
        Some(addr) => Ok(Some(bind(addr, role).await?)),
        None => Ok(None),
    }
}

impl Addrs {
    fn log(&self) {
        for addr in &self.amqp {
            tracing::info!(%addr, "listening");
        }
        for addr in &self.tls {
            tracing::info!(%addr, "listening (TLS)");
        }
        if let Some(addr) = self.http {
            tracing::info!(%addr, "HTTP API listening");
        }
        if let Some(addr) = self.metrics {
            tracing::info!(%addr, "Prometheus metrics listening");
        }
    }
}

/// The broker's state: users and permissions from the configuration, the store opened (if
/// there is a data directory) and what it holds restored.
async fn open_state(config: BrokerConfig) -> Result<Arc<BrokerState>, StartError> {
    let access = crate::broker::access::Access::from_config(&config)
        .map_err(|e| StartError::Users(e.to_string()))?;
    let disk = crate::broker::disk_alarm::DiskAlarm::new();
    let store = match config.data_dir.clone() {
        Some(dir) => Some(open_store(&config, dir, &disk).await?),
        None => None,
    };
    let state = BrokerState::with_store(config, access, store, disk);
    let restoring = Arc::clone(&state);
    tokio::task::spawn_blocking(move || crate::broker::restore::restore(&restoring))
        .await
        .map_err(|e| StartError::Store(e.to_string()))?
        .map_err(|e| StartError::Store(e.to_string()))?;
    Ok(state)
}

async fn open_store(
    config: &BrokerConfig,
    dir: PathBuf,
    disk: &Arc<crate::broker::disk_alarm::DiskAlarm>,
) -> Result<Arc<dwellmq_store::Store>, StartError> {
    let options = crate::broker::persist::StoreSettings {
        faults: config.store_faults.clone(),
        after_batch: crate::server::channel::send_settled,
        alarm: disk.hook(),
        backlog_bytes: config.limits.store_backlog_bytes,
        cache_bytes: config.limits.store_cache_bytes,
    };
    // Opening may repair the file after a crash: file IO off the async workers.
    let store = tokio::task::spawn_blocking(move || crate::broker::persist::open(&dir, options))
        .await
        .map_err(|e| StartError::Store(e.to_string()))?
        .map_err(|e| StartError::Store(e.to_string()))?;
    Ok(Arc::new(store))
}

/// The configured policies, then the definitions file (`--definitions`).
fn apply_configured(
    state: &BrokerState,
    (policies, definitions): (Vec<PolicyConfig>, Option<PathBuf>),
) -> Result<(), StartError> {
    for PolicyConfig { vhost, policy } in policies {
        let name = policy.name.clone();
        set_policy(state, &vhost, policy).map_err(|source: PolicyError| StartError::Policy {
            name,
            vhost,
            source,
        })?;
    }
    // Without the `http` feature `check_config` has refused a definitions file.
    #[cfg(feature = "http")]
    if let Some(path) = definitions {
        crate::http::definitions::import_file(state, &path).map_err(StartError::Definitions)?;
        tracing::info!(path = %path.display(), "definitions imported");
    }
    #[cfg(not(feature = "http"))]
    let _ = (state, definitions);
    Ok(())
}

/// Spawns what serves the broker: a task per listener, the free-space check of the data
/// directory, and the loop serving in-memory connections (whose sender is returned).
fn serve(
    state: &Arc<BrokerState>,
    listeners: Listeners,
    amqp_addrs: &[SocketAddr],
    shutdown: watch::Receiver<bool>,
) -> (
    Vec<JoinHandle<()>>,
    mpsc::UnboundedSender<tokio::io::DuplexStream>,
) {
    let Listeners {
        amqp,
        http,
        metrics,
        tls,
    } = listeners;
    let mut tasks: Vec<JoinHandle<()>> = amqp
        .into_iter()
        .map(|l| tokio::spawn(accept_loop(Arc::clone(state), l, shutdown.clone())))
        .collect();
    for (listener, acceptor) in tls {
        tasks.push(tokio::spawn(crate::server::tls::accept_loop(
            Arc::clone(state),
            listener,
            acceptor,
            shutdown.clone(),
        )));
    }
    // Without the `http` feature `check_config` has refused both listeners: they are `None`.
    #[cfg(feature = "http")]
    tasks.extend(serve_http(state, (http, metrics), amqp_addrs, &shutdown));
    #[cfg(not(feature = "http"))]
    let _ = (http, metrics, amqp_addrs);
    if let Some(dir) = &state.config.data_dir {
        // Checked once before the first connection, then every second.
        let check = Arc::new(crate::broker::free_space::FreeSpaceCheck::new(
            dir,
            state.config.limits.disk_free_limit,
            Arc::clone(&state.disk),
        ));
        check.check();
        tasks.push(tokio::spawn(check.run(shutdown.clone())));
    }
    let (in_memory, incoming) = mpsc::unbounded_channel();
    tasks.push(tokio::spawn(in_memory_loop(
        Arc::clone(state),
        incoming,
        shutdown,
    )));
    (tasks, in_memory)
}

/// Spawns the HTTP API's listener and the metrics listener, those that are bound. Both are
/// told the AMQP addresses (`amqp_addrs`) for the overview.
#[cfg(feature = "http")]
fn serve_http(
    state: &Arc<BrokerState>,
    (http, metrics): (Option<TcpListener>, Option<TcpListener>),
    amqp_addrs: &[SocketAddr],
    shutdown: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    if let Some(listener) = http {
        let serve = crate::http::serve(
            Arc::clone(state),
            amqp_addrs.to_vec(),
            listener,
            shutdown.clone(),
        );
        tasks.push(tokio::spawn(serve));
    }
    if let Some(listener) = metrics {
        let serve = crate::http::serve_metrics(
            Arc::clone(state),
            amqp_addrs.to_vec(),
            listener,
            shutdown.clone(),
        );
        tasks.push(tokio::spawn(serve));
    }
    tasks
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, SocketAddr};

    use super::*;
    use crate::config::TlsConfig;

    fn refused_feature(config: &BrokerConfig) -> Option<&'static str> {
        match check_config(config) {
            Err(StartError::NotBuilt { feature, .. }) => Some(feature),
            _ => None,
        }
    }

    /// Each setting is refused exactly in the builds that leave its feature out (run with
    /// and without default features).
    #[test]
    fn a_setting_whose_feature_is_left_out_is_refused() {
        let any = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        // The feature a refusal names, in this build.
        let http = (!cfg!(feature = "http")).then_some("http");
        let tls = (!cfg!(feature = "tls")).then_some("tls");

        assert_eq!(refused_feature(&BrokerConfig::ephemeral()), None);
        let mut config = BrokerConfig::ephemeral();
        config.http = Some(any);
        assert_eq!(refused_feature(&config), http);
        let mut config = BrokerConfig::ephemeral();
        config.metrics = Some(any);
        assert_eq!(refused_feature(&config), http);
        let mut config = BrokerConfig::ephemeral();
        config.definitions = Some("defs.json".into());
        assert_eq!(refused_feature(&config), http);
        let mut config = BrokerConfig::ephemeral();
        config.tls = Some(TlsConfig::new(any, "cert.pem", "key.pem"));
        assert_eq!(refused_feature(&config), tls);
    }

    /// The default configuration starts in every build: HTTP on 15672 only where it is built.
    #[test]
    fn the_default_configuration_asks_only_for_what_is_built() {
        let config = BrokerConfig::default();
        assert_eq!(config.http.is_some(), cfg!(feature = "http"));
        assert_eq!(refused_feature(&config), None);
    }

    #[test]
    fn the_refusal_names_the_setting_and_the_feature() {
        let error = StartError::NotBuilt {
            setting: "TLS (BrokerConfig::tls)",
            feature: "tls",
        };
        assert_eq!(
            error.to_string(),
            "TLS (BrokerConfig::tls) needs dwellmq built with its `tls` cargo feature"
        );
    }
}
