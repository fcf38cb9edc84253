//! The `dwellmq` server binary.

mod cli;

use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let command = match cli::parse(std::env::args().skip(1), |k| std::env::var(k).ok()) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("dwellmq: {message}");
            return ExitCode::from(2);
        }
    };
    let settings = match command {
        cli::Command::Help => {
            println!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        cli::Command::Version => {
            println!("dwellmq {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        cli::Command::Run(settings) => settings,
    };
    let filter = EnvFilter::try_new(&settings.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
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
        let broker = match dwellmq::Broker::start(settings.config).await {
            Ok(broker) => broker,
            Err(e) => {
                eprintln!("dwellmq: {e}");
                return ExitCode::FAILURE;
            }
        };
        // The contract with scripts and tests: the first stdout line is the URL.
        println!("{}", broker.amqp_url());
        wait_for_signal().await;
        tracing::info!("shutting down");
        broker.shutdown().await;
        ExitCode::SUCCESS
    })
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
