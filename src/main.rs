//! The `dwellmq` server binary.

mod bind_advice;
mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    disable_transparent_huge_pages();
    let command = match cli::parse(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("dwellmq: {message}");
            return ExitCode::from(2);
        }
    };
    let settings = match command {
        cli::Command::Help => {
            println!("{}", cli::usage());
            return ExitCode::SUCCESS;
        }
        cli::Command::Version => {
            println!("dwellmq {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        cli::Command::Run(settings) => settings,
    };
    let filter = EnvFilter::try_new(&settings.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour codes only for a person at a terminal: piped into a file or a log collector they
    // are noise. https://no-color.org asks for none when NO_COLOR is set and not empty.
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dwellmq: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let mut broker = match dwellmq::Broker::start(settings.config).await {
            Ok(broker) => broker,
            Err(e) => {
                eprintln!("dwellmq: {e}");
                if let Some(advice) = bind_advice::advice(&e) {
                    eprintln!("dwellmq: {advice}");
                }
                return ExitCode::FAILURE;
            }
        };
        // The contract with scripts and tests: the first stdout line is the URL; the second,
        // when HTTP is on, the HTTP API's (test fixtures read both).
        println!("{}", broker.amqp_url());
        if let Some(addr) = broker.http_addr() {
            println!("http://{addr}");
        }
        // A test may ask for a restart on the same data (`POST /test/restart`).
        loop {
            tokio::select! {
                () = wait_for_signal() => break,
                () = broker.restart_requested() => match broker.restart().await {
                    Ok(restarted) => broker = restarted,
                    Err(e) => {
                        eprintln!("dwellmq: restart failed: {e}");
                        return ExitCode::FAILURE;
                    }
                },
            }
        }
        tracing::info!("shutting down");
        broker.shutdown().await;
        ExitCode::SUCCESS
    })
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
            eprintln!(
                "dwellmq: cannot opt out of transparent huge pages: {}",
                std::io::Error::last_os_error()
            );
        }
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
