//! The `dwellmq` server binary.

mod bind_advice;
mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

use cli::console;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    disable_transparent_huge_pages();
    let settings = match cli::parse(std::env::args_os()) {
        Ok(settings) => settings,
        // Help and the version on stdout with 0, usage errors on stderr with 2.
        Err(cli::Stop::Clap(e)) => return ExitCode::from(console::answer(&e)),
        Err(cli::Stop::Invalid(message)) => {
            console::complain(message);
            return ExitCode::from(2);
        }
    };
    if settings.check {
        return check(&settings.config);
    }
    let filter = EnvFilter::try_new(&settings.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour codes only for a person at a terminal: piped into a file or a log collector they
    // are noise. https://no-color.org asks for none when NO_COLOR is set and not empty.
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        // A log pipe that breaks loses log lines, never the broker (see `console`).
        .with_writer(console::log_writer)
        .log_internal_errors(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            console::complain(format_args!("cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(settings.config))
}

/// `--check`: the data directory's report on stdout; 0 when it is healthy.
fn check(config: &dwellmq::BrokerConfig) -> ExitCode {
    let Some(dir) = &config.data_dir else {
        console::complain("--check needs a data directory (--data-dir DIR)");
        return ExitCode::from(2);
    };
    match dwellmq::check_data_dir(dir) {
        Ok(report) => {
            let healthy = report.is_healthy();
            let _ = console::print_lines(&[report.to_string()]);
            if healthy {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            console::complain(format_args!("{}: {e}", dir.display()));
            ExitCode::FAILURE
        }
    }
}

/// Starts the broker, prints where it listens, and serves until a signal.
async fn serve(config: dwellmq::BrokerConfig) -> ExitCode {
    let mut broker = match dwellmq::Broker::start(config).await {
        Ok(broker) => broker,
        Err(e) => {
            console::complain(&e);
            if let Some(advice) = bind_advice::advice(&e) {
                console::complain(advice);
            }
            return ExitCode::FAILURE;
        }
    };
    announce(&broker);
    // A test may ask for a restart on the same data (`POST /test/restart`).
    loop {
        tokio::select! {
            () = wait_for_signal() => break,
            () = broker.restart_requested() => match broker.restart().await {
                Ok(restarted) => broker = restarted,
                Err(e) => {
                    console::complain(format_args!("restart failed: {e}"));
                    return ExitCode::FAILURE;
                }
            },
        }
    }
    tracing::info!("shutting down");
    broker.shutdown().await;
    ExitCode::SUCCESS
}

/// Opts this process out of transparent huge pages. A broker holding millions of delayed
/// messages grows its heap steadily; with huge pages every growth step is a fault that zeroes
/// 2 MiB in one go, stalling the thread that hit it (the one reading a publisher's socket) for
/// milliseconds on a virtual machine. With 4 KiB pages the same work is spread thinly. This is
/// the same advice Redis gives for its latency.
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // The kernel reads the variadic arguments as full unsigned longs: pass them as such.
        let (disable, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
        // SAFETY: a plain prctl on this process with constant integer arguments.
        #[allow(unsafe_code)]
        let result =
            unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, disable, unused, unused, unused) };
        if result != 0 {
            // Not fatal: only latency suffers. Logging is not set up yet.
            console::complain(format_args!(
                "cannot opt out of transparent huge pages: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
}

/// The contract with scripts and tests: the first stdout line is the AMQP URL; then, when
/// HTTP is on, the HTTP API's (test fixtures read both); then, with --metrics, the metrics
/// URL. A reader that goes away after the lines it wanted stops nothing (see `console`).
fn announce(broker: &dwellmq::BrokerHandle) {
    let mut lines = vec![broker.amqp_url()];
    lines.extend(broker.http_addr().map(|addr| format!("http://{addr}")));
    lines.extend(
        broker
            .metrics_addr()
            .map(|addr| format!("http://{addr}/metrics")),
    );
    match console::print_lines(&lines) {
        Ok(()) => tracing::debug!("the URLs are on stdout"),
        // The log's "listening" lines have the addresses.
        Err(e) => tracing::warn!("stdout is closed or broken ({e}): the URLs are in the log only"),
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
