//! `Broker::start`: the configuration checked, every listener bound, the store opened and
//! restored, the configured policies and definitions applied, then the listeners served.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use super::listener_role::{bind, ListenerRole};
use super::{set_policy, BrokerHandle};
use crate::broker::BrokerState;
use crate::config::{BrokerConfig, PolicyConfig, PolicyError};
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
    Tls(#[from] crate::server::tls::TlsError),
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

/// Refuses a configuration that cannot start: no listen address, a bad memory watermark.
fn check_config(config: &BrokerConfig) -> Result<(), StartError> {
    if config.listen.is_empty() {
        return Err(StartError::NoListenAddress);
    }
    config
        .limits
        .memory_high_watermark
        .validate()
        .map_err(StartError::MemoryWatermark)
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
    if let Some(path) = definitions {
        crate::http::definitions::import_file(state, &path).map_err(StartError::Definitions)?;
        tracing::info!(path = %path.display(), "definitions imported");
    }
    Ok(())
}

/// Spawns what serves the broker: a task per listener, the free-space check of the data
/// directory, and the loop serving in-memory connections (whose sender is returned). The
/// HTTP listeners are told the AMQP addresses (`amqp_addrs`) for the overview.
fn serve(
    state: &Arc<BrokerState>,
    listeners: Listeners,
    amqp_addrs: &[SocketAddr],
    shutdown: watch::Receiver<bool>,
) -> (
    Vec<JoinHandle<()>>,
    mpsc::UnboundedSender<tokio::io::DuplexStream>,
) {
    let mut tasks: Vec<JoinHandle<()>> = listeners
        .amqp
        .into_iter()
        .map(|l| tokio::spawn(accept_loop(Arc::clone(state), l, shutdown.clone())))
        .collect();
    for (listener, acceptor) in listeners.tls {
        tasks.push(tokio::spawn(crate::server::tls::accept_loop(
            Arc::clone(state),
            listener,
            acceptor,
            shutdown.clone(),
        )));
    }
    if let Some(listener) = listeners.http {
        let serve = crate::http::serve(
            Arc::clone(state),
            amqp_addrs.to_vec(),
            listener,
            shutdown.clone(),
        );
        tasks.push(tokio::spawn(serve));
    }
    if let Some(listener) = listeners.metrics {
        let serve = crate::http::serve_metrics(
            Arc::clone(state),
            amqp_addrs.to_vec(),
            listener,
            shutdown.clone(),
        );
        tasks.push(tokio::spawn(serve));
    }
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
